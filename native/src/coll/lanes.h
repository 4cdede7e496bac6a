/* Lanes between nodes (the multi-object design): local rank k < L of every
 * node is lane k and talks only to lane k of other nodes, over the lane
 * communicator whose ranks are node indices. The helpers here start and
 * complete a lane's point-to-point messages (counted per rank), give the
 * node buffer the lane algorithms share, and measure node ranges. */
#ifndef PMC_COLL_LANES_H
#define PMC_COLL_LANES_H

#include "../comm.h"

/* Starts a send / receive of `bytes` to / from `node` on this rank's lane;
 * completed together by pmc_lane_wait. */
int pmc_lane_send(pmc_op *op, const void *buf, uint64_t bytes, int node);
int pmc_lane_recv(pmc_op *op, void *buf, uint64_t bytes, int node);
/* The same between two ranks of the communicator, any nodes (counted
 * alike, completed by pmc_lane_wait too). */
int pmc_rank_send(pmc_op *op, const void *buf, uint64_t bytes, int rank);
int pmc_rank_recv(pmc_op *op, void *buf, uint64_t bytes, int rank);
/* Completes every lane message started (blocks or polls by op->blocking,
 * with the collective's deadline). */
int pmc_lane_wait(pmc_op *op);
/* After a failed op: cancels its lane receives into the caller's buffers
 * and releases the rest (counted in c->left_in_flight, so that pmc_comm_free
 * keeps the memory they use). */
void pmc_lanes_abandon(pmc_comm *c);

/* The node's lanes meet at step s: this lane posts it and waits until the
 * other lanes did (a rank past the lanes waits for all lanes). */
int pmc_lane_barrier(pmc_op *op, uint64_t s);

/* This rank's lane, or -1 for a local rank past the lanes. */
static inline int pmc_lane_of(const pmc_comm *c)
{
    return c->node_ctx.local_rank < c->lanes ? c->node_ctx.local_rank : -1;
}

/* Largest Reduce that goes up the single leader by default where the lanes'
 * exchange would be one round (coll/allreduce.c). */
#define PMC_REDUCE_LEADER_MAX ((uint64_t)32 << 10)
/* Largest Reduce that goes to the root in one gather by default: per rank,
 * and every rank's input together (coll/allreduce.c). The gather carries
 * every rank's vector across the links where the leaders carry one per node:
 * on test-bed hosts at 1 Gbit/s, 4 ranks on 2 hosts, 0.43-0.54x MPICH's
 * time at 8-512 B (the single leader 0.95-1.2x), but 1.5-1.7x at 2 KiB
 * (the leader 0.9). */
#define PMC_REDUCE_GATHER_MAX ((uint64_t)1 << 10)
#define PMC_REDUCE_GATHER_TOTAL_MAX ((uint64_t)16 << 10)

/* Whether the lane algorithms serve collective `coll` across nodes (the
 * single-leader hierarchy when PYMCOLL_<COLL>_ALGORITHM=leader). */
static inline int pmc_use_lanes(const pmc_comm *c, int coll)
{
    return c->algorithm[coll] != PMC_ALGO_LEADER;
}

/* Bytes of the blocks of the `j` nodes starting at node `from` (cyclic),
 * each rank `block` bytes: node m's ranks are members[member_start[m] ..]. */
static inline uint64_t pmc_nodes_bytes(const pmc_comm *c, int from, int j, uint64_t block)
{
    const int end = from + j;
    const uint64_t ranks = end <= c->nnodes
                               ? (uint64_t)((end < c->nnodes ? c->member_start[end] : c->size) - c->member_start[from])
                               : (uint64_t)(c->size - c->member_start[from] + c->member_start[end - c->nnodes]);
    return ranks * block;
}

/* Rounds of an exchange that multiplies the nodes covered by `radix` each
 * round until all nnodes are covered. */
static inline int pmc_lane_rounds(int nnodes, int radix)
{
    int r = 0;
    for (long cur = 1; cur < nnodes; cur *= radix) ++r;
    return r;
}

