/* LeCaR shadow (Vietri et al., 2018): each eviction follows LRU or LFU,
 * drawn with learned weights; a miss on a row an expert evicted lowers
 * that expert's weight, less the longer ago the eviction was. */
#include <math.h>
#include <stdlib.h>

#include "cachesim_internal.h"

enum { EXPERT_LRU = 0, EXPERT_LFU = 1 };

/* Penalties of mistakes noticed within this many lookups come from a table
 * (each entry computed by the expression it replaces). */
enum { RECENT = 4096 };

typedef struct {
    pmc_rowlist recency;     /* held rows, least recently looked up first */
    pmc_lfu_order frequency; /* held rows by (count, last lookup) */
    pmc_rowlist history[2]; /* rows each expert evicted -> when */
    double w_lru;
    pmc_mt19937 rng;
    double penalty[RECENT]; /* exp(-learning_rate * discount ** age) */
} lecar_state;

static int init(pmc_shadow *s)
{
    lecar_state *st = calloc(1, sizeof *st);
    if (!st)
        return PMC_CACHESIM_ENOMEM;
    size_t cap = (size_t)s->config.capacity;
    int rc = pmc_rowlist_init(&st->recency, cap, s->config.rows);
    int made = 0;
    if (rc == PMC_CACHESIM_OK && ++made)
        rc = pmc_lfu_order_init(&st->frequency, cap, s->config.rows);
    if (rc == PMC_CACHESIM_OK && ++made)
        rc = pmc_rowlist_init(&st->history[EXPERT_LRU], cap, s->config.rows);
    if (rc == PMC_CACHESIM_OK && ++made)
        rc = pmc_rowlist_init(&st->history[EXPERT_LFU], cap, s->config.rows);
    if (rc != PMC_CACHESIM_OK) {
        if (made > 2)
            pmc_rowlist_free(&st->history[EXPERT_LRU]);
        if (made > 1)
            pmc_lfu_order_free(&st->frequency);
        if (made > 0)
            pmc_rowlist_free(&st->recency);
        free(st);
        return rc;
    }
    st->w_lru = 0.5;
    for (int age = 0; age < RECENT; age++)
        st->penalty[age] = exp(-s->config.learning_rate * pow(s->config.discount, (double)age));
    pmc_mt_seed(&st->rng, s->config.seed_words, s->config.seed_len);
    s->state = st;
    return PMC_CACHESIM_OK;
}

static void destroy(pmc_shadow *s)
{
    lecar_state *st = s->state;
    pmc_rowlist_free(&st->recency);
    pmc_lfu_order_free(&st->frequency);
    pmc_rowlist_free(&st->history[EXPERT_LRU]);
    pmc_rowlist_free(&st->history[EXPERT_LFU]);
    free(st);
}

/* The expert whose eviction of `row` is now a miss loses weight. */
static void learn(const pmc_shadow *s, lecar_state *st, int64_t row, int64_t t)
{
    for (int e = EXPERT_LRU; e <= EXPERT_LFU; e++) {
        int64_t node = pmc_rowlist_find(&st->history[e], row);
        if (node < 0)
            continue;
        int64_t evicted_at = st->history[e].nodes[node].val;
        pmc_rowlist_remove(&st->history[e], node);
        double w_lru = st->w_lru, w_lfu = 1.0 - st->w_lru;
        int64_t age = t - evicted_at;
        double penalty = age < RECENT ? st->penalty[age]
                                      : exp(-s->config.learning_rate * pow(s->config.discount, (double)age));
        if (e == EXPERT_LRU)
            w_lru *= penalty;
        else
            w_lfu *= penalty;
        st->w_lru = w_lru / (w_lru + w_lfu);
    }
}

static int access_row(pmc_shadow *s, int64_t row, int64_t t, double rank, uint8_t *hit, int64_t *evicted)
{
    (void)rank;
    lecar_state *st = s->state;
    *evicted = -1;
    int64_t node = pmc_rowlist_find(&st->recency, row);
    if (node >= 0) {
        *hit = 1;
        pmc_rowlist_to_end(&st->recency, node);
        return pmc_lfu_order_touch(&st->frequency, row, t);
    }
    *hit = 0;
    learn(s, st, row, t);
    if ((int64_t)st->recency.len >= s->config.capacity) {
        int expert = pmc_mt_random(&st->rng) < st->w_lru ? EXPERT_LRU : EXPERT_LFU;
        int64_t v = expert == EXPERT_LRU ? st->recency.nodes[st->recency.head].row : pmc_rowheap_top(&st->frequency.held);
        pmc_rowlist_remove(&st->recency, pmc_rowlist_find(&st->recency, v));
        pmc_rowheap_remove(&st->frequency.held, v);
        pmc_rowlist *h = &st->history[expert];
        int rc = pmc_rowlist_append(h, v, t);
        if (rc != PMC_CACHESIM_OK)
            return rc;
        if ((int64_t)h->len > s->config.capacity)
            pmc_rowlist_remove(h, h->head);
        *evicted = v;
    }
    int rc = pmc_rowlist_append(&st->recency, row, 0);
    return rc != PMC_CACHESIM_OK ? rc : pmc_lfu_order_touch(&st->frequency, row, t);
}

static int holds(const pmc_shadow *s, int64_t row)
{
    const lecar_state *st = s->state;
    return pmc_rowlist_find(&st->recency, row) >= 0;
}

static uint64_t len(const pmc_shadow *s)
{
    return ((const lecar_state *)s->state)->recency.len;
}

static void prefetch(const pmc_shadow *s, int64_t row, int stage)
{
    const lecar_state *st = s->state;
    pmc_rowlist_prefetch(&st->recency, row, stage);
    pmc_rowheap_prefetch(&st->frequency.held, row, stage);
    pmc_rowlist_prefetch(&st->history[0], row, stage);
    pmc_rowlist_prefetch(&st->history[1], row, stage);
    if (stage == 0)
        pmc_rowmap_prefetch(&st->frequency.counts, row);
}

const pmc_shadow_ops pmc_shadow_lecar_ops = {init, destroy, access_row, holds, len, prefetch};
