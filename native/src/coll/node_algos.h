/* Algorithms that run among the ranks of one node through the segment.
 * They know only the node context (op->c->node_ctx) and their frame; the
 * collective entries in this folder compose them with MPI calls between
 * nodes. All are coroutines (see op.h): PMC_OK when done, PMC_PENDING when
 * a non-blocking op must come back later, or an error. Ranks, counts and
 * displacements here are local ranks and bytes unless said otherwise. */
#ifndef PMC_COLL_NODE_ALGOS_H
#define PMC_COLL_NODE_ALGOS_H

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "../node/bulk_copy.h"
#include "../node/node.h"
#include "../op.h"

/* Block i's size and offset in an array of blocks given by counts and
 * displacements, or (arrays NULL) `block` bytes each, back to back. */
static inline uint64_t pmc_count_of(const uint64_t *counts, uint64_t block, int i)
{
    return counts ? counts[i] : block;
}
static inline uint64_t pmc_displ_of(const uint64_t *displs, uint64_t block, int i)
{
    return displs ? displs[i] : (uint64_t)i * block;
}

/* All local ranks post, all wait for all. */
int pmc_barrier_node_flags(pmc_op *op, pmc_frame *f);
/* Fan-in to local rank 0 (returns once every local rank arrived there). */
int pmc_barrier_node_fanin(pmc_op *op, pmc_frame *f);
/* Fan-out from local rank 0 (others return once rank 0 released them). */
int pmc_barrier_node_fanout(pmc_op *op, pmc_frame *f);

/* Pipelined copy in / copy out through cells of n->chunk bytes. */
int pmc_bcast_node_cico(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root);

/* Every local rank i contributes counts[i] bytes (counts NULL: `block`
 * each) that land at recv + displs[i] (NULL: i * block). root < 0: every
 * rank receives (allgather); root >= 0: only that local rank receives
 * (gather) and recv is ignored elsewhere. send may alias this rank's block
 * of recv. known = 0 when the ranks do not all know every count (Gatherv:
 * only the root does). */
int pmc_gather_node_cico(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block,
                         const uint64_t *counts, const uint64_t *displs, int root, int known);

/* Personalised exchange: local rank i sends scounts[j] bytes from
 * send + sdispls[j] to local rank j, which receives them at recv +
 * rdispls[i] (rcounts[i] bytes). root < 0: every rank sends (alltoall);
 * root >= 0: only that rank sends (scatter; the others' send arrays are
 * ignored, and they receive rcounts[root] (or block) bytes at recv). recv
 * NULL at the root: it keeps its own block (in place). Arrays NULL:
 * `block` bytes at multiples of block. known: as for gather. */
int pmc_pairs_node_cico(pmc_op *op, pmc_frame *f, const void *send, const uint64_t *scounts,
                        const uint64_t *sdispls, void *recv, const uint64_t *rcounts, const uint64_t *rdispls,
                        uint64_t block, int root, int known);

/* Reduction of `count` elements: every local rank copies its input into its
 * region chunk by chunk, reduces one slice of the chunk from every rank's
 * region in rank order, and every receiver copies the whole result out.
 * root < 0: every rank receives (allreduce); root >= 0: only that local rank.
 * send may equal recv (in place). */
int pmc_allreduce_node_slices(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count,
                              int dtype, int rop, int root);

/* The PMC_LAYOUT_SLICES data area: one input region per local rank, each a
 * ring of cells of whole elements, one step per chunk. */
typedef struct pmc_slices {
    uint64_t region, cell, ncells, per_chunk;
} pmc_slices;

static inline pmc_slices pmc_slices_of(const pmc_node *n, uint64_t esize)
{
    pmc_slices g;
    g.region = (n->seg.data_bytes / (uint64_t)n->local_size) & ~(uint64_t)63;
    g.cell = g.region / 2;
    if (g.cell > ((uint64_t)1 << 18)) g.cell = (uint64_t)1 << 18;
    g.cell &= ~(uint64_t)63;
    if (g.cell < 64) g.cell = 64; /* no segment (a node of one rank): nothing is copied */
    g.ncells = g.region / g.cell;
    g.per_chunk = g.cell / esize;
    return g;
}

