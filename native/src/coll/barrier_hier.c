/* Barrier across nodes: fan-in to the leader, MPI barrier among leaders,
 * fan-out from the leader. */
#include "hier.h"
#include "node_algos.h"

int pmc_barrier_hier(pmc_op *op, pmc_frame *f)
{
    pmc_comm *c = op->c;
    PMC_CO_BEGIN(f);
    PMC_AWAIT(f, pmc_barrier_node_fanin(op, f + 1));
    if (c->node_ctx.local_rank == 0) {
        int mrc = MPI_Ibarrier(c->lanecomm, &op->mreq);
        if (mrc != MPI_SUCCESS) {
            f->pc = 0;
            return pmc_mpi_fail(c, mrc, "MPI_Ibarrier");
        }
        PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Ibarrier"));
    }
    PMC_AWAIT(f, pmc_barrier_node_fanout(op, f + 1));
    PMC_CO_END(f);
}
