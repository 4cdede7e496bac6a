/* pymcoll cache simulation engine: what the tiered cache's learned policy
 * computes on every lookup, in C.
 *
 * Shadows: a shadow holds no data, only which rows a fast tier of
 * `capacity` rows would hold under one policy, and serves batches of
 * lookups: per lookup, whether it hit and which row it evicted. The
 * learned cache's guard runs six at once on every lookup, so they must cost
 * tens of nanoseconds, not the microseconds of a Python replay. Each policy
 * makes exactly the decisions of its Python reference in
 * pymcoll.algorithms.tiered_cache.policies (ties, ghost lists, ageing and
 * LeCaR's random draws included: the draws come from the same Mersenne
 * Twister, seeded the way Python's random.Random splits an integer seed),
 * so a shadow's hits and evictions equal the reference's lookup for lookup.
 *
 * Features and perceptron: the model's inputs and predictions (below).
 *
 * No MPI, no threads, no global state. Rows are non-negative (-1 means "no
 * row" in the evicted output) and, when the configuration bounds them,
 * below `rows`. After an error other than PMC_CACHESIM_EINVAL from
 * pmc_shadow_run, the shadow's state is undefined: free it.
 */
#ifndef PYMCOLL_CACHESIM_H
#define PYMCOLL_CACHESIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Constants are enums, so that the Python binding sees them too. */
enum {
    PMC_SHADOW_LRU = 0,      /* least recently used */
    PMC_SHADOW_LFU = 1,      /* least frequently used; counts outlive evictions; ties: oldest lookup */
    PMC_SHADOW_ARC = 2,      /* adaptive replacement cache (T1, T2, ghosts B1, B2, target p) */
    PMC_SHADOW_LECAR = 3,    /* LRU and LFU mixed by regret weights */
    PMC_SHADOW_TINYLFU = 4,  /* W-TinyLFU: LRU window, frequency-admitted LRU main region */
    PMC_SHADOW_PRIORITY = 5, /* smallest (t + offset[t], t) first: the learned order */
    PMC_SHADOW_KINDS = 6,
    PMC_SHADOW_SEED_WORDS = 8,
    PMC_CACHESIM_MESSAGE_BYTES = 256,
};

/* Status codes. */
enum {
    PMC_CACHESIM_OK = 0,
    PMC_CACHESIM_EINVAL = 1, /* a bad argument (the shadow is unchanged) */
    PMC_CACHESIM_ENOMEM = 2,
};

typedef struct pmc_shadow pmc_shadow;

typedef struct {
    int32_t kind;          /* PMC_SHADOW_* */
    int64_t capacity;      /* rows the fast tier holds, 1..2^40 */
    int64_t rows;          /* > 0: every id is below it, and the shadow indexes rows by an array of
                            * that length (one load a lookup, 8 bytes a row per index); 0: any
                            * non-negative id, through hash tables */
    /* LECAR */
    double learning_rate;  /* > 0 */
    double discount;       /* 0.005 ** (1 / capacity), computed by the caller as its reference does */
    uint32_t seed_words[PMC_SHADOW_SEED_WORDS]; /* |seed| in 32-bit words, least significant first */
    uint32_t seed_len;     /* words used, 1..PMC_SHADOW_SEED_WORDS */
    /* TINYLFU */
    int64_t window_rows;   /* rows of the LRU window, 1..capacity */
    int64_t sample;        /* lookups between two halvings of the counts, >= 1 */
} pmc_shadow_config;

/* A new empty shadow; *out is NULL on error (msg says why). */
int pmc_shadow_new(const pmc_shadow_config *config, pmc_shadow **out, char *msg, size_t msg_len);
void pmc_shadow_free(pmc_shadow *shadow);

/* Serves the lookups ids[0..n) at times t0, t0+1, ...: hits[k] is 1 when
 * lookup k hit, evicted[k] the row it evicted or -1. `offsets` (n values)
 * is read by PMC_SHADOW_PRIORITY only (a row looked up at t ranks t +
 * offsets[t - t0]); the other kinds take NULL. */
int pmc_shadow_run(pmc_shadow *shadow, const int64_t *ids, uint64_t n, int64_t t0, const double *offsets,
                   uint8_t *hits, int64_t *evicted, char *msg, size_t msg_len);

/* 1 when the shadow holds `row`, else 0. */
int pmc_shadow_holds(const pmc_shadow *shadow, int64_t row);

/* Rows held. */
uint64_t pmc_shadow_len(const pmc_shadow *shadow);

/* Per-lookup features of an access stream (the learned cache's model
 * inputs), computed lookup by lookup in time order from per-row state:
 * count, time of the last lookup, the gap before it, and one decayed
 * count per time scale. For a lookup of row r at t, n_scales + 5 floats:
 *   log((count + 1) / (t + 1)), log1p(gap) (sentinel when none),
 *   log1p(previous gap) (sentinel when none), 1 if first lookup else 0,
 *   log1p(lookups of r in this batch), then per scale tau
 *   log1p(sum over r's earlier lookups at s of exp(-(t - s) / tau)).
 * The state advances past each lookup. Rows are in [0, rows). */
typedef struct pmc_features pmc_features;

enum { PMC_FEATURES_BASE = 5, PMC_FEATURES_MAX_SCALES = 16 };

int pmc_features_new(int64_t rows, const double *scales, uint32_t n_scales, double sentinel, pmc_features **out,
                     char *msg, size_t msg_len);
void pmc_features_free(pmc_features *f);

/* Features of the lookups ids[0..n) at times t0, t0+1, ... into out
 * (n rows of PMC_FEATURES_BASE + n_scales floats). A batch with a row out
 * of range is rejected before anything changes. */
int pmc_features_batch(pmc_features *f, const int64_t *ids, uint64_t n, int64_t t0, float *out, char *msg,
                       size_t msg_len);

/* A small multilayer perceptron's predictions: inputs x (n rows of
 * sizes[0] floats) standardized as (x - mean) * scale, then n_layers
 * affine layers (ReLU between them, the logistic function after the last,
 * whose width is 1). `params` holds, per layer l, its weights (sizes[l]
 * rows of sizes[l + 1], row-major) then its biases (sizes[l + 1]). */
enum { PMC_MLP_MAX_LAYERS = 8, PMC_MLP_MAX_WIDTH = 256 };

int pmc_mlp_predict(const float *x, uint64_t n, uint32_t n_layers, const uint32_t *sizes, const float *params,
                    const float *mean, const float *scale, float *out, char *msg, size_t msg_len);

/* A short description of a status code. */
const char *pmc_cachesim_strerror(int status);

#ifdef __cplusplus
}
#endif

#endif
