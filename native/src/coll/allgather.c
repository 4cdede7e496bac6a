/* Allgather: entry, argument check and algorithm choice. */
#include <string.h>

#include "../comm.h"
#include "hier.h"
#include "node_algos.h"

int pmc_allgather(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t block)
{
    if (c == NULL) return PMC_ERR_ARG;
    int rc = pmc_coll_enter(c, "Allgather");
    if (rc != PMC_OK) return rc;
    if (block > 0 && recvbuf == NULL) return pmc_fail(c, PMC_ERR_ARG, "Allgather: recvbuf is NULL");
    if (block > UINT64_MAX / (uint64_t)c->size)
        return pmc_fail(c, PMC_ERR_ARG, "Allgather: block of %llu bytes overflows the receive size",
                        (unsigned long long)block);
    rc = pmc_coll_agree(c, PMC_COLL_ALLGATHER, block, -1, -1, -1);
    if (rc != PMC_OK) return pmc_coll_leave(c, rc);
    if (block == 0) return pmc_coll_leave(c, PMC_OK);
    unsigned char *mine = (unsigned char *)recvbuf + (uint64_t)c->rank * block;
    const void *send = sendbuf != NULL ? sendbuf : mine;
    if (c->size == 1) {
        if (send != mine) memmove(mine, send, block);
        return pmc_coll_leave(c, PMC_OK);
    }
    if (!c->shm_active) {
        pmc_mpi_count n;
        rc = pmc_mpi_count_of(c, block, &n);
        if (rc != PMC_OK) return rc;
        const void *s = sendbuf != NULL ? sendbuf : MPI_IN_PLACE;
#if MPI_VERSION >= 4
        int mrc = MPI_Allgather_c(s, n, MPI_BYTE, recvbuf, n, MPI_BYTE, c->comm);
#else
        int mrc = MPI_Allgather(s, n, MPI_BYTE, recvbuf, n, MPI_BYTE, c->comm);
#endif
        rc = mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(c, mrc, "MPI_Allgather");
    } else if (c->nnodes == 1) {
        rc = pmc_allgather_node_cico(&c->node_ctx, send, recvbuf, block, -1);
    } else {
        rc = pmc_allgather_hier(c, send, recvbuf, block);
    }
    return pmc_coll_leave(c, rc);
}
