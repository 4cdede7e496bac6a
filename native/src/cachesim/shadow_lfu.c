/* LFU shadow: evict the held row of fewest lookups since the start (held or
 * not), the one looked up longest ago among equals. */
#include <stdlib.h>

#include "cachesim_internal.h"

typedef struct {
    pmc_rowheap held;  /* key (count, time of the last lookup) */
    pmc_rowmap counts; /* every row ever looked up */
} lfu_state;

static int init(pmc_shadow *s)
{
    lfu_state *st = calloc(1, sizeof *st);
    if (!st)
        return PMC_CACHESIM_ENOMEM;
    size_t cap = (size_t)s->config.capacity;
    int rc = pmc_rowheap_init(&st->held, cap, s->config.rows);
    if (rc == PMC_CACHESIM_OK) {
        rc = pmc_rowmap_init(&st->counts, 2 * cap, s->config.rows);
        if (rc != PMC_CACHESIM_OK)
            pmc_rowheap_free(&st->held);
    }
    if (rc != PMC_CACHESIM_OK) {
        free(st);
        return rc;
    }
    s->state = st;
    return PMC_CACHESIM_OK;
}

static void destroy(pmc_shadow *s)
{
    lfu_state *st = s->state;
    pmc_rowheap_free(&st->held);
    pmc_rowmap_free(&st->counts);
    free(st);
}

static int touch(lfu_state *st, int64_t row, int64_t t)
{
    int64_t *c = pmc_rowmap_find(&st->counts, row);
    int64_t count = c ? *c + 1 : 1;
    if (c)
        *c = count;
    else {
        int rc = pmc_rowmap_put(&st->counts, row, count, NULL);
        if (rc != PMC_CACHESIM_OK)
            return rc;
    }
    return pmc_rowheap_set(&st->held, row, (double)count, t);
}

static int access_row(pmc_shadow *s, int64_t row, int64_t t, double rank, uint8_t *hit, int64_t *evicted)
{
    (void)rank;
    lfu_state *st = s->state;
    *evicted = -1;
    *hit = pmc_rowmap_find(&st->held.index, row) != NULL;
    if (!*hit && (int64_t)st->held.len >= s->config.capacity) {
        *evicted = pmc_rowheap_top(&st->held);
        pmc_rowheap_remove(&st->held, *evicted);
    }
    return touch(st, row, t);
}

static int holds(const pmc_shadow *s, int64_t row)
{
    const lfu_state *st = s->state;
    return pmc_rowmap_find(&st->held.index, row) != NULL;
}

static uint64_t len(const pmc_shadow *s)
{
    return ((const lfu_state *)s->state)->held.len;
}

const pmc_shadow_ops pmc_shadow_lfu_ops = {init, destroy, access_row, holds, len};
