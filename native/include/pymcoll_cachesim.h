/* pymcoll cache shadows: replacement policies replayed on row ids alone.
 *
 * A shadow holds no data, only which rows a fast tier of `capacity` rows
 * would hold under one policy, and serves batches of lookups: per lookup,
 * whether it hit and which row it evicted. The learned cache's guard runs
 * several at once on every lookup, so they must cost tens of nanoseconds,
 * not the microseconds of a Python replay.
 *
 * Each policy makes exactly the decisions of its Python reference in
 * pymcoll.algorithms.tiered_cache.policies (ties, ghost lists, ageing and
 * LeCaR's random draws included: the draws come from the same Mersenne
 * Twister, seeded the way Python's random.Random splits an integer seed),
 * so a shadow's hits and evictions equal the reference's lookup for lookup.
 *
 * No MPI, no threads, no global state. Rows are non-negative (-1 means "no
 * row" in the evicted output). After an error other than PMC_CACHESIM_EINVAL
 * from pmc_shadow_run, the shadow's state is undefined: free it.
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
    int64_t capacity;      /* rows the fast tier holds, at least 1 */
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

/* A short description of a status code. */
const char *pmc_cachesim_strerror(int status);

#ifdef __cplusplus
}
#endif

#endif
