/* Tiny messages within a node through the inline lines: every writer puts
 * its payload next to the step number in its own cache line, so a reader
 * gets flag and data in one transfer. One step per collective; a writer
 * reuses a line once every rank has acknowledged the step PMC_INLINE_SLOTS
 * back, which lets consecutive collectives run up to that far ahead.
 * Reductions combine every rank's payload in rank order on each reader:
 * the same bits everywhere, and the same as the slice algorithm's. */
#include <string.h>

#include "../comm.h"
#include "../reduce/reduce_ops.h"
#include "node_algos.h"

int pmc_inline_publish(pmc_op *op, pmc_frame *f, const void *src, uint64_t bytes)
{
    pmc_node *n = &op->c->node_ctx;
    PMC_CO_BEGIN(f);
    PMC_AWAIT(f, pmc_op_wait_acked(op, n->others, n->local_size - 1, f->aux - PMC_INLINE_SLOTS));
    {
        pmc_flag *line = pmc_inline_line(n, n->local_rank, f->aux);
        if (bytes > 0) memcpy(pmc_inline_payload(line), src, bytes);
        atomic_store_explicit(&line->v, f->aux, memory_order_release);
    }
    PMC_CO_END(f);
}

static inline const unsigned char *payload_of(pmc_node *n, int rank, uint64_t s)
{
    return pmc_inline_payload(pmc_inline_line(n, rank, s));
}

/* Ends the collective's step: everything of step s read. */
static void finish_step(pmc_node *n, uint64_t s)
{
    n->step = s;
    pmc_node_post(n, PMC_FLAG_ACK, s);
}

int pmc_bcast_node_inline(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root)
{
    pmc_node *n = &op->c->node_ctx;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    if (n->local_rank == root) {
        /* (f + 1 keeps publish's resume point apart from ours) */
        f[1].aux = f->aux;
        PMC_AWAIT(f, pmc_inline_publish(op, f + 1, buf, bytes));
    } else {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, &root, 1, f->aux));
        memcpy(buf, payload_of(n, root, f->aux), bytes);
    }
    finish_step(n, f->aux);
    PMC_CO_END(f);
}

int pmc_gather_node_inline(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block, int root)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    unsigned char *out = recv;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    if (root < 0 || me != root) {
        f[1].aux = f->aux;
        PMC_AWAIT(f, pmc_inline_publish(op, f + 1, send, block));
    }
    if (root < 0 || me == root) {
        if (send != out + (uint64_t)me * block) memcpy(out + (uint64_t)me * block, send, block);
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, n->others, L - 1, f->aux));
        for (int r = 0; r < L; ++r)
            if (r != me) memcpy(out + (uint64_t)r * block, payload_of(n, r, f->aux), block);
    }
    finish_step(n, f->aux);
    PMC_CO_END(f);
}

int pmc_reduce_node_inline(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype,
                           int rop, int root, int kind)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    /* Inputs: count elements each, or L blocks of count for reduce-scatter. */
    const uint64_t in_bytes = (kind == PMC_INLINE_RSCATTER ? (uint64_t)L : 1u) * count * esize;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f[1].aux = f->aux;
    PMC_AWAIT(f, pmc_inline_publish(op, f + 1, send, in_bytes));
    {
        /* Who this rank needs, and which part of each payload. */
        int first = 0, last = L; /* ranks combined: [first, last) */
        uint64_t off = 0;
        int needed = 1;
        switch (kind) {
        case PMC_INLINE_ALL: needed = root < 0 || root == me; break;
        case PMC_INLINE_SCAN: last = me + 1; break;
        case PMC_INLINE_EXSCAN: last = me; needed = me > 0; break;
        case PMC_INLINE_RSCATTER: off = (uint64_t)me * count * esize; break;
        default: break;
        }
        f->j = needed ? last : 0;
        f->n = off;
        (void)first;
    }
    /* Ranks below f->j; all of them for the full reductions. */
    if (f->j > 0) {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, n->others, L - 1, f->aux));
        {
            unsigned char *acc = recv;
            memcpy(acc, payload_of(n, 0, f->aux) + f->n, count * esize);
            for (int r = 1; r < f->j; ++r) pmc_reduce_into(acc, payload_of(n, r, f->aux) + f->n, count, dtype, rop);
        }
    }
    finish_step(n, f->aux);
    PMC_CO_END(f);
}
