/* Priority shadow (the learned order): a row looked up at t ranks
 * (t + offset, t); the smallest rank goes first. */
#include <stdlib.h>

#include "cachesim_internal.h"

static int init(pmc_shadow *s)
{
    pmc_rowheap *h = malloc(sizeof *h);
    if (!h)
        return PMC_CACHESIM_ENOMEM;
    int rc = pmc_rowheap_init(h, (size_t)s->config.capacity, s->config.rows);
    if (rc != PMC_CACHESIM_OK) {
        free(h);
        return rc;
    }
    s->state = h;
    return PMC_CACHESIM_OK;
}

static void destroy(pmc_shadow *s)
{
    pmc_rowheap_free(s->state);
    free(s->state);
}

static int access_row(pmc_shadow *s, int64_t row, int64_t t, double rank, uint8_t *hit, int64_t *evicted)
{
    pmc_rowheap *h = s->state;
    *evicted = -1;
    *hit = pmc_rowmap_find(&h->index, row) != NULL;
    if (!*hit && (int64_t)h->len >= s->config.capacity) {
        *evicted = pmc_rowheap_top(h);
        pmc_rowheap_remove(h, *evicted);
    }
    return pmc_rowheap_set(h, row, rank, t);
}

static int holds(const pmc_shadow *s, int64_t row)
{
    const pmc_rowheap *h = s->state;
    return pmc_rowmap_find(&h->index, row) != NULL;
}

static uint64_t len(const pmc_shadow *s)
{
    return ((const pmc_rowheap *)s->state)->len;
}

static void prefetch(const pmc_shadow *s, int64_t row, int stage)
{
    pmc_rowheap_prefetch(s->state, row, stage);
}

const pmc_shadow_ops pmc_shadow_priority_ops = {init, destroy, access_row, holds, len, prefetch};