/* The node buffer of `bytes`: the segment's data area, shared by the node's
 * ranks (the caller checked bytes <= c->data_bytes), or this rank's scratch
 * on a node of one rank (no segment). NULL when out of memory. */
unsigned char *pmc_node_buffer(pmc_comm *c, uint64_t bytes);
/* A lane algorithm's start: f->p = the node buffer of `bytes`, f->base =
 * the node's step, the segment's data area laid out as the node buffer.
 * The caller then waits for PMC_FLAG_ACK at f->base (the buffer is free
 * once every local rank is done with the calls before). */
int pmc_node_buffer_claim(pmc_op *op, pmc_frame *f, uint64_t bytes);

/* The lanes' tree's start: like pmc_node_buffer_claim, but a message of
 * at most a slot (the data area over pmc_ring_cells()) takes the next slot
 * of a ring, so that a rank that finished a call starts the next ones while
 * others still read theirs, as an eager protocol lets it. The call ends at
 * f->base + steps. The caller then waits for PMC_FLAG_ACK at f->aux: the
 * slot's previous call (f->base for the whole buffer). */
int pmc_node_ring_claim(pmc_op *op, pmc_frame *f, uint64_t bytes, uint64_t steps);

/* Copies the blocks of every node between nodebuf, where they lie in node
 * order from node `first` (cyclic), each node's ranks by local rank, and
 * ranks, in rank order: to_ranks = 1 from nodebuf to ranks, 0 back. */
void pmc_nodes_reorder(const pmc_comm *c, unsigned char *nodebuf, unsigned char *ranks, uint64_t block, int first,
                       int to_ranks);

/* Allgatherv among the node's ranks of parts of one buffer: local rank j
 * holds c->lcounts[j] bytes at buf + c->ldispls[j] and every rank ends with
 * all parts (copy in/out or single copy by the largest part). */
int pmc_lane_share(pmc_op *op, pmc_frame *f, void *buf);

/* Lane algorithms across nodes (frame f; node steps use f + 1). */
int pmc_allgather_lanes_bruck(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block);
int pmc_allgather_lanes_ring(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block);
/* The lanes' tree (lanes_tree.c). Down: Bcast (blocks = 0, `block` is the
 * message, send = recv = the buffer) or Scatter (blocks = 1, send read at
 * the root, recv NULL at the root in place); up: Gather. fits: whether the
 * blocks of every rank fit the node buffer. */
int pmc_lanes_tree_fits(const pmc_comm *c, uint64_t block);
int pmc_lanes_tree_down(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block, int root, int blocks);
int pmc_lanes_tree_up(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block, int root);
/* Alltoall (op->a.count bytes per pair) and Alltoallv (op->a's counts)
 * across nodes, reading `send` (recvbuf copied aside when in place);
 * single_leader: one lane per node. fits: whether the segment holds the
 * slots (v: and the published counts). */
int pmc_alltoall_lanes_fits(const pmc_comm *c, int single_leader, int v);
int pmc_alltoall_lanes_pairwise(pmc_op *op, pmc_frame *f, const void *send, int single_leader);
int pmc_bcast_lanes_sliced(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root);
/* Whether a vector of `bytes` takes the recursive exchange (small, fits the node buffer). */
int pmc_allreduce_lanes_fits(const pmc_comm *c, uint64_t bytes);
int pmc_allreduce_lanes_exchange(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype,
                                 int rop);
/* Combines the nnodes node partials (consecutive, `count` elements each) in
 * the exchange's order, so that partials[0] holds the exchange's bits: the
 * folds, then each round's groups in digit order. Overwrites the others. */
void pmc_allreduce_lanes_exchange_order(const pmc_comm *c, unsigned char *partials, uint64_t count, int dtype,
                                        int rop);
/* root >= 0: Reduce to that rank (recv is read there only). */
int pmc_allreduce_lanes_ring(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype,
                             int rop, int root);

#endif
