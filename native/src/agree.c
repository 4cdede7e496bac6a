/* PYMCOLL_CHECK: ranks agree on a collective's arguments before it runs. */
#include <inttypes.h>
#include <stdio.h>
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

static int is_reduction(int coll)
{
    return coll == PMC_COLL_ALLREDUCE || coll == PMC_COLL_REDUCE || coll == PMC_COLL_REDUCE_SCATTER_BLOCK ||
           coll == PMC_COLL_REDUCE_SCATTER || coll == PMC_COLL_SCAN || coll == PMC_COLL_EXSCAN;
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
        size = (int64_t)(is_reduction(a->coll) ? a->count * (uint64_t)pmc_dtype_size(a->dtype) : a->count);
    }
    const int rooted = a->coll == PMC_COLL_BCAST || a->coll == PMC_COLL_REDUCE || a->coll == PMC_COLL_GATHER ||
                       a->coll == PMC_COLL_GATHERV || a->coll == PMC_COLL_SCATTER || a->coll == PMC_COLL_SCATTERV;
    const int64_t v[NFIELDS] = {a->coll, size, is_reduction(a->coll) ? a->dtype : -1,
                                is_reduction(a->coll) ? a->op : -1, rooted ? a->root : -1};
    /* One MAX over (v, -v) gives every field's maximum and minimum. */
    for (int i = 0; i < NFIELDS; ++i) {
        op->agree[i] = v[i];
        op->agree[NFIELDS + i] = -v[i];
    }
    int mrc = MPI_Iallreduce(MPI_IN_PLACE, op->agree, 2 * NFIELDS, MPI_INT64_T, MPI_MAX, c->comm, &op->mreq);
    return mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(c, mrc, "MPI_Iallreduce (PYMCOLL_CHECK)");
}

int pmc_agree_judge(pmc_op *op)
{
    pmc_comm *c = op->c;
    char what[384];
    size_t used = 0;
    what[0] = '\0';
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
    if (used == 0) return PMC_OK;
    return pmc_fail(c, PMC_ERR_ARG,
                    "%s #%llu: PYMCOLL_CHECK found that the ranks disagree on %s; every rank must "
                    "call the same collective with the same counts, type, op and root",
                    c->node_ctx.coll, (unsigned long long)op->seq, what);
}
