/* PYMCOLL_CHECK: ranks agree on a collective's arguments before it runs. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"

#define NFIELDS 5

static const char *const field_names[NFIELDS] = {"collective", "message bytes", "element type", "op", "root"};

int pmc_coll_agree(pmc_comm *c, int kind, uint64_t bytes, int dtype, int op, int root)
{
    if (!c->check || c->size == 1) return PMC_OK;
    /* One MAX over (v, -v) gives every field's maximum and minimum. */
    int64_t v[2 * NFIELDS] = {kind, (int64_t)bytes, dtype, op, root};
    for (int i = 0; i < NFIELDS; ++i) v[NFIELDS + i] = -v[i];
    int mrc = MPI_Allreduce(MPI_IN_PLACE, v, 2 * NFIELDS, MPI_INT64_T, MPI_MAX, c->comm);
    if (mrc != MPI_SUCCESS) return pmc_mpi_fail(c, mrc, "MPI_Allreduce (PYMCOLL_CHECK)");
    char what[384];
    size_t used = 0;
    what[0] = '\0';
    for (int i = 0; i < NFIELDS; ++i) {
        const int64_t hi = v[i], lo = -v[NFIELDS + i];
        if (hi == lo) continue;
        int w = snprintf(what + used, sizeof(what) - used, "%s%s (from %" PRId64 " to %" PRId64 ")",
                         used ? ", " : "", field_names[i], lo, hi);
        if (w < 0 || (size_t)w >= sizeof(what) - used) break;
        used += (size_t)w;
    }
    if (used == 0) return PMC_OK;
    return pmc_fail(c, PMC_ERR_ARG,
                    "%s #%llu: PYMCOLL_CHECK found that the ranks disagree on %s; every rank must "
                    "call the same collective with the same count, type, op and root",
                    c->node_ctx.coll, (unsigned long long)c->coll_seq, what);
}
