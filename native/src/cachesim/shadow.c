/* Cache shadows: checking a configuration, serving a batch. */
#include <stdlib.h>

#include "cachesim_internal.h"

#define fail pmc_cachesim_fail

static const pmc_shadow_ops *const OPS[PMC_SHADOW_KINDS] = {
    [PMC_SHADOW_LRU] = &pmc_shadow_lru_ops,         [PMC_SHADOW_LFU] = &pmc_shadow_lfu_ops,
    [PMC_SHADOW_ARC] = &pmc_shadow_arc_ops,         [PMC_SHADOW_LECAR] = &pmc_shadow_lecar_ops,
    [PMC_SHADOW_TINYLFU] = &pmc_shadow_tinylfu_ops, [PMC_SHADOW_PRIORITY] = &pmc_shadow_priority_ops,
};

static int check_config(const pmc_shadow_config *c, char *msg, size_t msg_len)
{
    if (c->kind < 0 || c->kind >= PMC_SHADOW_KINDS)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "kind %d is not a shadow kind (0..%d)", (int)c->kind,
                    PMC_SHADOW_KINDS - 1);
    if (c->capacity < 1 || c->capacity > PMC_CACHESIM_MAX_ROWS)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "capacity must be 1..2^40 rows, got %lld",
                    (long long)c->capacity);
    if (c->rows < 0 || c->rows > PMC_CACHESIM_MAX_ROWS)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "rows must be 0..2^40 (0: unbounded), got %lld",
                    (long long)c->rows);
    if (c->kind == PMC_SHADOW_LECAR) {
        if (!(c->learning_rate > 0))
            return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "learning_rate must be positive, got %g",
                        c->learning_rate);
        if (!(c->discount > 0 && c->discount <= 1))
            return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "discount must be in (0, 1], got %g", c->discount);
        if (c->seed_len < 1 || c->seed_len > PMC_SHADOW_SEED_WORDS)
            return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "seed_len must be 1..%d words, got %u",
                        PMC_SHADOW_SEED_WORDS, c->seed_len);
    }
    if (c->kind == PMC_SHADOW_TINYLFU) {
        if (c->window_rows < 1 || c->window_rows > c->capacity)
            return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "window_rows must be 1..capacity (%lld), got %lld",
                        (long long)c->capacity, (long long)c->window_rows);
        if (c->sample < 1)
            return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "sample must be at least 1 lookup, got %lld",
                        (long long)c->sample);
    }
    return PMC_CACHESIM_OK;
}

int pmc_shadow_new(const pmc_shadow_config *config, pmc_shadow **out, char *msg, size_t msg_len)
{
    if (!out)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "out is NULL");
    *out = NULL;
    if (!config)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "config is NULL");
    int rc = check_config(config, msg, msg_len);
    if (rc != PMC_CACHESIM_OK)
        return rc;
    pmc_shadow *s = calloc(1, sizeof *s);
    if (!s)
        return fail(PMC_CACHESIM_ENOMEM, msg, msg_len, "no memory for a shadow");
    s->ops = OPS[config->kind];
    s->config = *config;
    rc = s->ops->init(s);
    if (rc != PMC_CACHESIM_OK) {
        free(s);
        return fail(rc, msg, msg_len, "no memory for a shadow of %lld rows", (long long)config->capacity);
    }
    *out = s;
    return PMC_CACHESIM_OK;
}

void pmc_shadow_free(pmc_shadow *s)
{
    if (!s)
        return;
    s->ops->destroy(s);
    free(s);
}

int pmc_shadow_run(pmc_shadow *s, const int64_t *ids, uint64_t n, int64_t t0, const double *offsets,
                   uint8_t *hits, int64_t *evicted, char *msg, size_t msg_len)
{
    if (!s)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "shadow is NULL");
    if (n && (!ids || !hits || !evicted))
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "ids, hits and evicted must not be NULL");
    int priority = s->config.kind == PMC_SHADOW_PRIORITY;
    if (priority && n && !offsets)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "the priority shadow needs offsets");
    if (t0 < 0 || (uint64_t)t0 > (uint64_t)INT64_MAX - n)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "t0 = %lld is out of range", (long long)t0);
    /* Checked before anything changes, so a bad batch leaves the shadow as it was. */
    int64_t rows = s->config.rows;
    for (uint64_t k = 0; k < n; k++)
        if (ids[k] < 0 || (rows > 0 && ids[k] >= rows))
            return rows > 0 ? fail(PMC_CACHESIM_EINVAL, msg, msg_len, "ids[%llu] = %lld: rows must be in [0, %lld)",
                                   (unsigned long long)k, (long long)ids[k], (long long)rows)
                            : fail(PMC_CACHESIM_EINVAL, msg, msg_len, "ids[%llu] = %lld: rows must be >= 0",
                                   (unsigned long long)k, (long long)ids[k]);
    /* Each stage of a row's prefetch some lookups before its own (see pmc_shadow_ops). A prefetch
     * never changes what a lookup finds: what the lookups in between move is only fetched for nothing. */
    static const uint64_t ahead[3] = {16, 8, 4}; /* lookups ahead, per stage */
    for (int stage = 0; stage < 3; stage++)
        for (uint64_t k = 0; k < n && k < ahead[stage]; k++)
            s->ops->prefetch(s, ids[k], stage);
    for (uint64_t k = 0; k < n; k++) {
        for (int stage = 0; stage < 3; stage++)
            if (k + ahead[stage] < n)
                s->ops->prefetch(s, ids[k + ahead[stage]], stage);
        int64_t t = t0 + (int64_t)k;
        /* The reference adds the time (an integer) to the offset in double precision. */
        double rank = priority ? (double)t + offsets[k] : 0.0;
        int rc = s->ops->access(s, ids[k], t, rank, &hits[k], &evicted[k]);
        if (rc != PMC_CACHESIM_OK)
            return fail(rc, msg, msg_len, "out of memory at lookup %llu of the batch", (unsigned long long)k);
    }
    return PMC_CACHESIM_OK;
}

int pmc_shadow_holds(const pmc_shadow *s, int64_t row)
{
    return s && row >= 0 && (s->config.rows == 0 || row < s->config.rows) && s->ops->holds(s, row);
}

uint64_t pmc_shadow_len(const pmc_shadow *s)
{
    return s ? s->ops->len(s) : 0;
}
