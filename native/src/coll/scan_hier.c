/* Prefix reductions across nodes holding consecutive rank ranges: each
 * node's total reaches its leader, the leaders exchange totals and combine
 * those of the nodes before theirs (in node order), the node broadcasts that
 * prefix, and every rank combines it with its prefix inside the node. */
#include <string.h>

#include "../reduce/reduce_ops.h"
#include "hier.h"
#include "node_algos.h"

int pmc_scan_hier(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                  int exclusive)
{
    pmc_comm *c = op->c;
    const uint64_t bytes = count * (uint64_t)pmc_dtype_size(dtype);
    const int leader = c->node_ctx.local_rank == 0;
    /* Outer scratch f->p: [prefix of earlier nodes | node total | all totals]. */
#define PREFIX ((unsigned char *)f->p)
    PMC_CO_BEGIN(f);
    f->p = pmc_scratch_outer(c, (size_t)(bytes * (2u + (uint64_t)c->nnodes)));
    if (f->p == NULL) {
        f->pc = 0;
        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", c->node_ctx.coll);
    }
    PMC_AWAIT(f, pmc_allreduce_node_slices(op, f + 1, send, (unsigned char *)f->p + bytes, count, dtype, rop, 0));
    if (leader) {
        {
            pmc_mpi_count n;
            unsigned char *p = f->p;
            int rc = pmc_mpi_count_of(c, bytes, &n);
#if MPI_VERSION >= 4
            int mrc = rc == PMC_OK ? MPI_Iallgather_c(p + bytes, n, MPI_BYTE, p + 2 * bytes, n, MPI_BYTE, c->lanecomm,
                                                      &op->mreq)
                                   : MPI_SUCCESS;
#else
            int mrc = rc == PMC_OK ? MPI_Iallgather(p + bytes, n, MPI_BYTE, p + 2 * bytes, n, MPI_BYTE, c->lanecomm,
                                                    &op->mreq)
                                   : MPI_SUCCESS;
#endif
            if (rc == PMC_OK && mrc != MPI_SUCCESS) rc = pmc_mpi_fail(c, mrc, "MPI_Iallgather");
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
        PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Iallgather"));
        if (c->node > 0) pmc_combine_blocks(PREFIX, PREFIX + 2 * bytes, c->node, count, dtype, rop);
    }
    if (c->node > 0) PMC_AWAIT(f, pmc_bcast_node_cico(op, f + 1, f->p, bytes, 0));
    PMC_AWAIT(f, pmc_scan_node(op, f + 1, send, recv, count, dtype, rop, exclusive));
    if (c->node > 0) {
        if (exclusive && leader) memcpy(recv, PREFIX, bytes);
        else pmc_reduce_into(recv, PREFIX, count, dtype, rop);
    }
    PMC_CO_END(f);
#undef PREFIX
}