/* Copies chunk k of `in` (total elements) into this rank's cell of step s
 * and publishes it. */
static inline void pmc_slices_copy_in(pmc_node *n, const pmc_slices *g, uint64_t s, uint64_t lstep,
                                      const unsigned char *in, uint64_t k, uint64_t total, uint64_t esize)
{
    const uint64_t first = k * g->per_chunk, m = total - first < g->per_chunk ? total - first : g->per_chunk;
    pmc_cell_store(n->seg.data + (uint64_t)n->local_rank * g->region + pmc_cell_of(s, g->ncells, lstep) * g->cell,
                   in + first * esize, m * esize, n->movsb_min);
    pmc_node_post(n, PMC_FLAG_SEQ, s);
}

/* Block `me` of a vector cut into blocks of counts[i] elements (counts NULL:
 * `block` each): its bounds [*lo, *hi) and the vector's length. */
static inline void pmc_block_bounds(const uint64_t *counts, uint64_t block, int nblocks, int me, uint64_t *lo,
                                    uint64_t *hi, uint64_t *total)
{
    *lo = *total = 0;
    for (int i = 0; i < nblocks; ++i) {
        if (i == me) *lo = *total;
        *total += pmc_count_of(counts, block, i);
    }
    *hi = *lo + pmc_count_of(counts, block, me);
}

/* Reduce-scatter: local rank i receives elements [off_i, off_i + counts[i])
 * of the reduction (counts NULL: `block` each), reduced by itself straight
 * into recv. send may equal recv (in place). */
int pmc_reduce_scatter_node_slices(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block,
                                   const uint64_t *counts, int dtype, int rop);
/* The same by single copy: each rank reduces its block from the others'
 * exposed inputs (no cells, one synchronisation). recv may overlap send (in
 * place, or a slice of send): the block then waits aside until all are done. */
int pmc_reduce_scatter_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block,
                                const uint64_t *counts, int dtype, int rop);
/* Elements [lo, hi) of local rank i's slice of `count` in the single-copy
 * reductions: the first count % L slices hold one more. */
static inline void pmc_slice_of(uint64_t count, int L, int i, uint64_t *lo, uint64_t *hi)
{
    const uint64_t per = count / (uint64_t)L, extra = count % (uint64_t)L, r = (uint64_t)i;
    *lo = r * per + (r < extra ? r : extra);
    *hi = *lo + per + (r < extra ? 1 : 0);
}

/* Allreduce by single copy: each rank reduces its slice from the others'
 * exposed inputs, then the slices are gathered by single copy. send may
 * equal recv (in place). */
int pmc_allreduce_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop);
/* Reduce to local rank `root` by single copy, each rank's slice stored into
 * the root's recv chunk by chunk as it is reduced. send may equal recv at
 * the root (in place); recv is unused elsewhere. */
int pmc_reduce_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                        int root);

/* Prefix reduction in local rank order: inclusive (Scan) or exclusive
 * (Exscan: local rank 0's recv is left alone). send may equal recv. */
int pmc_scan_node(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                  int exclusive);
/* The same by single copy: every rank exposes its input and combines the
 * inputs of the ranks before it (and its own) straight from their buffers;
 * in place the result waits in scratch until the ranks after it are done. */
int pmc_scan_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                      int exclusive);
/* Every rank contributes; this rank combines the inputs of local ranks
 * 0 .. upto-1 in rank order into recv (upto 0: it only contributes). */
int pmc_reduce_node_flat(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                         int upto);

/* Tiny messages (payload per rank <= PMC_INLINE_BYTES) through the inline
 * lines, one step. gather: root < 0 gathers to all. reduce: kind says which
 * reduction (ALL: allreduce with root < 0, reduce otherwise). */
enum { PMC_INLINE_ALL = 0, PMC_INLINE_SCAN, PMC_INLINE_EXSCAN, PMC_INLINE_RSCATTER };
/* Writer side of an inline step f->aux: waits until its line's slot is free
 * (every rank acknowledged the step PMC_INLINE_SLOTS back), then publishes
 * `bytes` (<= PMC_INLINE_BYTES) of src with the step number. */
