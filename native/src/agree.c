/* PYMCOLL_CHECK: ranks agree on a collective's arguments before it runs. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

#define NFIELDS 5

static const char *const field_names[NFIELDS] = {"collective", "message bytes", "element type",
                                                 "op", "root"};

/* FNV-1a over an array every rank holds (Allgatherv, Reduce_scatter). */
static int64_t digest(const uint64_t *v, int n)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (int i = 0; i < n; ++i) {
        h ^= v[i];
        h *= UINT64_C(1099511628211);
    }
    return (int64_t)(h >> 1);
}

/* Largest communicator whose Alltoallv counts are checked pair by pair
 * (2 size^2 integers in the exchange); above it only the collective itself
 * is compared. */
#define PAIRS_CHECKED_MAX 128
#define ABSENT INT64_MIN   /* a slot this rank does not know: the identity of MAX */
#define CONFLICT INT64_MAX /* a slot whose two views this rank holds, and they differ */

/* One view of slot s. */
static void put(int64_t *v, int64_t s, uint64_t value)
{
    v[s] = v[s] == ABSENT || v[s] == (int64_t)value ? (int64_t)value : CONFLICT;
}

/* Per-pair counts of Gatherv, Scatterv and Alltoallv: slot (i, j) holds the
 * bytes rank i sends to rank j, contributed by the sender and by the
 * receiver; other ranks leave it ABSENT. With -v beside v, MAX gives both
 * extremes of each slot, which differ when the two views do. v NULL: only
 * the slot count. */
static int64_t pair_slots(const pmc_comm *c, const pmc_args *a, int64_t *v)
{
    const int P = c->size, me = c->rank;
    const int64_t n = a->coll == PMC_COLL_GATHERV || a->coll == PMC_COLL_SCATTERV ? P
                      : a->coll == PMC_COLL_ALLTOALLV && P <= PAIRS_CHECKED_MAX ? (int64_t)P * P
                                                                                 : 0;
    if (v == NULL || n == 0) return n;
    for (int64_t s = 0; s < n; ++s) v[s] = ABSENT;
    if (a->coll == PMC_COLL_ALLTOALLV) {
        for (int j = 0; j < P; ++j) { /* row me: what I send; column me: what I receive */
            put(v, (int64_t)me * P + j, a->in_place ? a->recvcounts[j] : a->sendcounts[j]);
            put(v, (int64_t)j * P + me, a->recvcounts[j]);
        }
        return n;
    }
    /* Gatherv: slot i is rank i -> root; Scatterv: root -> rank i. */
    const uint64_t *at_root = a->coll == PMC_COLL_GATHERV ? a->recvcounts : a->sendcounts;
    if (me == a->root)
        for (int i = 0; i < P; ++i) put(v, i, at_root[i]);
    if (me != a->root || !a->in_place) put(v, me, a->count);
    return n;
}

