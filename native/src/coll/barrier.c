/* Barrier: entry and algorithm choice. */
#include "../comm.h"
#include "hier.h"
#include "node_algos.h"

int pmc_barrier(pmc_comm *c)
{
    if (c == NULL) return PMC_ERR_ARG;
    int rc = pmc_coll_enter(c, "Barrier");
    if (rc != PMC_OK) return rc;
    rc = pmc_coll_agree(c, PMC_COLL_BARRIER, 0, -1, -1, -1);
    if (rc != PMC_OK) return pmc_coll_leave(c, rc);
    if (!c->shm_active) {
        int mrc = MPI_Barrier(c->comm);
        rc = mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(c, mrc, "MPI_Barrier");
    } else if (c->nnodes == 1) {
        rc = pmc_barrier_node_flags(&c->node_ctx);
    } else {
        rc = pmc_barrier_hier(c);
    }
    return pmc_coll_leave(c, rc);
}
