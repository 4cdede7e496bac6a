/* LRU shadow: evict the row looked up longest ago. */
#include <stdlib.h>

#include "cachesim_internal.h"

static int init(pmc_shadow *s)
{
    pmc_rowlist *l = malloc(sizeof *l);
    if (!l)
        return PMC_CACHESIM_ENOMEM;
    int rc = pmc_rowlist_init(l, (size_t)s->config.capacity, s->config.rows);
    if (rc != PMC_CACHESIM_OK) {
        free(l);
        return rc;
    }
    s->state = l;
    return PMC_CACHESIM_OK;
}

static void destroy(pmc_shadow *s)
{
    pmc_rowlist_free(s->state);
    free(s->state);
}

static int access_row(pmc_shadow *s, int64_t row, int64_t t, double rank, uint8_t *hit, int64_t *evicted)
{
    (void)t, (void)rank;
    pmc_rowlist *l = s->state;
    int64_t node = pmc_rowlist_find(l, row);
    *evicted = -1;
    if (node >= 0) {
        pmc_rowlist_to_end(l, node);
        *hit = 1;
        return PMC_CACHESIM_OK;
    }
    *hit = 0;
    if ((int64_t)l->len >= s->config.capacity) {
        *evicted = l->nodes[l->head].row;
        pmc_rowlist_remove(l, l->head);
    }
    return pmc_rowlist_append(l, row, 0);
}

static int holds(const pmc_shadow *s, int64_t row)
{
    return pmc_rowlist_find(s->state, row) >= 0;
}

static uint64_t len(const pmc_shadow *s)
{
    return ((const pmc_rowlist *)s->state)->len;
}

static void prefetch(const pmc_shadow *s, int64_t row, int stage)
{
    pmc_rowlist_prefetch(s->state, row, stage);
}

const pmc_shadow_ops pmc_shadow_lru_ops = {init, destroy, access_row, holds, len, prefetch};
