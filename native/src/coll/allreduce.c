/* Allreduce: entry, argument check and algorithm choice. */
#include <string.h>

#include "../comm.h"
#include "hier.h"
#include "node_algos.h"
#include "reduce_entry.h"

int pmc_allreduce(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op)
{
    if (c == NULL) return PMC_ERR_ARG;
    int rc = pmc_coll_enter(c, "Allreduce");
    if (rc != PMC_OK) return rc;
    uint64_t bytes = 0;
    rc = pmc_reduce_check(c, "Allreduce", recvbuf, count, dtype, op, 1, &bytes);
    if (rc != PMC_OK) return rc;
    rc = pmc_coll_agree(c, PMC_COLL_ALLREDUCE, bytes, dtype, op, -1);
    if (rc != PMC_OK) return pmc_coll_leave(c, rc);
    if (count == 0) return pmc_coll_leave(c, PMC_OK);
    const void *send = sendbuf != NULL ? sendbuf : recvbuf;
    if (c->size == 1) {
        if (send != recvbuf) memmove(recvbuf, send, bytes);
        return pmc_coll_leave(c, PMC_OK);
    }
    if (!c->shm_active)
        rc = pmc_reduce_mpi_gather(c, send, recvbuf, count, dtype, op, -1);
    else if (c->nnodes == 1)
        rc = pmc_allreduce_node_slices(&c->node_ctx, send, recvbuf, count, dtype, op, -1);
    else
        rc = pmc_allreduce_hier(c, send, recvbuf, count, dtype, op);
    return pmc_coll_leave(c, rc);
}
