/* Per-lookup features of an access stream, lookup by lookup in time order
 * (see pymcoll_cachesim.h for the list). Sequential, so each lookup sees
 * exactly the lookups before it; the decayed counts follow
 * v <- (v + 1) * exp(-(t - last) / tau), the recurrence of their sum. */
#include <math.h>
#include <stdlib.h>

#include "cachesim_internal.h"

#define fail pmc_cachesim_fail

/* Gaps and counts below this come from tables (the same values the
 * functions give: each entry is computed by the expression it replaces). */
enum { SMALL = 4096 };

struct pmc_features {
    int64_t rows;
    float log1p_small[SMALL];           /* (float)log1p(k) */
    double *decay_small;                /* per scale: exp(-k / tau) */
    uint32_t n_scales;
    double sentinel;
    double inv_tau[PMC_FEATURES_MAX_SCALES];
    unsigned char *recs; /* one record a row, `stride` bytes apart (whole cache lines) */
    size_t stride;
};

/* What is known of one row: a lookup reads and writes one cache line (up
 * to 4 scales) instead of one line in each of five arrays. */
typedef struct {
    int64_t count, last, prev_gap;
    int64_t in_batch;  /* its lookups in the batch being computed (0 between batches) */
    double decayed[];  /* per scale: the decayed count just after its last lookup */
} row_rec;

static row_rec *rec_of(const pmc_features *f, int64_t r)
{
    return (row_rec *)(void *)(f->recs + (size_t)r * f->stride);
}

void pmc_features_free(pmc_features *f)
{
    if (!f)
        return;
    free(f->recs);
    free(f->decay_small);
    free(f);
}

int pmc_features_new(int64_t rows, const double *scales, uint32_t n_scales, double sentinel, pmc_features **out,
                     char *msg, size_t msg_len)
{
    if (!out)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "out is NULL");
    *out = NULL;
    if (rows < 1 || rows > PMC_CACHESIM_MAX_ROWS)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "rows must be 1..2^40, got %lld", (long long)rows);
    if (n_scales > PMC_FEATURES_MAX_SCALES || (n_scales && !scales))
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "n_scales must be 0..%d with scales given, got %u",
                    PMC_FEATURES_MAX_SCALES, n_scales);
    for (uint32_t k = 0; k < n_scales; k++)
        if (!(scales[k] > 0) || isinf(scales[k]))
            return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "scales[%u] = %g: time scales must be positive",
                        k, scales[k]);
    pmc_features *f = calloc(1, sizeof *f);
    if (!f)
        return fail(PMC_CACHESIM_ENOMEM, msg, msg_len, "no memory for the features");
    size_t r = (size_t)rows;
    f->rows = rows;
    f->n_scales = n_scales;
    f->sentinel = sentinel;
    for (uint32_t k = 0; k < n_scales; k++)
        f->inv_tau[k] = 1.0 / scales[k];
    enum { LINE = 64 };
    f->stride = (sizeof(row_rec) + n_scales * sizeof(double) + LINE - 1) / LINE * LINE;
    f->recs = aligned_alloc(LINE, r * f->stride);
    f->decay_small = malloc((size_t)SMALL * (n_scales ? n_scales : 1) * sizeof *f->decay_small);
    if (!f->recs || !f->decay_small) {
        pmc_features_free(f);
        return fail(PMC_CACHESIM_ENOMEM, msg, msg_len, "no memory for the state of %lld rows", (long long)rows);
    }
    for (size_t i = 0; i < r; i++) {
        row_rec *q = rec_of(f, (int64_t)i);
        q->count = q->in_batch = 0;
        q->last = q->prev_gap = -1;
        for (uint32_t j = 0; j < n_scales; j++)
            q->decayed[j] = 0.0;
    }
    for (int k = 0; k < SMALL; k++) {
        f->log1p_small[k] = (float)log1p((double)k);
        for (uint32_t j = 0; j < n_scales; j++)
            f->decay_small[(size_t)j * SMALL + (size_t)k] = exp(-(double)k * f->inv_tau[j]);
    }
    *out = f;
    return PMC_CACHESIM_OK;
}

static float log1p_int(const pmc_features *f, int64_t k)
{
    return k < SMALL ? f->log1p_small[k] : (float)log1p((double)k);
}

int pmc_features_batch(pmc_features *f, const int64_t *ids, uint64_t n, int64_t t0, float *out, char *msg,
                       size_t msg_len)
{
    if (!f)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "features is NULL");
    if (n && (!ids || !out))
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "ids and out must not be NULL");
    if (t0 < 0 || (uint64_t)t0 > (uint64_t)INT64_MAX - n)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "t0 = %lld is out of range", (long long)t0);
    for (uint64_t k = 0; k < n; k++)
        if (ids[k] < 0 || ids[k] >= f->rows)
            return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "ids[%llu] = %lld: rows must be in [0, %lld)",
                        (unsigned long long)k, (long long)ids[k], (long long)f->rows);
    enum { AHEAD = 16 }; /* lookups between a record's prefetch and its use */
    for (uint64_t k = 0; k < n; k++) {
        if (k + AHEAD < n)
            __builtin_prefetch(rec_of(f, ids[k + AHEAD]), 1);
        rec_of(f, ids[k])->in_batch++;
    }
    const uint32_t width = PMC_FEATURES_BASE + f->n_scales;
    for (uint64_t k = 0; k < n; k++) {
        if (k + AHEAD < n)
            __builtin_prefetch(rec_of(f, ids[k + AHEAD]), 1);
        int64_t r = ids[k], t = t0 + (int64_t)k;
        row_rec *q = rec_of(f, r);
        int64_t c = q->count, last = q->last, pg = q->prev_gap;
        int64_t gap = last >= 0 ? t - last : -1;
        float *o = out + k * width;
        o[0] = (float)log(((double)c + 1.0) / ((double)t + 1.0));
        o[1] = gap >= 0 ? log1p_int(f, gap) : (float)f->sentinel;
        o[2] = pg >= 0 ? log1p_int(f, pg) : (float)f->sentinel;
        o[3] = c == 0 ? 1.0f : 0.0f;
        o[4] = log1p_int(f, q->in_batch);
        double *d = q->decayed;
        for (uint32_t j = 0; j < f->n_scales; j++) {
            double v = 0.0;
            if (gap >= 0)
                v = d[j] * (gap < SMALL ? f->decay_small[(size_t)j * SMALL + (size_t)gap]
                                        : exp(-(double)gap * f->inv_tau[j]));
            o[PMC_FEATURES_BASE + j] = (float)log1p(v);
            d[j] = v + 1.0;
        }
        q->count = c + 1;
        if (gap >= 0)
            q->prev_gap = gap;
        q->last = t;
    }
    for (uint64_t k = 0; k < n; k++)
        rec_of(f, ids[k])->in_batch = 0;
    return PMC_CACHESIM_OK;
}
