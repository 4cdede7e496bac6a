/* Algorithms that run among the ranks of one node through the segment.
 * They know only the node context; the collective entries in this folder
 * compose them with MPI calls between nodes. */
#ifndef PMC_COLL_NODE_ALGOS_H
#define PMC_COLL_NODE_ALGOS_H

#include <stdint.h>

#include "../node/node.h"

/* All local ranks post, all wait for all. */
int pmc_barrier_node_flags(pmc_node *n);
/* Fan-in to local rank 0 (returns once every local rank arrived there). */
int pmc_barrier_node_fanin(pmc_node *n);
/* Fan-out from local rank 0 (others return once rank 0 released them). */
int pmc_barrier_node_fanout(pmc_node *n);

/* Pipelined copy in / copy out through cells of n->chunk bytes. */
int pmc_bcast_node_cico(pmc_node *n, void *buf, uint64_t bytes, int root);

/* Every local rank contributes `block` bytes; recv holds local_size blocks
 * in local-rank order. root < 0: every rank receives (allgather);
 * root >= 0: only that local rank receives (gather) and recv is ignored
 * elsewhere. send may alias this rank's block of recv. */
int pmc_allgather_node_cico(pmc_node *n, const void *send, void *recv, uint64_t block, int root);

/* Reduction of `count` elements: every local rank copies its input into its
 * region chunk by chunk, reduces one slice of the chunk from every rank's
 * region in rank order, and every receiver copies the whole result out.
 * root < 0: every rank receives (allreduce); root >= 0: only that local rank.
 * send may equal recv (in place). */
int pmc_allreduce_node_slices(pmc_node *n, const void *send, void *recv, uint64_t count,
                              int dtype, int op, int root);

#endif
