/* Bcast: algorithm choice. */
#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

int pmc_bcast_node(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root)
{
    pmc_comm *c = op->c;
    if (pmc_node_path(c, PMC_COLL_BCAST, bytes, 1, 0) == PMC_PATH_INLINE) return pmc_bcast_node_inline(op, f, buf, bytes, root);
    if (pmc_node_path(c, PMC_COLL_BCAST, bytes, 1, 1) == PMC_PATH_CMA) return pmc_bcast_node_cma(op, f, buf, bytes, root);
    return pmc_bcast_node_cico(op, f, buf, bytes, root);
}

int pmc_bcast_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    PMC_CO_BEGIN(f);
    if (c->size == 1 || a->count == 0) {
        pmc_took(c, PMC_TRACE_ALGO_SELF); /* nothing crosses ranks */
        f->pc = 0;
        return PMC_OK;
    }
    if (pmc_use_mpi(c, a->coll)) {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_coll_mpi_flat(op, f + 1));
    } else if (c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_bcast_node(op, f + 1, a->recvbuf, a->count, a->root));
    } else if (pmc_use_lanes(c, a->coll) && a->count <= c->lanes_bcast_tree_max && a->count <= c->data_bytes) {
        pmc_took(c, PMC_TRACE_ALGO_LANES);
        PMC_AWAIT(f, pmc_lanes_tree_down(op, f + 1, a->recvbuf, a->recvbuf, a->count, a->root, 0));
    } else if (pmc_use_lanes(c, a->coll)) {
        pmc_took(c, PMC_TRACE_ALGO_LANES);
        PMC_AWAIT(f, pmc_bcast_lanes_sliced(op, f + 1, a->recvbuf, a->count, a->root));
    } else {
        pmc_took(c, PMC_TRACE_ALGO_LEADER);
        PMC_AWAIT(f, pmc_bcast_hier(op, f + 1, a->recvbuf, a->count, a->root));
    }
    PMC_CO_END(f);
}
