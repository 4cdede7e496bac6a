/* Reductions across nodes: each node reduces to its leader through the
 * segment; the leaders exchange their partial results and combine them in
 * node order (the same bits on every node, for every element type); the
 * result then goes to the node's ranks (Allreduce) or to the root (Reduce). */
#include <string.h>

#include "../reduce/reduce_ops.h"
#include "hier.h"
#include "node_algos.h"

/* Node partial at the leader, in `partial` (bytes of scratch or recv). */
static int node_partial(pmc_comm *c, const void *send, void *partial, uint64_t count, int dtype, int op)
{
    return pmc_allreduce_node_slices(&c->node_ctx, send, partial, count, dtype, op, 0);
}

int pmc_allreduce_hier(pmc_comm *c, const void *send, void *recv, uint64_t count, int dtype, int op)
{
    const uint64_t bytes = count * (uint64_t)pmc_dtype_size(dtype);
    int rc = node_partial(c, send, recv, count, dtype, op);
    if (rc != PMC_OK) return rc;
    if (c->node_ctx.local_rank == 0) {
        unsigned char *all = pmc_scratch(c, (size_t)(bytes * (uint64_t)c->nnodes));
        if (all == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "Allreduce: out of memory");
        pmc_mpi_count n;
        rc = pmc_mpi_count_of(c, bytes, &n);
        if (rc != PMC_OK) return rc;
#if MPI_VERSION >= 4
        int mrc = MPI_Allgather_c(recv, n, MPI_BYTE, all, n, MPI_BYTE, c->lanecomm);
#else
        int mrc = MPI_Allgather(recv, n, MPI_BYTE, all, n, MPI_BYTE, c->lanecomm);
#endif
        if (mrc != MPI_SUCCESS) return pmc_mpi_fail(c, mrc, "MPI_Allgather");
        pmc_combine_blocks(recv, all, c->nnodes, count, dtype, op);
    }
    return pmc_bcast_node_cico(&c->node_ctx, recv, bytes, 0);
}

int pmc_reduce_hier(pmc_comm *c, const void *send, void *recv, uint64_t count, int dtype, int op, int root)
{
    const uint64_t bytes = count * (uint64_t)pmc_dtype_size(dtype);
    const int root_node = c->node_of[root], root_local = c->local_of[root];
    const int leader = c->node_ctx.local_rank == 0;
    /* The leader keeps its node's partial, then the combined result, in
     * scratch: [own partial | every node's partial (root's leader only)]. */
    unsigned char *scratch = NULL;
    if (leader || c->node == root_node) {
        const uint64_t blocks = leader && c->node == root_node ? 1u + (uint64_t)c->nnodes : 1u;
        scratch = pmc_scratch(c, (size_t)(bytes * blocks));
        if (scratch == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "Reduce: out of memory");
    }
    int rc = node_partial(c, send, scratch, count, dtype, op);
    if (rc != PMC_OK) return rc;
    if (leader) {
        pmc_mpi_count n;
        rc = pmc_mpi_count_of(c, bytes, &n);
        if (rc != PMC_OK) return rc;
        unsigned char *all = c->node == root_node ? scratch + bytes : NULL;
#if MPI_VERSION >= 4
        int mrc = MPI_Gather_c(scratch, n, MPI_BYTE, all, n, MPI_BYTE, root_node, c->lanecomm);
#else
        int mrc = MPI_Gather(scratch, n, MPI_BYTE, all, n, MPI_BYTE, root_node, c->lanecomm);
#endif
        if (mrc != MPI_SUCCESS) return pmc_mpi_fail(c, mrc, "MPI_Gather");
        if (c->node == root_node) pmc_combine_blocks(root_local == 0 ? recv : scratch, all, c->nnodes, count, dtype, op);
    }
    if (c->node == root_node && root_local != 0) {
        /* Hand the result from the leader to the root inside the node. */
        void *buf = c->node_ctx.local_rank == root_local ? recv : scratch;
        return pmc_bcast_node_cico(&c->node_ctx, buf, bytes, 0);
    }
    return PMC_OK;
}
