/* Exposing a buffer for single copy (its descriptor goes out inline),
 * fetching from a peer's exposed buffer, and reducing straight from the
 * exposed inputs of several peers. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../comm.h"
#include "../node/cma.h"
#include "../reduce/reduce_ops.h"
#include "node_algos.h"
#include "../node/bulk_copy.h"

int pmc_cma_expose(pmc_op *op, pmc_frame *f, const void *buf, uint64_t bytes)
{
    /* Rebuilt on every resume from stable arguments; copied out when published. */
    pmc_desc d;
    pmc_desc_make(op->c->heap, buf, bytes, &d);
    return pmc_inline_publish(op, f, &d, sizeof(d));
}

int pmc_cma_fetch_from(pmc_op *op, int src, uint64_t s, uint64_t off, void *dst, uint64_t len)
{
    pmc_node *n = &op->c->node_ctx;
    pmc_desc d;
    memcpy(&d, pmc_inline_payload(pmc_inline_line(n, src, s)), sizeof(d));
    return pmc_fetch(n, src, &d, off, dst, len);
}

int pmc_cma_store_to(pmc_op *op, int dst, uint64_t s, uint64_t off, const void *src, uint64_t len)
{
    pmc_node *n = &op->c->node_ctx;
    pmc_desc d;
    memcpy(&d, pmc_inline_payload(pmc_inline_line(n, dst, s)), sizeof(d));
    return pmc_store(n, dst, &d, off, src, len);
}

int pmc_cma_expect_len(pmc_op *op, int peer, uint64_t s, uint64_t bytes)
{
    pmc_node *n = &op->c->node_ctx;
    pmc_desc d;
    memcpy(&d, pmc_inline_payload(pmc_inline_line(n, peer, s)), sizeof(d));
    if (d.len == bytes) return PMC_OK;
    snprintf(n->errmsg, n->errlen, "%s #%" PRIu64 ": local rank %d has %" PRIu64 " bytes but local rank %d has %"
             PRIu64 " (the ranks disagree on the message size; PYMCOLL_CHECK=1 names the argument); the "
             "communicator is broken: Free() it", n->coll, n->coll_seq, peer, d.len, n->local_rank, bytes);
    pmc_node_abort(n);
    return PMC_ERR_MISMATCH;
}

int pmc_cma_reduce_from(pmc_op *op, uint64_t s, int upto, const void *send, uint64_t lo, uint64_t hi, void *out,
                        void *tmp, int dtype, int rop)
{
    const int me = op->c->node_ctx.local_rank;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype), per = PMC_CMA_REDUCE_CHUNK / esize;
    const unsigned char *in = send;
    if (upto == 1) {
        /* A copy of one input (Exscan's second rank, Scan's first): one fetch. */
        if (me != 0) return pmc_cma_fetch_from(op, 0, s, lo * esize, out, (hi - lo) * esize);
        if (in + lo * esize != (const unsigned char *)out) pmc_bulk_copy(out, in + lo * esize, (hi - lo) * esize, op->c->node_ctx.stream_min);
        return PMC_OK;
    }
    /* Where this rank's own input is one of the first two, those two are
     * combined in one pass (the other fetched into tmp): no copy of the
     * first input and second pass over it. */
    const int pair = me <= 1 && me < upto;
    for (uint64_t a = lo; a < hi; a += per) {
        const uint64_t m = hi - a < per ? hi - a : per;
        unsigned char *acc = (unsigned char *)out + (a - lo) * esize;
        const unsigned char *own = in + a * esize;
        int r = 0;
        if (pair) {
            int rc = pmc_cma_fetch_from(op, 1 - me, s, a * esize, tmp, m * esize);
            if (rc != PMC_OK) return rc;
            pmc_reduce_to(acc, me == 0 ? own : tmp, me == 0 ? tmp : own, m, dtype, rop);
            r = 2;
        }
        for (; r < upto; ++r) {
            const unsigned char *src = own;
            if (r != me) {
                /* The first input lands in the result directly. */
                unsigned char *dst = r == 0 ? acc : tmp;
                int rc = pmc_cma_fetch_from(op, r, s, a * esize, dst, m * esize);
                if (rc != PMC_OK) return rc;
                src = dst;
            }
            if (r == 0) {
                if (src != acc) memcpy(acc, src, m * esize);
            } else {
                pmc_reduce_into(acc, src, m, dtype, rop);
            }
        }
    }
    return PMC_OK;
}
