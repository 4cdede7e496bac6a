/* Barrier: algorithm choice. */
#include "hier.h"
#include "node_algos.h"

int pmc_barrier_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    PMC_CO_BEGIN(f);
    if (pmc_use_mpi(c, PMC_COLL_BARRIER)) {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_coll_mpi_flat(op, f + 1));
    } else if (c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_barrier_node_flags(op, f + 1));
    } else {
        pmc_took(c, PMC_TRACE_ALGO_LEADER);
        PMC_AWAIT(f, pmc_barrier_hier(op, f + 1));
    }
    PMC_CO_END(f);
}
