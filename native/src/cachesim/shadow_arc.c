/* ARC shadow (Megiddo and Modha, 2003), as its reference replays it: held
 * rows in T1 (seen once since entering) and T2 (seen again), ghosts of
 * recent evictions in B1 and B2, and a target size p of T1 moved by misses
 * on ghosts. */
#include <stdlib.h>

#include "cachesim_internal.h"

typedef struct {
    pmc_rowlist t1, t2, b1, b2;
    double p;
} arc_state;

static int init(pmc_shadow *s)
{
    arc_state *st = calloc(1, sizeof *st);
    if (!st)
        return PMC_CACHESIM_ENOMEM;
    size_t cap = (size_t)s->config.capacity;
    pmc_rowlist *lists[4] = {&st->t1, &st->t2, &st->b1, &st->b2};
    for (int i = 0; i < 4; i++) {
        int rc = pmc_rowlist_init(lists[i], cap, s->config.rows);
        if (rc != PMC_CACHESIM_OK) {
            while (i-- > 0)
                pmc_rowlist_free(lists[i]);
            free(st);
            return rc;
        }
    }
    s->state = st;
    return PMC_CACHESIM_OK;
}

static void destroy(pmc_shadow *s)
{
    arc_state *st = s->state;
    pmc_rowlist_free(&st->t1);
    pmc_rowlist_free(&st->t2);
    pmc_rowlist_free(&st->b1);
    pmc_rowlist_free(&st->b2);
    free(st);
}

/* A miss on a ghost: the list it left was too small. */
static void adapt(arc_state *st, double capacity, int in_b1)
{
    double n1 = (double)st->b1.len, n2 = (double)st->b2.len;
    if (in_b1) {
        double step = n2 / n1 > 1.0 ? n2 / n1 : 1.0;
        st->p = st->p + step < capacity ? st->p + step : capacity;
    } else {
        double step = n1 / n2 > 1.0 ? n1 / n2 : 1.0;
        st->p = st->p - step > 0.0 ? st->p - step : 0.0;
    }
}

static int access_row(pmc_shadow *s, int64_t row, int64_t t, double rank, uint8_t *hit, int64_t *evicted)
{
    (void)t, (void)rank;
    arc_state *st = s->state;
    int64_t c = s->config.capacity;
    *evicted = -1;
    int64_t node = pmc_rowlist_find(&st->t1, row);
    if (node >= 0) {
        pmc_rowlist_remove(&st->t1, node);
        *hit = 1;
        return pmc_rowlist_append(&st->t2, row, 0);
    }
    node = pmc_rowlist_find(&st->t2, row);
    if (node >= 0) {
        pmc_rowlist_to_end(&st->t2, node);
        *hit = 1;
        return PMC_CACHESIM_OK;
    }
    *hit = 0;
    int in_b1 = pmc_rowlist_find(&st->b1, row) >= 0;
    int in_b2 = !in_b1 && pmc_rowlist_find(&st->b2, row) >= 0;
    if (in_b1 || in_b2)
        adapt(st, (double)c, in_b1);
    if ((int64_t)(st->t1.len + st->t2.len) >= c) {
        pmc_rowlist *from = NULL, *ghost = NULL;
        if (!in_b1 && !in_b2 && (int64_t)(st->t1.len + st->b1.len) >= c && (int64_t)st->t1.len >= c) {
            from = &st->t1; /* T1 fills the directory's share: its oldest leaves without a ghost */
        } else {
            double n1 = (double)st->t1.len;
            int t1_first = st->t1.len >= 1 && (n1 > st->p || (in_b2 && n1 == st->p));
            from = t1_first ? &st->t1 : &st->t2;
            ghost = t1_first ? &st->b1 : &st->b2;
            if (from->len == 0) {
                from = t1_first ? &st->t2 : &st->t1;
                ghost = t1_first ? &st->b2 : &st->b1;
            }
        }
        *evicted = from->nodes[from->head].row;
        pmc_rowlist_remove(from, from->head);
        if (ghost) {
            int rc = pmc_rowlist_append(ghost, *evicted, 0);
            if (rc != PMC_CACHESIM_OK)
                return rc;
        }
    }
    if (in_b1 || in_b2) {
        pmc_rowlist *ghost = in_b1 ? &st->b1 : &st->b2;
        pmc_rowlist_remove(ghost, pmc_rowlist_find(ghost, row));
        return pmc_rowlist_append(&st->t2, row, 0);
    }
    /* Keep the directory within bounds: T1 + B1 <= c and all four lists <= 2c. */
    if ((int64_t)(st->t1.len + st->b1.len) >= c) {
        if (st->b1.len)
            pmc_rowlist_remove(&st->b1, st->b1.head);
    } else if ((int64_t)(st->t1.len + st->t2.len + st->b1.len + st->b2.len) >= 2 * c && st->b2.len) {
        pmc_rowlist_remove(&st->b2, st->b2.head);
    }
    return pmc_rowlist_append(&st->t1, row, 0);
}

static int holds(const pmc_shadow *s, int64_t row)
{
    const arc_state *st = s->state;
    return pmc_rowlist_find(&st->t1, row) >= 0 || pmc_rowlist_find(&st->t2, row) >= 0;
}

static uint64_t len(const pmc_shadow *s)
{
    const arc_state *st = s->state;
    return st->t1.len + st->t2.len;
}

static void prefetch(const pmc_shadow *s, int64_t row, int stage)
{
    const arc_state *st = s->state;
    pmc_rowlist_prefetch(&st->t1, row, stage);
    pmc_rowlist_prefetch(&st->t2, row, stage);
    pmc_rowlist_prefetch(&st->b1, row, stage);
    pmc_rowlist_prefetch(&st->b2, row, stage);
}

const pmc_shadow_ops pmc_shadow_arc_ops = {init, destroy, access_row, holds, len, prefetch};
