/* Bcast across nodes on the lanes for large messages (small ones go down
 * the lanes' tree, lanes_tree.c), cut into L slices: inside the root's node
 * the root broadcasts the message, lane k broadcasts slice k to lane k of
 * every node (the L lanes' broadcasts run concurrently), and the ranks of
 * each other node share the slices their lanes received. */
#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

int pmc_bcast_lanes_sliced(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root)
{
    pmc_comm *c = op->c;
    const int N = c->nnodes, lane = pmc_lane_of(c), L = c->lanes;
    const int root_node = c->node_of[root];
    const int v = (c->node - root_node + N) % N;
    PMC_CO_BEGIN(f);
    if (v == 0) PMC_AWAIT(f, pmc_bcast_node(op, f + 1, buf, bytes, c->local_of[root]));
    if (lane >= 0) {
        const uint64_t lo = bytes * (uint64_t)lane / (uint64_t)L, hi = bytes * (uint64_t)(lane + 1) / (uint64_t)L;
        pmc_mpi_count cnt;
        int rc = pmc_mpi_count_of(c, hi - lo, &cnt);
#if MPI_VERSION >= 4
        int mrc = rc == PMC_OK ? MPI_Ibcast_c((unsigned char *)buf + lo, cnt, MPI_BYTE, root_node, c->lanecomm, &op->mreq)
                               : MPI_SUCCESS;
#else
        int mrc = rc == PMC_OK ? MPI_Ibcast((unsigned char *)buf + lo, cnt, MPI_BYTE, root_node, c->lanecomm, &op->mreq)
                               : MPI_SUCCESS;
#endif
        if (rc == PMC_OK && mrc != MPI_SUCCESS) rc = pmc_mpi_fail(c, mrc, "MPI_Ibcast (lane)");
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
        PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Ibcast (lane)"));
    }
    if (v != 0) {
        for (int i = 0; i < c->node_ctx.local_size; ++i) {
            c->ldispls[i] = i < L ? bytes * (uint64_t)i / (uint64_t)L : 0;
            c->lcounts[i] = i < L ? bytes * (uint64_t)(i + 1) / (uint64_t)L - c->ldispls[i] : 0;
        }
        PMC_AWAIT(f, pmc_lane_share(op, f + 1, buf));
    }
    PMC_CO_END(f);
}
