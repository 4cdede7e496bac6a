/* Bcast: entry, argument check and algorithm choice. */
#include "../comm.h"
#include "hier.h"
#include "node_algos.h"

int pmc_bcast(pmc_comm *c, void *buf, uint64_t bytes, int root)
{
    if (c == NULL) return PMC_ERR_ARG;
    int rc = pmc_coll_enter(c, "Bcast");
    if (rc != PMC_OK) return rc;
    if (root < 0 || root >= c->size)
        return pmc_fail(c, PMC_ERR_ARG, "Bcast: root=%d is not a rank of this communicator "
                        "(expected 0 <= root < %d)", root, c->size);
    if (bytes > 0 && buf == NULL) return pmc_fail(c, PMC_ERR_ARG, "Bcast: buf is NULL");
    rc = pmc_coll_agree(c, PMC_COLL_BCAST, bytes, -1, -1, root);
    if (rc != PMC_OK) return pmc_coll_leave(c, rc);
    if (c->size == 1 || bytes == 0) return pmc_coll_leave(c, PMC_OK);
    if (!c->shm_active) {
        pmc_mpi_count n;
        rc = pmc_mpi_count_of(c, bytes, &n);
        if (rc != PMC_OK) return rc;
#if MPI_VERSION >= 4
        int mrc = MPI_Bcast_c(buf, n, MPI_BYTE, root, c->comm);
#else
        int mrc = MPI_Bcast(buf, n, MPI_BYTE, root, c->comm);
#endif
        rc = mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(c, mrc, "MPI_Bcast");
    } else if (c->nnodes == 1) {
        rc = pmc_bcast_node_cico(&c->node_ctx, buf, bytes, root);
    } else {
        rc = pmc_bcast_hier(c, buf, bytes, root);
    }
    return pmc_coll_leave(c, rc);
}
