/* Reduce-scatter within a node: every rank copies its input in chunk by
 * chunk; each rank reduces the part of the chunk that belongs to its own
 * block, over all inputs in rank order, straight into its receive buffer.
 * No result region and no copy out: the reduction is the only pass. Out of
 * place, the pieces of a rank's own block are read by no one else: they stay
 * out of its cells and are combined straight from its input (1/L less to
 * copy in). In place the results overwrite the input as they land, so there
 * the own pieces go through the cells too.
 *
 * A chunk carries a piece of every block (block j's piece at a fixed slot of
 * the cell), so every rank reduces in every step. Walking the vector in
 * order instead would leave one rank reducing while the others wait for its
 * cells, which serialises the reduction (and stretches badly when ranks
 * share cores). */
#include <string.h>

#include "../comm.h"
#include "../reduce/reduce_ops.h"
#include "node_algos.h"

/* Elements of a block of `c` that one of n steps carries. */
static inline uint64_t piece_of(uint64_t c, uint64_t n) { return (c + n - 1) / n; }

/* Steps for the interleaved layout: the fewest for which the pieces of all
 * blocks fit one cell, tried at the bound that ignores rounding and at one
 * that always fits. 0 when the cell holds fewer elements than there are
 * ranks (a tiny segment): then the vector is walked in order. */
static uint64_t interleaved_steps(const uint64_t *counts, uint64_t block, int L, uint64_t total, uint64_t per_chunk)
{
    uint64_t n = (total + per_chunk - 1) / per_chunk, need = 0;
    for (int j = 0; j < L; ++j) need += piece_of(pmc_count_of(counts, block, j), n);
    if (need <= per_chunk) return n;
    if (per_chunk <= (uint64_t)L) return 0;
    /* Each piece rounds up by less than one element: sum <= total / n + L. */
    return (total + per_chunk - (uint64_t)L - 1) / (per_chunk - (uint64_t)L);
}

int pmc_reduce_scatter_node_slices(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block,
                                   const uint64_t *counts, int dtype, int rop)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    const pmc_slices g = pmc_slices_of(n, esize);
    const uint64_t region = g.region, cell = g.cell, ncells = g.ncells, per_chunk = g.per_chunk;
    const unsigned char *in = send;
    /* Out of place, the pieces of my own block stay out of my cells (in the
     * interleaved layout, f->aux != 0, where they have a slot of their own). */
    const int out_of_place = send != recv;
    uint64_t lo, hi, total;
    pmc_block_bounds(counts, block, L, me, &lo, &hi, &total);

    PMC_CO_BEGIN(f);
    if (L == 1) {
        if (hi > lo && send != recv) memmove(recv, send, (hi - lo) * esize);
        f->pc = 0;
        return PMC_OK;
    }
    f->aux = interleaved_steps(counts, block, L, total, per_chunk);
    f->n = f->aux ? f->aux : (total + per_chunk - 1) / per_chunk;
    /* In place, results land at the front of the input: safe while no block
     * advances slower than mine (equal blocks); otherwise they wait aside. */
    f->p = NULL;
    if (f->aux && send == recv && counts != NULL) {
        for (int j = 0; j < L && f->p == NULL; ++j)
            if (piece_of(counts[j], f->n) < piece_of(hi - lo, f->n)) {
                f->p = pmc_scratch(op->c, (size_t)((hi - lo) * esize));
                if (f->p == NULL) {
                    f->pc = 0;
                    return pmc_fail(op->c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
                }
            }
    }
    f->base = n->step;
    f->lstep = pmc_node_use_layout(n, PMC_LAYOUT_SLICES, f->base);
    for (f->k = 0; f->k < f->n; ++f->k) {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1,
                                 pmc_cell_free_step(f->base + f->k + 1, ncells, f->lstep)));
        if (f->aux) {
            /* Piece k of every block, block j at the slot after blocks < j. */
            unsigned char *dst = n->seg.data + (uint64_t)me * region +
                                 pmc_cell_of(f->base + f->k + 1, ncells, f->lstep) * cell;
            uint64_t at = 0;
            for (int j = 0; j < L; ++j) {
                const uint64_t c = pmc_count_of(counts, block, j), q = piece_of(c, f->n), from = f->k * q;
                /* My own block's piece only I read: straight from the input, below (out of place). */
                if (from < c && !(j == me && out_of_place))
                    pmc_cell_store(dst, in + (at + from) * esize, (c - from < q ? c - from : q) * esize, n->movsb_min);
                dst += q * esize;
                at += c;
            }
            pmc_node_post(n, PMC_FLAG_SEQ, f->base + f->k + 1);
        } else {
            pmc_slices_copy_in(n, &g, f->base + f->k + 1, f->lstep, in, f->k, total, esize);
        }
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, L - 1, f->base + f->k + 1));
        {
            /* The part of my block in this chunk: [a, b) of the vector, at
             * `slot` elements into the cell. */
            uint64_t a, b, slot;
            if (f->aux) {
                const uint64_t q = piece_of(hi - lo, f->n);
                slot = 0;
                for (int j = 0; j < me; ++j) slot += piece_of(pmc_count_of(counts, block, j), f->n);
                a = lo + f->k * q < hi ? lo + f->k * q : hi;
                b = a + q < hi ? a + q : hi;
            } else {
                const uint64_t first = f->k * per_chunk;
                const uint64_t m = total - first < per_chunk ? total - first : per_chunk;
                a = first > lo ? first : lo;
                b = first + m < hi ? first + m : hi;
                slot = a - first;
            }
            if (b > a) {
                /* In place, the result lands below the input already copied in. */
                const uint64_t cell_off = pmc_cell_of(f->base + f->k + 1, ncells, f->lstep) * cell + slot * esize;
                unsigned char *acc = (f->p ? (unsigned char *)f->p : (unsigned char *)recv) + (a - lo) * esize;
                /* My own piece from my input where it was not copied in. */
                pmc_reduce_strided(acc, n->seg.data + cell_off, region, L, f->aux && out_of_place ? me : -1,
                                   in + a * esize, b - a, dtype, rop);
            }
            pmc_node_post(n, PMC_FLAG_ACK, f->base + f->k + 1);
        }
    }
    if (f->p != NULL) memcpy(recv, f->p, (hi - lo) * esize);
    n->step = f->base + f->n;
    pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}
