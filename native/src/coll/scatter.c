/* Scatter and Scatterv: algorithm choice. Across nodes Scatter takes the
 * lanes' tree while the root's blocks fit the node buffer; larger ones and
 * Scatterv run through the wrapped communicator's MPI_Iscatter(v). */
#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

int pmc_scatter_run(pmc_op *op)
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
    if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1 && pmc_node_path(c, a->coll, a->count, 0, 1) == PMC_PATH_CMA) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_scatter_node_cma(op, f + 1, a->sendbuf, a->in_place ? NULL : a->recvbuf, a->count, a->root));
    } else if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_pairs_node_cico(op, f + 1, a->sendbuf, NULL, NULL, a->in_place ? NULL : a->recvbuf, NULL,
                                         NULL, a->count, a->root, 1));
    } else if (!pmc_use_mpi(c, a->coll) && pmc_use_lanes(c, a->coll) && pmc_lanes_tree_fits(c, a->count)) {
        pmc_took(c, PMC_TRACE_ALGO_LANES);
        PMC_AWAIT(f, pmc_lanes_tree_down(op, f + 1, a->sendbuf, a->in_place ? NULL : a->recvbuf, a->count, a->root, 1));
    } else {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_coll_mpi_flat(op, f + 1));
    }
    PMC_CO_END(f);
}

int pmc_scatterv_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    PMC_CO_BEGIN(f);
    if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_pairs_node_split(op, f + 1, a->sendbuf, a->sendcounts, a->sdispls,
                                          a->in_place ? NULL : a->recvbuf, NULL, NULL, a->count, a->root));
    } else {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_coll_mpi_flat(op, f + 1));
    }
    PMC_CO_END(f);
}
