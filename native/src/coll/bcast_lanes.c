/* Bcast across nodes on the lanes.
 *
 * Small messages go down the (L+1)-ary tree over nodes through the node
 * buffer: the root, or the lane that received the message, puts it there;
 * the node's lanes forward it to their children, all at once, while every
 * rank copies it out. A node's depth is log_{L+1} of its distance from the
 * root's node, against log_2 for one leader per node.
 *
 * Large messages are cut into L slices: inside the root's node the root
 * broadcasts the message, lane k broadcasts slice k to lane k of every node
 * (the L lanes' broadcasts run concurrently), and the ranks of each other
 * node share the slices their lanes received. */
#include <string.h>

#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

int pmc_bcast_lanes_tree(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int N = c->nnodes, R = c->lanes + 1, lane = pmc_lane_of(c), me = n->local_rank;
    const int root_node = c->node_of[root], root_local = c->local_of[root];
    const int v = (c->node - root_node + N) % N, shared = n->local_size > 1;
    /* f->peers[0]: the local rank that fills the node buffer. */
    PMC_CO_BEGIN(f);
    f->p = pmc_node_buffer(c, bytes);
    if (f->p == NULL) {
        f->pc = 0;
        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory for the node buffer", n->coll);
    }
    f->base = n->step;
    pmc_node_use_layout(n, PMC_LAYOUT_NODEBUF, f->base);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, n->local_size - 1, f->base));
    f->peers[0] = root_local;
    if (v == 0) {
        if (me == root_local) memcpy(f->p, buf, bytes);
    } else {
        long d;
        int k;
        pmc_tree_parent(v, R, &d, &k);
        f->peers[0] = k - 1;
        if (lane == k - 1) {
            int rc = pmc_lane_recv(op, f->p, bytes, (int)((root_node + v - (long)k * d) % N));
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
    }
    if (me == f->peers[0]) {
        PMC_AWAIT(f, pmc_lane_wait(op));
        if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 1);
    } else {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, f->peers, 1, f->base + 1));
    }
    if (lane >= 0) {
        const long limit = pmc_tree_limit(v, R, N), end = v + pmc_tree_span(v, R, N);
        for (long e = 1; e < limit; e *= R) {
            const long child = v + (long)(lane + 1) * e;
            if (child >= end) continue;
            int rc = pmc_lane_send(op, f->p, bytes, (int)((root_node + child) % N));
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
    }
    if (v != 0 || me != root_local) memcpy(buf, f->p, bytes);
    PMC_AWAIT(f, pmc_lane_wait(op));
    n->step = f->base + 1;
    if (shared) pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}

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
