/* Reductions across nodes: each node reduces to its leader through the
 * segment; the leaders exchange their partial results and combine them in
 * node order (the same bits on every node, for every element type); the
 * result then goes to the node's ranks (Allreduce) or to the root (Reduce). */
#include <string.h>

#include "hier.h"
#include "node_algos.h"

/* Starts the leaders' exchange of node partials: to all leaders (root_node
 * < 0) or to the root's leader. */
static int leaders_start(pmc_op *op, const void *partial, void *all, uint64_t bytes, int root_node)
{
    pmc_comm *c = op->c;
    pmc_mpi_count n;
    int rc = pmc_mpi_count_of(c, bytes, &n);
    if (rc != PMC_OK) return rc;
    int mrc;
#if MPI_VERSION >= 4
    mrc = root_node < 0 ? MPI_Iallgather_c(partial, n, MPI_BYTE, all, n, MPI_BYTE, c->lanecomm, &op->mreq)
                        : MPI_Igather_c(partial, n, MPI_BYTE, all, n, MPI_BYTE, root_node, c->lanecomm, &op->mreq);
#else
    mrc = root_node < 0 ? MPI_Iallgather(partial, n, MPI_BYTE, all, n, MPI_BYTE, c->lanecomm, &op->mreq)
                        : MPI_Igather(partial, n, MPI_BYTE, all, n, MPI_BYTE, root_node, c->lanecomm, &op->mreq);
#endif
    return mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(c, mrc, root_node < 0 ? "MPI_Iallgather" : "MPI_Igather");
}

int pmc_allreduce_hier(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop)
{
    pmc_comm *c = op->c;
    const uint64_t bytes = count * (uint64_t)pmc_dtype_size(dtype);
    PMC_CO_BEGIN(f);
    PMC_AWAIT(f, pmc_allreduce_node_slices(op, f + 1, send, recv, count, dtype, rop, 0));
    if (c->node_ctx.local_rank == 0) {
        f->p = pmc_scratch(c, (size_t)(bytes * (uint64_t)c->nnodes));
        int rc = f->p == NULL ? pmc_fail(c, PMC_ERR_NOMEM, "Allreduce: out of memory")
                              : leaders_start(op, recv, f->p, bytes, -1);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
        PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Iallgather"));
        pmc_combine_blocks(recv, f->p, c->nnodes, count, dtype, rop);
    }
    PMC_AWAIT(f, pmc_bcast_node_cico(op, f + 1, recv, bytes, 0));
    PMC_CO_END(f);
}

int pmc_reduce_hier(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                    int root)
{
    pmc_comm *c = op->c;
    const uint64_t bytes = count * (uint64_t)pmc_dtype_size(dtype);
    const int root_node = c->node_of[root], root_local = c->local_of[root];
    const int leader = c->node_ctx.local_rank == 0;
    /* The leader keeps its node's partial, then the combined result, in
     * scratch: [own partial | every node's partial (root's leader only)]. */
    PMC_CO_BEGIN(f);
    f->p = NULL;
    if (leader || c->node == root_node) {
        const uint64_t blocks = leader && c->node == root_node ? 1u + (uint64_t)c->nnodes : 1u;
        f->p = pmc_scratch(c, (size_t)(bytes * blocks));
        if (f->p == NULL) {
            f->pc = 0;
            return pmc_fail(c, PMC_ERR_NOMEM, "Reduce: out of memory");
        }
    }
    PMC_AWAIT(f, pmc_allreduce_node_slices(op, f + 1, send, f->p, count, dtype, rop, 0));
    if (leader) {
        {
            unsigned char *scratch = f->p;
            int rc = leaders_start(op, scratch, c->node == root_node ? scratch + bytes : NULL, bytes, root_node);
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
        PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Igather"));
        if (c->node == root_node)
            pmc_combine_blocks(root_local == 0 ? recv : f->p, (unsigned char *)f->p + bytes, c->nnodes, count, dtype, rop);
    }
    if (c->node == root_node && root_local != 0) {
        /* Hand the result from the leader to the root inside the node. */
        PMC_AWAIT(f, pmc_bcast_node_cico(op, f + 1, c->node_ctx.local_rank == root_local ? recv : f->p, bytes, 0));
    }
    PMC_CO_END(f);
}
