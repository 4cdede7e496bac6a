/* Reduce: entry, argument check and algorithm choice. */
#include <string.h>

#include "../comm.h"
#include "hier.h"
#include "node_algos.h"
#include "reduce_entry.h"

int pmc_reduce(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op, int root)
{
    if (c == NULL) return PMC_ERR_ARG;
    int rc = pmc_coll_enter(c, "Reduce");
    if (rc != PMC_OK) return rc;
    if (root < 0 || root >= c->size)
        return pmc_fail(c, PMC_ERR_ARG, "Reduce: root=%d is not a rank of this communicator "
                        "(expected 0 <= root < %d)", root, c->size);
    uint64_t bytes = 0;
    rc = pmc_reduce_check(c, "Reduce", recvbuf, count, dtype, op, c->rank == root, &bytes);
    if (rc != PMC_OK) return rc;
    rc = pmc_coll_agree(c, PMC_COLL_REDUCE, bytes, dtype, op, root);
    if (rc != PMC_OK) return pmc_coll_leave(c, rc);
    if (count == 0) return pmc_coll_leave(c, PMC_OK);
    if (sendbuf == NULL && c->rank != root)
        return pmc_fail(c, PMC_ERR_ARG, "Reduce: only the root may pass MPI.IN_PLACE");
    const void *send = sendbuf != NULL ? sendbuf : recvbuf;
    if (c->size == 1) {
        if (send != recvbuf) memmove(recvbuf, send, bytes);
        return pmc_coll_leave(c, PMC_OK);
    }
    if (!c->shm_active)
        rc = pmc_reduce_mpi_gather(c, send, recvbuf, count, dtype, op, root);
    else if (c->nnodes == 1)
        rc = pmc_allreduce_node_slices(&c->node_ctx, send, recvbuf, count, dtype, op, c->local_of[root]);
    else
        rc = pmc_reduce_hier(c, send, recvbuf, count, dtype, op, root);
    return pmc_coll_leave(c, rc);
}
