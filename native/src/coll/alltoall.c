/* Alltoall and Alltoallv: algorithm choice. In place, the input is copied
 * aside first, since every block of it is read after others were written.
 * Across nodes the lanes' pairwise exchange (one lane with
 * PYMCOLL_<COLL>_ALGORITHM=leader) while its slots fit the segment, MPI
 * otherwise. */
#include <string.h>

#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

/* Whether the lanes serve this call across nodes (the same answer on every rank). */
static int across_lanes(const pmc_comm *c, const pmc_args *a)
{
    return !pmc_use_mpi(c, a->coll) && c->nnodes > 1 &&
           pmc_alltoall_lanes_fits(c, !pmc_use_lanes(c, a->coll), a->sendcounts != NULL);
}

/* The send side: the user's buffer, or a copy of recvbuf when in place. */
static int send_side(pmc_op *op, pmc_frame *f, uint64_t bytes)
{
    pmc_comm *c = op->c;
    const int ours = !pmc_use_mpi(c, op->a.coll) && (c->nnodes == 1 || across_lanes(c, &op->a));
    if (!op->a.in_place || !ours) {
        f->p = (void *)op->a.sendbuf;
        return PMC_OK;
    }
    f->p = pmc_scratch_outer(c, (size_t)(bytes ? bytes : 1));
    if (f->p == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory for %llu bytes", c->node_ctx.coll,
                                      (unsigned long long)bytes);
    if (bytes > 0) memcpy(f->p, op->a.recvbuf, bytes); /* recvbuf may be NULL when empty */
    return PMC_OK;
}

int pmc_alltoall_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    PMC_CO_BEGIN(f);
    if (a->count == 0) {
        pmc_took(c, PMC_TRACE_ALGO_SELF); /* nothing crosses ranks */
        f->pc = 0;
        return PMC_OK;
    }
    {
        int rc = send_side(op, f, a->count * (uint64_t)c->size);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1 && pmc_node_path(c, a->coll, a->count, 0, 1) == PMC_PATH_CMA) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_alltoall_node_cma(op, f + 1, f->p, a->recvbuf, a->count));
    } else if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_pairs_node_cico(op, f + 1, f->p, NULL, NULL, a->recvbuf, NULL, NULL, a->count, -1, 1));
    } else if (across_lanes(c, a)) {
        pmc_took(c, pmc_use_lanes(c, a->coll) ? PMC_TRACE_ALGO_LANES : PMC_TRACE_ALGO_LEADER);
        PMC_AWAIT(f, pmc_alltoall_lanes_pairwise(op, f + 1, f->p, !pmc_use_lanes(c, a->coll)));
    } else {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_coll_mpi_flat(op, f + 1));
    }
    PMC_CO_END(f);
}

int pmc_alltoallv_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    PMC_CO_BEGIN(f);
    {
        int rc = send_side(op, f, pmc_v_extent(a->recvcounts, a->rdispls, c->size));
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_pairs_node_split(op, f + 1, f->p, a->sendcounts, a->sdispls, a->recvbuf, a->recvcounts,
                                          a->rdispls, 0, -1));
    } else if (across_lanes(c, a)) {
        pmc_took(c, pmc_use_lanes(c, a->coll) ? PMC_TRACE_ALGO_LANES : PMC_TRACE_ALGO_LEADER);
        PMC_AWAIT(f, pmc_alltoall_lanes_pairwise(op, f + 1, f->p, !pmc_use_lanes(c, a->coll)));
    } else {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_coll_mpi_flat(op, f + 1));
    }
    PMC_CO_END(f);
}
