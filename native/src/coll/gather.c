/* Gather and Gatherv: algorithm choice. Across nodes Gather takes the
 * lanes' tree while the result fits the node buffer; larger ones and
 * Gatherv run through the wrapped communicator's MPI_Igather(v). */
#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

int pmc_gather_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    unsigned char *recv = a->recvbuf;
    const void *send = a->in_place ? recv + (uint64_t)a->root * a->count : a->sendbuf;
    PMC_CO_BEGIN(f);
    if (a->count == 0) {
        pmc_took(c, PMC_TRACE_ALGO_SELF); /* nothing crosses ranks */
        f->pc = 0;
        return PMC_OK;
    }
    if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1 && pmc_node_path(c, a->coll, a->count, 1, 0) == PMC_PATH_INLINE) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_gather_node_inline(op, f + 1, send, recv, a->count, a->root));
    } else if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1 && pmc_node_path(c, a->coll, a->count, 1, 1) == PMC_PATH_CMA) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_gather_node_cma(op, f + 1, send, recv, a->count, NULL, NULL, a->root));
    } else if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_gather_node_cico(op, f + 1, send, recv, a->count, NULL, NULL, a->root, 1));
    } else if (!pmc_use_mpi(c, a->coll) && pmc_use_lanes(c, a->coll) && pmc_lanes_tree_fits(c, a->count)) {
        pmc_took(c, PMC_TRACE_ALGO_LANES);
        PMC_AWAIT(f, pmc_lanes_tree_up(op, f + 1, send, recv, a->count, a->root));
    } else {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_coll_mpi_flat(op, f + 1));
    }
    PMC_CO_END(f);
}

int pmc_gatherv_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    unsigned char *recv = a->recvbuf;
    const void *send = a->in_place ? recv + a->rdispls[a->root] : a->sendbuf;
    PMC_CO_BEGIN(f);
    if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_gatherv_node_split(op, f + 1, send, recv, a->count, a->recvcounts, a->rdispls, a->root));
    } else {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_coll_mpi_flat(op, f + 1));
    }
    PMC_CO_END(f);
}
