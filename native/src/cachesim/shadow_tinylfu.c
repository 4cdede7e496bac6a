/* W-TinyLFU shadow (Einziger et al., 2017) with exact counts, as its
 * reference: every row enters an LRU window; the window's oldest row moves
 * into the LRU main region only if it was looked up more often, recently,
 * than the main region's oldest row, which it then evicts. */
#include <stdlib.h>

#include "cachesim_internal.h"

typedef struct {
    pmc_rowlist window, main;
    pmc_rowmap freq; /* recent lookups; halved every `sample` lookups */
    int64_t counted;
} tinylfu_state;

static int init(pmc_shadow *s)
{
    tinylfu_state *st = calloc(1, sizeof *st);
    if (!st)
        return PMC_CACHESIM_ENOMEM;
    size_t cap = (size_t)s->config.capacity;
    int rc = pmc_rowlist_init(&st->window, (size_t)s->config.window_rows + 1, s->config.rows);
    int made = 0;
    if (rc == PMC_CACHESIM_OK && ++made)
        rc = pmc_rowlist_init(&st->main, cap, s->config.rows);
    if (rc == PMC_CACHESIM_OK && ++made)
        rc = pmc_rowmap_init(&st->freq, 2 * cap, 0); /* hashed: ageing then costs the rows counted, not the table */
    if (rc != PMC_CACHESIM_OK) {
        if (made > 1)
            pmc_rowlist_free(&st->main);
        if (made > 0)
            pmc_rowlist_free(&st->window);
        free(st);
        return rc;
    }
    s->state = st;
    return PMC_CACHESIM_OK;
}

static void destroy(pmc_shadow *s)
{
    tinylfu_state *st = s->state;
    pmc_rowlist_free(&st->window);
    pmc_rowlist_free(&st->main);
    pmc_rowmap_free(&st->freq);
    free(st);
}

static int64_t freq_of(const tinylfu_state *st, int64_t row)
{
    const int64_t *c = pmc_rowmap_find(&st->freq, row);
    return c ? *c : 0;
}

static int count(const pmc_shadow *s, tinylfu_state *st, int64_t row)
{
    int64_t *c = pmc_rowmap_find(&st->freq, row);
    if (c)
        ++*c;
    else {
        int rc = pmc_rowmap_put(&st->freq, row, 1, NULL);
        if (rc != PMC_CACHESIM_OK)
            return rc;
    }
    if (++st->counted >= s->config.sample) {
        st->counted = 0;
        return pmc_rowmap_halve(&st->freq); /* ageing: rows whose count reaches 0 are forgotten */
    }
    return PMC_CACHESIM_OK;
}

static int access_row(pmc_shadow *s, int64_t row, int64_t t, double rank, uint8_t *hit, int64_t *evicted)
{
    (void)t, (void)rank;
    tinylfu_state *st = s->state;
    int64_t cap = s->config.capacity, window_rows = s->config.window_rows;
    *evicted = -1;
    pmc_rowlist *holder = &st->window;
    int64_t node = pmc_rowlist_find(holder, row);
    if (node < 0) {
        holder = &st->main;
        node = pmc_rowlist_find(holder, row);
    }
    if (node >= 0) {
        *hit = 1;
        pmc_rowlist_to_end(holder, node);
        return count(s, st, row);
    }
    *hit = 0;
    if ((int64_t)(st->window.len + st->main.len) >= cap) {
        int64_t candidate = (int64_t)st->window.len >= window_rows ? st->window.head : -1;
        int64_t loser = st->main.len ? st->main.head : -1;
        int admit = 0;
        pmc_rowlist *from;
        int64_t victim;
        if (candidate >= 0 && loser >= 0) {
            admit = freq_of(st, st->window.nodes[candidate].row) > freq_of(st, st->main.nodes[loser].row);
            from = admit ? &st->main : &st->window;
            victim = admit ? loser : candidate;
        } else {
            from = loser >= 0 ? &st->main : &st->window;
            victim = from->head;
        }
        *evicted = from->nodes[victim].row;
        pmc_rowlist_remove(from, victim);
        if (admit) {
            /* The candidate moves into the main region. */
            int64_t moved = st->window.nodes[candidate].row;
            pmc_rowlist_remove(&st->window, candidate);
            int rc = pmc_rowlist_append(&st->main, moved, 0);
            if (rc != PMC_CACHESIM_OK)
                return rc;
        }
    }
    int rc = count(s, st, row);
    if (rc == PMC_CACHESIM_OK)
        rc = pmc_rowlist_append(&st->window, row, 0);
    /* Filling up: the window's overflow moves to the main region (no one is evicted yet). */
    while (rc == PMC_CACHESIM_OK && (int64_t)st->window.len > window_rows &&
           (int64_t)(st->window.len + st->main.len) <= cap) {
        int64_t old = st->window.nodes[st->window.head].row;
        pmc_rowlist_remove(&st->window, st->window.head);
        rc = pmc_rowlist_append(&st->main, old, 0);
    }
    return rc;
}

static int holds(const pmc_shadow *s, int64_t row)
{
    const tinylfu_state *st = s->state;
    return pmc_rowlist_find(&st->window, row) >= 0 || pmc_rowlist_find(&st->main, row) >= 0;
}

static uint64_t len(const pmc_shadow *s)
{
    const tinylfu_state *st = s->state;
    return st->window.len + st->main.len;
}

static void prefetch(const pmc_shadow *s, int64_t row, int stage)
{
    const tinylfu_state *st = s->state;
    pmc_rowlist_prefetch(&st->window, row, stage);
    pmc_rowlist_prefetch(&st->main, row, stage);
    if (stage == 0)
        pmc_rowmap_prefetch(&st->freq, row);
}

const pmc_shadow_ops pmc_shadow_tinylfu_ops = {init, destroy, access_row, holds, len, prefetch};
