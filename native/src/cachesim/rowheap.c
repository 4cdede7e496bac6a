/* Indexed 4-ary min-heap of rows: keys change in place, no stale entries.
 * Four children a node halve the depth of a binary heap, and they sit in
 * one or two cache lines, so a sift touches fewer lines. */
#include <stdlib.h>

#include "cachesim_internal.h"

static int grow_pool(pmc_rowheap *h)
{
    size_t pool = h->pool ? 2 * h->pool : 16;
    pmc_heap_entry *heap = realloc(h->heap, pool * sizeof *heap);
    if (heap)
        h->heap = heap;
    int64_t *row = realloc(h->row, pool * sizeof *row);
    if (row)
        h->row = row;
    int64_t *pos = realloc(h->pos, pool * sizeof *pos);
    if (pos)
        h->pos = pos;
    if (!heap || !row || !pos)
        return PMC_CACHESIM_ENOMEM;
    for (size_t i = h->pool; i < pool; i++)
        h->pos[i] = (i + 1 < pool) ? (int64_t)(i + 1) : h->free_head;
    h->free_head = (int64_t)h->pool;
    h->pool = pool;
    return PMC_CACHESIM_OK;
}

int pmc_rowheap_init(pmc_rowheap *h, size_t hint, int64_t rows)
{
    *h = (pmc_rowheap){.free_head = -1};
    int rc = pmc_rowmap_init(&h->index, hint, rows);
    while (rc == PMC_CACHESIM_OK && (h->pool < hint || h->pool == 0))
        rc = grow_pool(h);
    if (rc != PMC_CACHESIM_OK)
        pmc_rowheap_free(h);
    return rc;
}

void pmc_rowheap_free(pmc_rowheap *h)
{
    pmc_rowmap_free(&h->index);
    free(h->heap);
    free(h->row);
    free(h->pos);
    *h = (pmc_rowheap){.free_head = -1};
}

static int less(const pmc_heap_entry *x, const pmc_heap_entry *y)
{
    return x->a < y->a || (x->a == y->a && x->b < y->b);
}

static void put_at(pmc_rowheap *h, size_t i, pmc_heap_entry e)
{
    h->heap[i] = e;
    h->pos[e.node] = (int64_t)i;
}

enum { ARITY = 4 };

static void sift_up(pmc_rowheap *h, size_t i, pmc_heap_entry e)
{
    while (i > 0) {
        size_t parent = (i - 1) / ARITY;
        if (!less(&e, &h->heap[parent]))
            break;
        put_at(h, i, h->heap[parent]);
        i = parent;
    }
    put_at(h, i, e);
}

static void sift_down(pmc_rowheap *h, size_t i, pmc_heap_entry e)
{
    for (;;) {
        size_t first = ARITY * i + 1;
        if (first >= h->len)
            break;
        size_t end = first + ARITY < h->len ? first + ARITY : h->len, child = first;
        for (size_t c = first + 1; c < end; c++)
            if (less(&h->heap[c], &h->heap[child]))
                child = c;
        if (!less(&h->heap[child], &e))
            break;
        put_at(h, i, h->heap[child]);
        i = child;
    }
    put_at(h, i, e);
}

/* Puts e at i (which held an entry, or is the new last place) where it belongs. */
static void settle(pmc_rowheap *h, size_t i, pmc_heap_entry e)
{
    if (i > 0 && less(&e, &h->heap[(i - 1) / ARITY]))
        sift_up(h, i, e);
    else
        sift_down(h, i, e);
}

int pmc_rowheap_set(pmc_rowheap *h, int64_t row, double a, int64_t b)
{
    int64_t *found = pmc_rowmap_find(&h->index, row);
    if (found) {
        int64_t node = *found;
        settle(h, (size_t)h->pos[node], (pmc_heap_entry){a, b, node});
        return PMC_CACHESIM_OK;
    }
    if (h->free_head < 0) {
        int rc = grow_pool(h);
        if (rc != PMC_CACHESIM_OK)
            return rc;
    }
    int64_t node = h->free_head;
    int rc = pmc_rowmap_put(&h->index, row, node, NULL);
    if (rc != PMC_CACHESIM_OK)
        return rc;
    h->free_head = h->pos[node];
    h->row[node] = row;
    h->len++;
    sift_up(h, h->len - 1, (pmc_heap_entry){a, b, node});
    return PMC_CACHESIM_OK;
}

int64_t pmc_rowheap_top(const pmc_rowheap *h)
{
    return h->len ? h->row[h->heap[0].node] : -1;
}

int pmc_rowheap_remove(pmc_rowheap *h, int64_t row)
{
    int64_t *found = pmc_rowmap_find(&h->index, row);
    if (!found)
        return 0;
    int64_t node = *found;
    size_t i = (size_t)h->pos[node];
    pmc_rowmap_del(&h->index, row);
    h->len--;
    if (i < h->len)
        settle(h, i, h->heap[h->len]);
    h->pos[node] = h->free_head;
    h->free_head = node;
    return 1;
}
