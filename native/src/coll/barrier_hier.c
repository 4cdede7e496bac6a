/* Barrier across nodes: fan-in to the leader, MPI barrier among leaders,
 * fan-out from the leader. */
#include "hier.h"
#include "node_algos.h"

int pmc_barrier_hier(pmc_comm *c)
{
    int rc = pmc_barrier_node_fanin(&c->node_ctx);
    if (rc != PMC_OK) return rc;
    if (c->node_ctx.local_rank == 0) {
        int mrc = MPI_Barrier(c->lanecomm);
        if (mrc != MPI_SUCCESS) return pmc_mpi_fail(c, mrc, "MPI_Barrier");
    }
    return pmc_barrier_node_fanout(&c->node_ctx);
}
