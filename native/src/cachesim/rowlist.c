/* Ordered row lists (OrderedDict semantics) over a pool of nodes. */
#include <stdlib.h>

#include "cachesim_internal.h"

static int grow_pool(pmc_rowlist *l)
{
    size_t pool = l->pool ? 2 * l->pool : 16;
    int64_t *arrays[4] = {l->row, l->val, l->prev, l->next};
    for (int a = 0; a < 4; a++) {
        int64_t *p = realloc(arrays[a], pool * sizeof *p);
        if (!p) {
            l->row = arrays[0], l->val = arrays[1], l->prev = arrays[2], l->next = arrays[3];
            return PMC_CACHESIM_ENOMEM;
        }
        arrays[a] = p;
    }
    l->row = arrays[0], l->val = arrays[1], l->prev = arrays[2], l->next = arrays[3];
    /* The new nodes join the free chain, lowest index first. */
    for (size_t i = l->pool; i < pool; i++)
        l->next[i] = (i + 1 < pool) ? (int64_t)(i + 1) : l->free_head;
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
    free(l->row);
    free(l->val);
    free(l->prev);
    free(l->next);
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
    l->free_head = l->next[n];
    l->row[n] = row;
    l->val[n] = val;
    l->prev[n] = l->tail;
    l->next[n] = -1;
    if (l->tail >= 0)
        l->next[l->tail] = n;
    else
        l->head = n;
    l->tail = n;
    l->len++;
    return PMC_CACHESIM_OK;
}

static void unlink_node(pmc_rowlist *l, int64_t n)
{
    if (l->prev[n] >= 0)
        l->next[l->prev[n]] = l->next[n];
    else
        l->head = l->next[n];
    if (l->next[n] >= 0)
        l->prev[l->next[n]] = l->prev[n];
    else
        l->tail = l->prev[n];
}

void pmc_rowlist_to_end(pmc_rowlist *l, int64_t n)
{
    if (l->tail == n)
        return;
    unlink_node(l, n);
    l->prev[n] = l->tail;
    l->next[n] = -1;
    l->next[l->tail] = n;
    l->tail = n;
}

void pmc_rowlist_remove(pmc_rowlist *l, int64_t n)
{
    unlink_node(l, n);
    pmc_rowmap_del(&l->index, l->row[n]);
    l->next[n] = l->free_head;
    l->free_head = n;
    l->len--;
}
