/* Personalised exchange within a node (scatter, alltoall and their v
 * forms): every sender's region is split into one sub-region per receiver,
 * each a ring of cells. Round k moves the k-th chunk of every pair's data,
 * so pairs of any sizes stream through a fixed data area. */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"
#include "../node/bulk_copy.h"

#define MAX_CELL ((uint64_t)1 << 18)

static inline uint64_t chunks_of(uint64_t bytes, uint64_t cell) { return (bytes + cell - 1) / cell; }
/* Where data from `from` lands: scatter receivers have one block, at recv. */
static inline uint64_t landing(const uint64_t *rdispls, uint64_t block, int from, int root)
{
    return root < 0 ? pmc_displ_of(rdispls, block, from) : 0;
}

int pmc_pairs_node_cico(pmc_op *op, pmc_frame *f, const void *send, const uint64_t *scounts,
                        const uint64_t *sdispls, void *recv, const uint64_t *rcounts, const uint64_t *rdispls,
                        uint64_t block, int root, int known)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const int i_write = root < 0 || me == root;
    const int i_read = root < 0 || me != root;
    const int nsources = root < 0 ? L - 1 : 1;
    /* Sub-region of (sender, receiver): senders are numbered among the writers. */
    const uint64_t region = (n->seg.data_bytes / (uint64_t)(root < 0 ? L : 1)) & ~(uint64_t)63;
    const uint64_t sub = (region / (uint64_t)L) & ~(uint64_t)63;
    uint64_t cell = (sub / pmc_ring_cells(n)) & ~(uint64_t)63;
    if (cell > MAX_CELL) cell = MAX_CELL;
    if (cell < 64) cell = 64; /* no segment (a node of one rank): nothing is copied */
    const uint64_t ncells = sub / cell < PMC_MAX_CELLS ? sub / cell : PMC_MAX_CELLS;
    const unsigned char *in = send;
    unsigned char *out = recv;
#define CELL(s) pmc_cell_rot((s), ncells, f->lstep)
/* The chunk a reading rank reads in round k (one behind its writes when it writes ahead). */
#define READ_K (f->k - f->aux)
#define SUB(sender, receiver) \
    (n->seg.data + (uint64_t)(root < 0 ? (sender) : 0) * region + (uint64_t)(receiver) * sub)

    PMC_CO_BEGIN(f);
    if (i_write && out != NULL && pmc_count_of(scounts, block, me) > 0 &&
        in + pmc_displ_of(sdispls, block, me) != out + landing(rdispls, block, me, root))
        pmc_bulk_copy(out + landing(rdispls, block, me, root), in + pmc_displ_of(sdispls, block, me),
                      pmc_count_of(scounts, block, me), n->stream_min);
    if (L == 1) {
        f->pc = 0;
        return PMC_OK;
    }
    f->n = 0;
    for (int i = 0; i < L; ++i) {
        if (i == me) continue;
        if (i_write && chunks_of(pmc_count_of(scounts, block, i), cell) > f->n)
            f->n = chunks_of(pmc_count_of(scounts, block, i), cell);
        if (i_read && (root < 0 || i == root) && chunks_of(pmc_count_of(rcounts, block, i), cell) > f->n)
            f->n = chunks_of(pmc_count_of(rcounts, block, i), cell);
    }
    f->base = n->step;
    f->lstep = pmc_node_use_layout(n, root < 0 ? PMC_LAYOUT_PAIRS : PMC_LAYOUT_SCATTER + root, f->base);
    /* With a ring of two or more cells a rank that both writes and reads
     * writes chunk k before it reads chunk k-1: its peer's next chunk is
     * then in flight while it copies out, instead of each pair of ranks
     * waiting for each other every chunk. One cell keeps the lock step
     * (the next write needs the peer's acknowledgement of this read). */
    f->aux = (i_write && i_read && ncells >= 2) ? 1 : 0;
    for (f->k = 0; f->k < f->n + f->aux; ++f->k) {
        if (i_write && f->k < f->n) {
            for (f->j = 0; f->j < L - 1; ++f->j) {
                if (f->k >= chunks_of(pmc_count_of(scounts, block, n->others[f->j]), cell)) continue;
                /* Only the receiver reads a sub-region within one collective;
                 * a use in an earlier one may have had any reader. The last
                 * write is tracked per cell over all sub-regions: a later
                 * step than this pair's own, so waiting for it is safe. */
                if (pmc_step_geq(f->base, n->cell_last[CELL(f->base + f->k + 1)])) {
                    PMC_AWAIT(f, pmc_op_wait_acked(op, n->others, L - 1, n->cell_last[CELL(f->base + f->k + 1)]));
                } else {
                    PMC_AWAIT(f, pmc_op_wait_acked(op, &n->others[f->j], 1, n->cell_last[CELL(f->base + f->k + 1)]));
                }
                {
                    const int to = n->others[f->j];
                    const uint64_t s = f->base + f->k + 1, off = f->k * cell, total = pmc_count_of(scounts, block, to);
                    const uint64_t len = total - off < cell ? total - off : cell;
                    pmc_cell_store(SUB(me, to) + CELL(s) * cell, in + pmc_displ_of(sdispls, block, to) + off, len, n->movsb_min);
                }
            }
            n->cell_last[CELL(f->base + f->k + 1)] = f->base + f->k + 1;
            pmc_node_post(n, PMC_FLAG_SEQ, f->base + f->k + 1);
        }
        if (i_read && f->k >= f->aux) {
            for (f->j = 0; f->j < nsources; ++f->j) {
                if (READ_K >= chunks_of(pmc_count_of(rcounts, block, root < 0 ? n->others[f->j] : root), cell))
                    continue;
                PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, root < 0 ? &n->others[f->j] : &root, 1,
                                         f->base + READ_K + 1));
                {
                    const int from = root < 0 ? n->others[f->j] : root;
                    const uint64_t s = f->base + READ_K + 1, off = READ_K * cell;
                    const uint64_t total = pmc_count_of(rcounts, block, from);
                    const uint64_t len = total - off < cell ? total - off : cell;
                    pmc_chunk_copy_out(out + landing(rdispls, block, from, root) + off, SUB(from, me) + CELL(s) * cell,
                                       len, total, n->stream_min);
                }
            }
            pmc_node_post(n, PMC_FLAG_ACK, f->base + READ_K + 1);
        }
    }
#undef SUB
#undef READ_K
#undef CELL
    n->step = f->base + (known ? f->n : PMC_STEP_STRIDE);
    pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}
