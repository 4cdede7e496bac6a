/* Reduce within a node by single copy, each slice stored into the root as it
 * is reduced. Every rank exposes its input (step s) and the root also its
 * receive buffer (step s + 1). Each rank reduces its slice from the exposed
 * inputs in rank order (the same bits as every other reduction path), one
 * chunk at a time into a buffer that stays in cache, and a rank other than
 * the root stores each chunk straight into the root's result. Reducing the
 * whole slice aside and storing it afterwards writes the slice to memory and
 * reads it back on the critical path: at 2 ranks and 16 MiB that pass was a
 * fifth of the call (perf/studies/large_and_back_to_back.md). */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"

/* Reduces elements [lo, hi) chunk by chunk into acc and hands each chunk on:
 * into place in out (the root's result, in place with its own input) or
 * stored into what the root exposed at step s + 1. */
static int reduce_chunks(pmc_op *op, uint64_t s, const void *send, uint64_t lo, uint64_t hi, unsigned char *out,
                         int root, unsigned char *acc, unsigned char *tmp, int dtype, int rop)
{
    pmc_node *n = &op->c->node_ctx;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype), per = PMC_CMA_REDUCE_CHUNK / esize;
    for (uint64_t a = lo; a < hi; a += per) {
        const uint64_t m = hi - a < per ? hi - a : per;
        int rc = pmc_cma_reduce_from(op, s, n->local_size, send, a, a + m, acc, tmp, dtype, rop, 0);
        if (rc != PMC_OK) return rc;
        if (n->local_rank == root) {
            memcpy(out + (a - lo) * esize, acc, m * esize);
        } else {
            rc = pmc_cma_store_to(op, root, s + 1, a * esize, acc, m * esize);
            if (rc != PMC_OK) return rc;
        }
    }
    return PMC_OK;
}

int pmc_reduce_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                        int root)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    uint64_t lo, hi;
    pmc_slice_of(count, L, me, &lo, &hi);
    unsigned char *out = me == root ? (unsigned char *)recv + lo * esize : NULL;
    /* The root's slice result may not overwrite its own input before every
     * input of that chunk is combined (in place): it then goes through acc. */
    const uintptr_t in_at = (uintptr_t)send, out_at = (uintptr_t)out;
    const int through_acc = me != root || (hi > lo && out_at < in_at + count * esize && in_at < out_at + (hi - lo) * esize);
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f->peers[0] = root;
    f[1].aux = f->aux;
    PMC_AWAIT(f, pmc_cma_expose(op, f + 1, send, count * esize));
    if (me == root) {
        f[1].aux = f->aux + 1;
        PMC_AWAIT(f, pmc_cma_expose(op, f + 1, recv, count * esize));
    }
    f->p = pmc_scratch(c, (size_t)(2 * PMC_CMA_REDUCE_CHUNK));
    if (f->p == NULL) {
        f->pc = 0;
        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
    }
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, n->others, L - 1, f->aux));
    if (me != root) PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, f->peers, 1, f->aux + 1));
    {
        unsigned char *tmp = f->p;
        const int rc = through_acc
                           ? reduce_chunks(op, f->aux, send, lo, hi, out, root, tmp + PMC_CMA_REDUCE_CHUNK, tmp, dtype, rop)
                           : pmc_cma_reduce_from(op, f->aux, L, send, lo, hi, out, tmp, dtype, rop, 0);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    /* Done reading the others' inputs and, off the root, storing into its result. */
    pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1, f->aux));
    n->step = f->aux + 1;
    pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}