int pmc_inline_publish(pmc_op *op, pmc_frame *f, const void *src, uint64_t bytes);
int pmc_bcast_node_inline(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root);
int pmc_gather_node_inline(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block, int root);
int pmc_reduce_node_inline(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype,
                           int rop, int root, int kind);

/* Single copy (CMA, or a plain memcpy from the shared heap): ranks publish
 * where their buffer is in their inline line and the readers copy straight
 * from it; one step, and an exposing rank returns once its readers are done.
 * Bcast goes down a binary tree (no source has more than two readers at a
 * time); gather/allgather read peers in a staggered order; scatter lets at
 * most PMC_CMA_READERS readers at a time at the root; alltoall is uniform. */
#define PMC_CMA_READERS 4

/* Readers at a time on a Scatter(v) root: the turns keep many readers from
 * pinning the root's pages at once; where the node's ranks outnumber its
 * CPUs (agreed over the node) the scheduler runs no more readers than
 * there are CPUs anyway, and turns only add wake-ups to the chain (8 ranks
 * on 2 cores, 16 MiB: Scatter 1614 -> 1187 us, Scatterv 1513 -> 1118). */
static inline int pmc_cma_readers(const pmc_node *n) { return n->yield_now ? INT_MAX : PMC_CMA_READERS; }
/* Publishes a descriptor of buf at step f->aux (with pmc_inline_publish). */
int pmc_cma_expose(pmc_op *op, pmc_frame *f, const void *buf, uint64_t bytes);
/* Copies len bytes at offset off of what local rank src exposed at step s. */
int pmc_cma_fetch_from(pmc_op *op, int src, uint64_t s, uint64_t off, void *dst, uint64_t len);
/* Copies len bytes of src to offset off of what local rank dst exposed at step s. */
int pmc_cma_store_to(pmc_op *op, int dst, uint64_t s, uint64_t off, const void *src, uint64_t len);
/* PMC_OK when local rank peer exposed exactly `bytes` at step s; else
 * PMC_ERR_MISMATCH, the message set and the node told (the ranks disagree
 * on the message size where no read or write past the exposure shows it). */
int pmc_cma_expect_len(pmc_op *op, int peer, uint64_t s, uint64_t bytes);
/* Bytes a reduction from exposed inputs fetches at a time. Each fetch is a
 * system call that pins the peer's pages: at 2 ranks 256 KiB took 0.83-0.87
 * of 64 KiB's time, 512 KiB 0.90-0.96 of 256 KiB's, 1 MiB no less than
 * 512 KiB (perf/studies/large_and_back_to_back.md). */
#define PMC_CMA_REDUCE_CHUNK ((uint64_t)512 << 10)
/* Elements [lo, hi) of the inputs local ranks 0 .. upto-1 exposed at step s
 * (this rank's own from send), combined in rank order into out (hi - lo
 * elements); tmp holds PMC_CMA_REDUCE_CHUNK bytes. stream: out is a result
 * the caller does not read back, written with streaming stores. */
int pmc_cma_reduce_from(pmc_op *op, uint64_t s, int upto, const void *send, uint64_t lo, uint64_t hi, void *out,
                        void *tmp, int dtype, int rop, int stream);
int pmc_bcast_node_cma(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root);
int pmc_gather_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block,
                        const uint64_t *counts, const uint64_t *displs, int root);
int pmc_scatter_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block, int root);
int pmc_alltoall_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block);

/* The v forms whose counts only the pair's ends know, each block on the
 * path its size calls for (single copy or cells). Arrays are local ranks,
 * bytes. pairs: as pmc_pairs_node_cico (root < 0: Alltoallv; root >= 0:
 * Scatterv, readers pass their count as block and no arrays). gatherv: count
 * is this rank's block, the arrays are read at the root only; send at the
 * root may alias its block of recv. */
int pmc_pairs_node_split(pmc_op *op, pmc_frame *f, const void *send, const uint64_t *scounts,
                         const uint64_t *sdispls, void *recv, const uint64_t *rcounts, const uint64_t *rdispls,
                         uint64_t block, int root);
int pmc_gatherv_node_split(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count,
                           const uint64_t *rcounts, const uint64_t *rdispls, int root);

#endif
