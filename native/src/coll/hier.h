/* Collective entries and their compositions across nodes: node algorithms
 * inside each node, MPI among the nodes' leaders (local rank 0, i.e. lane 0,
 * ranked by node index). All are coroutines (op.h). */
#ifndef PMC_COLL_HIER_H
#define PMC_COLL_HIER_H

#include "../comm.h"

/* Top-level algorithm of each collective (frame op->f[1]) and its check. */
#define PMC_DECLARE_COLL(name)                       \
    int pmc_##name##_check(pmc_comm *c, pmc_args *a); \
    int pmc_##name##_run(pmc_op *op);
PMC_DECLARE_COLL(barrier)
PMC_DECLARE_COLL(bcast)
PMC_DECLARE_COLL(gather)
PMC_DECLARE_COLL(gatherv)
PMC_DECLARE_COLL(scatter)
PMC_DECLARE_COLL(scatterv)
PMC_DECLARE_COLL(allgather)
PMC_DECLARE_COLL(allgatherv)
PMC_DECLARE_COLL(alltoall)
PMC_DECLARE_COLL(alltoallv)
PMC_DECLARE_COLL(allreduce)
PMC_DECLARE_COLL(reduce)
PMC_DECLARE_COLL(reduce_scatter_block)
PMC_DECLARE_COLL(reduce_scatter)
PMC_DECLARE_COLL(scan)
PMC_DECLARE_COLL(exscan)
#undef PMC_DECLARE_COLL

/* Bcast within the node (inline, single copy or copy in/out by size). */
int pmc_bcast_node(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root);
/* Allgather within the node (inline, single copy or copy in/out by size). */
int pmc_allgather_node(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block);

/* Compositions across nodes (frame f; node algorithms use f + 1). */
int pmc_barrier_hier(pmc_op *op, pmc_frame *f);
int pmc_bcast_hier(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root);
int pmc_allgather_hier(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block);
int pmc_allreduce_hier(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop);
/* Allreduce across nodes: the lanes (exchange or ring by size) or, with
 * PYMCOLL_<COLL>_ALGORITHM=leader, the single-leader hierarchy. */
int pmc_allreduce_across(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop);
int pmc_reduce_hier(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                    int root);
int pmc_scan_hier(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                  int exclusive);

/* The whole collective through the wrapped communicator's own non-blocking
 * collective (no segment, or data movement across nodes until the lane
 * algorithms take it over). */
int pmc_coll_mpi_flat(pmc_op *op, pmc_frame *f);

/* Reductions through MPI without a segment: gather every rank's input (to
 * the root, or to all) and combine in rank order, which works for every
 * element type, bfloat16 included, and gives the same bits everywhere. */
int pmc_reduce_mpi_gather(pmc_op *op, pmc_frame *f, const void *send, void *recv);
/* Starts the gather of every rank's `bytes` of input through the wrapped
 * communicator, to the root for Reduce, to every rank otherwise; completed
 * by pmc_op_mpi. A rank that `receives` gets them in rank order at f->p,
 * scratch of size x bytes plus `extra` bytes after them (NULL elsewhere). */
int pmc_reduce_inputs_start(pmc_op *op, pmc_frame *f, const void *send, uint64_t bytes, int receives, uint64_t extra);
/* Reduce across nodes by gathering every input at the root, which combines
 * them as the nodes would: each node's inputs in local-rank order, then the
 * node partials in the order of Allreduce's exchange over the lanes (on at
 * most L+1 nodes: node order, the single leader's too), so the bits are
 * Allreduce's. A rank waits only for its subtree of the gather, not for
 * the ranks of its node. */
int pmc_reduce_gather_nodes(pmc_op *op, pmc_frame *f, const void *send, void *recv);

/* Combines nblocks consecutive blocks of `count` elements in block order into out. */
void pmc_combine_blocks(void *out, const unsigned char *blocks, int nblocks, uint64_t count, int dtype, int rop);

/* Argument checks shared by the collectives' check functions. */
int pmc_check_root(pmc_comm *c, const pmc_args *a);
int pmc_check_buf(pmc_comm *c, const pmc_args *a, const char *what, const void *buf, uint64_t bytes);
int pmc_check_reduction(pmc_comm *c, const pmc_args *a, uint64_t total_count);
int pmc_check_varrays(pmc_comm *c, const pmc_args *a, const char *which, const uint64_t *counts,
                      const uint64_t *displs, const void *buf);
int pmc_check_in_place_root(pmc_comm *c, const pmc_args *a);

#endif
