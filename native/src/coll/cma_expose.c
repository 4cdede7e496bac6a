/* Exposing a buffer for single copy (its descriptor goes out inline),
 * fetching from a peer's exposed buffer, and reducing straight from the
 * exposed inputs of several peers. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../comm.h"
#include "../node/cma.h"
#include "../node/huge_pages.h"
#include "../reduce/reduce_ops.h"
#include "node_algos.h"
#include "../node/bulk_copy.h"

int pmc_cma_expose(pmc_op *op, pmc_frame *f, const void *buf, uint64_t bytes)
{
    /* Rebuilt on every resume from stable arguments; copied out when published. */
    pmc_desc d;
    pmc_desc_make(op->c->heap, buf, bytes, &d);
    /* Peers will copy from or into it through the kernel: huge pages make that faster. */
    if (d.kind == PMC_DESC_ADDR) (void)pmc_huge_pages_note(&op->c->huge, buf, bytes, op->seq);
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

/* A block of results made in this stack buffer, then streamed out whole. */
#define STREAM_BLOCK 4096

/* out = lhs op rhs (m elements), the results written with streaming stores
 * in whole aligned lines: a result this large leaves the cache before it is
 * read, and a plain store first reads every line of it in. out may be lhs. */
static void reduce_to_streamed(void *out, const void *lhs, const void *rhs, uint64_t m, uint64_t esize, int dtype,
                               int rop)
{
    unsigned char *o = out;
    const unsigned char *l = lhs, *r = rhs;
    const uint64_t to_line = (64 - ((uintptr_t)o & 63)) & 63;
    if (to_line % esize != 0) { /* elements straddle the lines: no whole lines to stream */
        pmc_reduce_to(out, lhs, rhs, m, dtype, rop);
        return;
    }
    const uint64_t head = to_line / esize < m ? to_line / esize : m, per = STREAM_BLOCK / esize;
    pmc_reduce_to(o, l, r, head, dtype, rop);
    o += head * esize, l += head * esize, r += head * esize, m -= head;
    _Alignas(64) unsigned char block[STREAM_BLOCK];
    for (; m >= per; m -= per, o += STREAM_BLOCK, l += STREAM_BLOCK, r += STREAM_BLOCK) {
        pmc_reduce_to(block, l, r, per, dtype, rop);
        pmc_stream_lines(o, block, STREAM_BLOCK);
    }
    pmc_reduce_to(o, l, r, m, dtype, rop);
    pmc_stream_fence();
}

/* Input r's elements [a, a + m): this rank's own (`own`), a peer's read in
 * place in the shared heap (*direct set), or fetched into buf. */
static int chunk_input(pmc_op *op, uint64_t s, int r, const unsigned char *own, uint64_t a, uint64_t m,
                       uint64_t esize, unsigned char *buf, const unsigned char **p, int *direct)
{
    pmc_node *n = &op->c->node_ctx;
    if (r == n->local_rank) {
        *p = own + a * esize;
        return PMC_OK;
    }
    pmc_desc d;
    memcpy(&d, pmc_inline_payload(pmc_inline_line(n, r, s)), sizeof(d));
    const void *at = NULL;
    int rc = pmc_peek(n, r, &d, a * esize, m * esize, &at);
    if (rc != PMC_OK) return rc;
    if (at != NULL) {
        *p = at;
        *direct = 1;
        return PMC_OK;
    }
    *p = buf;
    return pmc_fetch(n, r, &d, a * esize, buf, m * esize);
}

int pmc_cma_reduce_from(pmc_op *op, uint64_t s, int upto, const void *send, uint64_t lo, uint64_t hi, void *out,
                        void *tmp, int dtype, int rop, int stream)
{
    pmc_node *n = &op->c->node_ctx;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype), per = PMC_CMA_REDUCE_CHUNK / esize;
    const unsigned char *in = send;
    if (upto == 1) {
        /* A copy of one input (Exscan's second rank, Scan's first): one fetch. */
        if (n->local_rank != 0) return pmc_cma_fetch_from(op, 0, s, lo * esize, out, (hi - lo) * esize);
        if (in + lo * esize != (const unsigned char *)out) pmc_bulk_copy(out, in + lo * esize, (hi - lo) * esize, n->stream_min);
        return PMC_OK;
    }
    /* The first two inputs are combined in one pass where at most one of them
     * must be fetched (this rank's own and inputs in the shared heap are read
     * where they lie): no copy of the first input and second pass over it. */
    for (uint64_t a = lo; a < hi; a += per) {
        const uint64_t m = hi - a < per ? hi - a : per;
        unsigned char *acc = (unsigned char *)out + (a - lo) * esize;
        const unsigned char *p0, *p1;
        int direct = 0;
        int rc = chunk_input(op, s, 1, in, a, m, esize, tmp, &p1, &direct);
        if (rc == PMC_OK) rc = chunk_input(op, s, 0, in, a, m, esize, p1 == tmp ? acc : tmp, &p0, &direct);
        if (rc == PMC_OK && direct) rc = pmc_node_copy_begin(n);
        if (rc != PMC_OK) return rc;
        if (stream && upto == 2) reduce_to_streamed(acc, p0, p1, m, esize, dtype, rop);
        else if (p0 == acc) pmc_reduce_into(acc, p1, m, dtype, rop);
        else pmc_reduce_to(acc, p0, p1, m, dtype, rop);
        if (direct) pmc_node_copy_end(n);
        for (int r = 2; r < upto; ++r) {
            const unsigned char *p;
            direct = 0;
            rc = chunk_input(op, s, r, in, a, m, esize, tmp, &p, &direct);
            if (rc == PMC_OK && direct) rc = pmc_node_copy_begin(n);
            if (rc != PMC_OK) return rc;
            if (stream && r == upto - 1) reduce_to_streamed(acc, acc, p, m, esize, dtype, rop);
            else pmc_reduce_into(acc, p, m, dtype, rop);
            if (direct) pmc_node_copy_end(n);
        }
    }
    return PMC_OK;
}
