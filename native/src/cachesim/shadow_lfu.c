/* LFU shadow: evict the held row of fewest lookups since the start (held or
 * not), the one looked up longest ago among equals. */
#include <stdlib.h>

#include "cachesim_internal.h"

static int init(pmc_shadow *s)
{
    pmc_lfu_order *o = malloc(sizeof *o);
    if (!o)
        return PMC_CACHESIM_ENOMEM;
    int rc = pmc_lfu_order_init(o, (size_t)s->config.capacity, s->config.rows);
    if (rc != PMC_CACHESIM_OK) {
        free(o);
        return rc;
    }
    s->state = o;
    return PMC_CACHESIM_OK;
}

static void destroy(pmc_shadow *s)
{
    pmc_lfu_order_free(s->state);
    free(s->state);
}

static int access_row(pmc_shadow *s, int64_t row, int64_t t, double rank, uint8_t *hit, int64_t *evicted)
{
    (void)rank;
    pmc_lfu_order *o = s->state;
    *evicted = -1;
    *hit = pmc_rowmap_find(&o->held.index, row) != NULL;
    if (!*hit && (int64_t)o->held.len >= s->config.capacity) {
        *evicted = pmc_rowheap_top(&o->held);
        pmc_rowheap_remove(&o->held, *evicted);
    }
    return pmc_lfu_order_touch(o, row, t);
}

static int holds(const pmc_shadow *s, int64_t row)
{
    const pmc_lfu_order *o = s->state;
    return pmc_rowmap_find(&o->held.index, row) != NULL;
}

static uint64_t len(const pmc_shadow *s)
{
    return ((const pmc_lfu_order *)s->state)->held.len;
}

static void prefetch(const pmc_shadow *s, int64_t row, int stage)
{
    const pmc_lfu_order *o = s->state;
    pmc_rowheap_prefetch(&o->held, row, stage);
    if (stage == 0)
        pmc_rowmap_prefetch(&o->counts, row);
}

const pmc_shadow_ops pmc_shadow_lfu_ops = {init, destroy, access_row, holds, len, prefetch};
