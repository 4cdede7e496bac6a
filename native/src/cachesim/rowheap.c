/* Indexed binary min-heap of rows: keys change in place, no stale entries. */
#include <stdlib.h>

#include "cachesim_internal.h"

static int grow_pool(pmc_rowheap *h)
{
    size_t pool = h->pool ? 2 * h->pool : 16;
    int64_t *heap = realloc(h->heap, pool * sizeof *heap);
    if (heap)
        h->heap = heap;
    int64_t *row = realloc(h->row, pool * sizeof *row);
    if (row)
        h->row = row;
    int64_t *pos = realloc(h->pos, pool * sizeof *pos);
    if (pos)
        h->pos = pos;
    int64_t *key_b = realloc(h->key_b, pool * sizeof *key_b);
    if (key_b)
        h->key_b = key_b;
    double *key_a = realloc(h->key_a, pool * sizeof *key_a);
    if (key_a)
        h->key_a = key_a;
    if (!heap || !row || !pos || !key_b || !key_a)
        return PMC_CACHESIM_ENOMEM;
    /* Free nodes are chained through pos. */
    for (size_t i = h->pool; i < pool; i++)
        h->pos[i] = (i + 1 < pool) ? (int64_t)(i + 1) : h->free_head;
    h->free_head = (int64_t)h->pool;
    h->pool = pool;
    return PMC_CACHESIM_OK;
}

int pmc_rowheap_init(pmc_rowheap *h, size_t hint)
{
    *h = (pmc_rowheap){.free_head = -1};
    int rc = pmc_rowmap_init(&h->index, hint);
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
    free(h->key_b);
    free(h->key_a);
    *h = (pmc_rowheap){.free_head = -1};
}

static int less(const pmc_rowheap *h, int64_t x, int64_t y)
{
    return h->key_a[x] < h->key_a[y] || (h->key_a[x] == h->key_a[y] && h->key_b[x] < h->key_b[y]);
}

static void put_at(pmc_rowheap *h, size_t i, int64_t node)
{
    h->heap[i] = node;
    h->pos[node] = (int64_t)i;
}

static void sift_up(pmc_rowheap *h, size_t i)
{
    int64_t node = h->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!less(h, node, h->heap[parent]))
            break;
        put_at(h, i, h->heap[parent]);
        i = parent;
    }
    put_at(h, i, node);
}

static void sift_down(pmc_rowheap *h, size_t i)
{
    int64_t node = h->heap[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->len)
            break;
        if (child + 1 < h->len && less(h, h->heap[child + 1], h->heap[child]))
            child++;
        if (!less(h, h->heap[child], node))
            break;
        put_at(h, i, h->heap[child]);
        i = child;
    }
    put_at(h, i, node);
}

int pmc_rowheap_set(pmc_rowheap *h, int64_t row, double a, int64_t b)
{
    int64_t *found = pmc_rowmap_find(&h->index, row);
    if (found) {
        int64_t node = *found;
        int up = a < h->key_a[node] || (a == h->key_a[node] && b < h->key_b[node]);
        h->key_a[node] = a;
        h->key_b[node] = b;
        if (up)
            sift_up(h, (size_t)h->pos[node]);
        else
            sift_down(h, (size_t)h->pos[node]);
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
    h->key_a[node] = a;
    h->key_b[node] = b;
    put_at(h, h->len, node);
    h->len++;
    sift_up(h, h->len - 1);
    return PMC_CACHESIM_OK;
}

int64_t pmc_rowheap_top(const pmc_rowheap *h)
{
    return h->len ? h->row[h->heap[0]] : -1;
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
    if (i < h->len) {
        int64_t last = h->heap[h->len];
        put_at(h, i, last);
        if (i > 0 && less(h, last, h->heap[(i - 1) / 2]))
            sift_up(h, i);
        else
            sift_down(h, i);
    }
    h->pos[node] = h->free_head;
    h->free_head = node;
    return 1;
}