int pmc_agree_start(pmc_op *op)
{
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    int64_t size = -1;
    switch (a->coll) {
    case PMC_COLL_BARRIER: break;
    case PMC_COLL_ALLGATHERV: size = digest(a->recvcounts, c->size); break;
    case PMC_COLL_REDUCE_SCATTER: size = digest(a->recvcounts, c->size); break;
    case PMC_COLL_GATHERV: case PMC_COLL_SCATTERV: case PMC_COLL_ALLTOALLV: break; /* per-rank counts */
    default:
        size = (int64_t)(pmc_coll_is_reduction(a->coll) ? a->count * (uint64_t)pmc_dtype_size(a->dtype) : a->count);
    }
    const int rooted = pmc_coll_is_rooted(a->coll);
    const int64_t v[NFIELDS] = {a->coll, size, pmc_coll_is_reduction(a->coll) ? a->dtype : -1,
                                pmc_coll_is_reduction(a->coll) ? a->op : -1, rooted ? a->root : -1};
    /* One MAX over (v, -v) gives every field's maximum and minimum. */
    for (int i = 0; i < NFIELDS; ++i) {
        op->agree[i] = v[i];
        op->agree[NFIELDS + i] = -v[i];
    }
    /* The v forms exchange their per-pair counts in the same reduction. */
    const int64_t n = pair_slots(c, a, NULL);
    free(op->agree_v);
    op->agree_v = NULL;
    if (n == 0) {
        const int mrc = MPI_Iallreduce(MPI_IN_PLACE, op->agree, 2 * NFIELDS, MPI_INT64_T, MPI_MAX, c->comm,
                                       &op->mreq);
        return mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(c, mrc, "MPI_Iallreduce (PYMCOLL_CHECK)");
    }
    op->agree_v = malloc(sizeof(int64_t) * (size_t)(2 * NFIELDS + 2 * n));
    if (op->agree_v == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "PYMCOLL_CHECK: no memory for %lld counts",
                                             (long long)n);
    int64_t *w = op->agree_v;
    memcpy(w, op->agree, sizeof(int64_t) * 2 * NFIELDS);
    pair_slots(c, a, w + 2 * NFIELDS);
    for (int64_t s = 0; s < n; ++s) {
        const int64_t x = w[2 * NFIELDS + s];
        w[2 * NFIELDS + n + s] = x == ABSENT ? ABSENT : x == CONFLICT ? CONFLICT : -x;
    }
    const int mrc = MPI_Iallreduce(MPI_IN_PLACE, w, (int)(2 * NFIELDS + 2 * n), MPI_INT64_T, MPI_MAX, c->comm,
                                   &op->mreq);
    return mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(c, mrc, "MPI_Iallreduce (PYMCOLL_CHECK)");
}

int pmc_agree_judge(pmc_op *op)
{
    pmc_comm *c = op->c;
    char what[384];
    size_t used = 0;
    what[0] = '\0';
    const int64_t n = op->agree_v != NULL ? pair_slots(c, &op->a, NULL) : 0;
    if (op->agree_v != NULL) memcpy(op->agree, op->agree_v, sizeof(op->agree));
    for (int i = 0; i < NFIELDS; ++i) {
        const int64_t hi = op->agree[i], lo = -op->agree[NFIELDS + i];
        if (hi == lo) continue;
        int w = i == 1 && (op->a.coll == PMC_COLL_ALLGATHERV || op->a.coll == PMC_COLL_REDUCE_SCATTER)
                    ? snprintf(what + used, sizeof(what) - used, "%srecvcounts", used ? ", " : "")
                    : snprintf(what + used, sizeof(what) - used, "%s%s (from %" PRId64 " to %" PRId64 ")",
                               used ? ", " : "", field_names[i], lo, hi);
        if (w < 0 || (size_t)w >= sizeof(what) - used) break;
        used += (size_t)w;
    }
    int shown = 0;
    for (int64_t s = 0; s < n && used < sizeof(what) - 1; ++s) {
        const int64_t hi = op->agree_v[2 * NFIELDS + s], neg = op->agree_v[2 * NFIELDS + n + s];
        if (hi == ABSENT || (hi != CONFLICT && neg != CONFLICT && hi == -neg)) continue;
        const int from = op->a.coll == PMC_COLL_ALLTOALLV ? (int)(s / c->size)
                         : op->a.coll == PMC_COLL_GATHERV ? (int)s : op->a.root;
        const int to = op->a.coll == PMC_COLL_ALLTOALLV ? (int)(s % c->size)
                       : op->a.coll == PMC_COLL_GATHERV ? op->a.root : (int)s;
        const int w = ++shown > 3 ? snprintf(what + used, sizeof(what) - used, ", ...")
                                  : snprintf(what + used, sizeof(what) - used,
                                             "%sthe bytes rank %d sends to rank %d (the two ranks' counts differ)",
                                             used ? ", " : "", from, to);
        if (w < 0 || (size_t)w >= sizeof(what) - used) break;
        used += (size_t)w;
        if (shown > 3) break;
    }
    free(op->agree_v);
    op->agree_v = NULL;
    if (used == 0) return PMC_OK;
    return pmc_fail(c, PMC_ERR_ARG,
                    "%s #%llu: PYMCOLL_CHECK found that the ranks disagree on %s; every rank must "
                    "call the same collective with the same counts, type, op and root",
                    c->node_ctx.coll, (unsigned long long)op->seq, what);
}
