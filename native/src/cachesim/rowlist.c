/* Ordered row lists (OrderedDict semantics) over a pool of nodes. */
#include <stdlib.h>

#include "cachesim_internal.h"

static int grow_pool(pmc_rowlist *l)
{
    size_t pool = l->pool ? 2 * l->pool : 16;
    pmc_list_node *p = realloc(l->nodes, pool * sizeof *p);
    if (!p)
        return PMC_CACHESIM_ENOMEM;
    l->nodes = p;
    /* The new nodes join the free chain, lowest index first. */
    for (size_t i = l->pool; i < pool; i++)
        l->nodes[i].next = (i + 1 < pool) ? (int64_t)(i + 1) : l->free_head;
    l->free_head = (int64_t)l->pool;
    l->pool = pool;
    return PMC_CACHESIM_OK;
}

int pmc_rowlist_init(pmc_rowlist *l, size_t hint, int64_t rows)
{
    *l = (pmc_rowlist){.head = -1, .tail = -1, .free_head = -1};
    int rc = pmc_rowmap_init(&l->index, hint, rows);
    if (rc != PMC_CACHESIM_OK)
        return rc;
    while (l->pool < hint && rc == PMC_CACHESIM_OK)
        rc = grow_pool(l);
    if (rc == PMC_CACHESIM_OK && l->pool == 0)
        rc = grow_pool(l);
    if (rc != PMC_CACHESIM_OK)
        pmc_rowlist_free(l);
    return rc;
}

void pmc_rowlist_free(pmc_rowlist *l)
{
    pmc_rowmap_free(&l->index);
    free(l->nodes);
    *l = (pmc_rowlist){.head = -1, .tail = -1, .free_head = -1};
}

int pmc_rowlist_append(pmc_rowlist *l, int64_t row, int64_t val)
{
    if (l->free_head < 0) {
        int rc = grow_pool(l);
        if (rc != PMC_CACHESIM_OK)
            return rc;
    }
    int64_t n = l->free_head;
    int rc = pmc_rowmap_put(&l->index, row, n, NULL);
    if (rc != PMC_CACHESIM_OK)
        return rc;
    l->free_head = l->nodes[n].next;
    l->nodes[n].row = row;
    l->nodes[n].val = val;
    l->nodes[n].prev = l->tail;
    l->nodes[n].next = -1;
    if (l->tail >= 0)
        l->nodes[l->tail].next = n;
    else
        l->head = n;
    l->tail = n;
    l->len++;
    return PMC_CACHESIM_OK;
}

static void unlink_node(pmc_rowlist *l, int64_t n)
{
    if (l->nodes[n].prev >= 0)
        l->nodes[l->nodes[n].prev].next = l->nodes[n].next;
    else
        l->head = l->nodes[n].next;
    if (l->nodes[n].next >= 0)
        l->nodes[l->nodes[n].next].prev = l->nodes[n].prev;
    else
        l->tail = l->nodes[n].prev;
}

void pmc_rowlist_to_end(pmc_rowlist *l, int64_t n)
{
    if (l->tail == n)
        return;
    unlink_node(l, n);
    l->nodes[n].prev = l->tail;
    l->nodes[n].next = -1;
    l->nodes[l->tail].next = n;
    l->tail = n;
}

void pmc_rowlist_remove(pmc_rowlist *l, int64_t n)
{
    unlink_node(l, n);
    pmc_rowmap_del(&l->index, l->nodes[n].row);
    l->nodes[n].next = l->free_head;
    l->free_head = n;
    l->len--;
}
