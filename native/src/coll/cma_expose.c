/* Exposing a buffer for single copy: its descriptor goes out inline. */
#include <string.h>

#include "../comm.h"
#include "../node/cma.h"
#include "node_algos.h"

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
