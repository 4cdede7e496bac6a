/* Personalised exchange with counts only the pair's two ends know
 * (Scatterv, Alltoallv), each block on the path its size calls for: a block
 * big enough for single copy is fetched by its receiver straight from the
 * sender's buffer; the others stream through the pairs cells. A pair's path
 * depends only on its count, which both its ends know, so no rank needs
 * the others' counts.
 *
 * The cells then run with the single-copy blocks counted as empty. Their
 * first step s also carries each sender's exposure (in its inline line): its
 * send buffer and its displacement array, from which a receiver reads where
 * its block starts. A rank acknowledges s only after its single-copy
 * fetches, which come first, so a sender that exposed returns once every
 * rank acknowledged s. Displacements that step evenly from 0 (equal
 * blocks back to back, the common case) travel as their stride instead,
 * which saves every receiver a read. Sharing the step keeps the cell rotation of the
 * cells' calls (one stride per call), so consecutive calls pipeline.
 * Scatterv readers take turns, at most pmc_cma_readers() on the root at a
 * time; Alltoallv receivers start at their right neighbour, so the readers
 * of one sender are spread out. */
#include <string.h>

#include "../comm.h"
#include "../node/cma.h"
#include "node_algos.h"

/* Whether any block between this rank and another takes single copy:
 * sends (counts of the receivers) or receives (counts of the senders). */
static int any_single_copy(const pmc_comm *c, int coll, const uint64_t *counts, uint64_t block, int me, int L)
{
    for (int i = 0; i < L; ++i)
        if (i != me && pmc_single_copy(c, coll, pmc_count_of(counts, block, i))) return 1;
    return 0;
}

/* Kind of the second descriptor when it carries a stride in `where`
 * (displacement of block i = i * stride) instead of describing memory. */
#define DISPLS_STRIDE 0u

/* Whether displs[i] == i * stride for every i < L (stride set if so). */
static int even_stride(const uint64_t *displs, int L, uint64_t *stride)
{
    const uint64_t st = L > 1 ? displs[1] : 0;
    if (displs[0] != 0 || st > UINT64_MAX / (uint64_t)L) return 0;
    for (int i = 2; i < L; ++i)
        if (displs[i] != (uint64_t)i * st) return 0;
    *stride = st;
    return 1;
}

/* Publishes this sender's exposure: its send buffer, and its displacements
 * (or their stride). Built inside the awaited call, so that a resumed
 * publish copies them out again. */
static int publish_send(pmc_op *op, pmc_frame *f, const void *send, const uint64_t *scounts,
                        const uint64_t *sdispls)
{
    pmc_comm *c = op->c;
    const int L = c->node_ctx.local_size;
    pmc_desc d[2];
    pmc_desc_make(c->heap, send, pmc_v_extent(scounts, sdispls, L), &d[0]);
    uint64_t stride;
    if (even_stride(sdispls, L, &stride))
        d[1] = (pmc_desc){.where = stride, .len = 0, .kind = DISPLS_STRIDE, .pad = 0};
    else
        pmc_desc_make(c->heap, sdispls, (uint64_t)L * sizeof(uint64_t), &d[1]);
    return pmc_inline_publish(op, f, d, sizeof(d));
}

/* counts with the single-copy blocks set to 0 (this rank's own kept). */
static void cells_only(const pmc_comm *c, int coll, uint64_t *dst, const uint64_t *counts, int me, int L)
{
    for (int i = 0; i < L; ++i) dst[i] = i != me && pmc_single_copy(c, coll, counts[i]) ? 0 : counts[i];
}

int pmc_pairs_node_split(pmc_op *op, pmc_frame *f, const void *send, const uint64_t *scounts,
                         const uint64_t *sdispls, void *recv, const uint64_t *rcounts, const uint64_t *rdispls,
                         uint64_t block, int root)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const int i_write = root < 0 || me == root, i_read = root < 0 || me != root;
    const int kind = root < 0 ? PMC_COLL_ALLTOALLV : PMC_COLL_SCATTERV; /* whose crossover applies */
    const int exposes = L > 1 && i_write && any_single_copy(c, kind, scounts, block, me, L);
    /* Alltoallv receivers adjust their counts too; a Scatterv reader has one. */
    const int adjusts = exposes || (L > 1 && root < 0 && any_single_copy(c, kind, rcounts, block, me, L));
    const int pos = root < 0 ? 0 : (me - root - 1 + L) % L; /* order among the Scatterv readers */
    unsigned char *out = recv;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f->p = NULL;
    if (adjusts) {
        f->p = pmc_scratch(c, 2 * (size_t)L * sizeof(uint64_t));
        if (f->p == NULL) {
            f->pc = 0;
            return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
        }
        if (i_write) cells_only(c, kind, f->p, scounts, me, L);
        if (root < 0) cells_only(c, kind, (uint64_t *)f->p + L, rcounts, me, L);
    }
    if (exposes) {
        f[1].aux = f->aux;
        PMC_AWAIT(f, publish_send(op, f + 1, send, scounts, sdispls));
    }
    if (L > 1 && i_read) {
        for (f->j = 0; f->j < (root < 0 ? L - 1 : 1); ++f->j) {
            f->peers[1] = root < 0 ? (me + 1 + f->j) % L : root;
            if (!pmc_single_copy(c, kind, pmc_count_of(rcounts, block, f->peers[1]))) continue;
            if (root >= 0 && pos >= pmc_cma_readers(n)) {
                f->peers[0] = (root + 1 + pos - pmc_cma_readers(n)) % L;
                PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, f->peers, 1, f->aux));
            }
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, &f->peers[1], 1, f->aux));
            {
                const int src = f->peers[1];
                pmc_desc d[2];
                uint64_t displ = 0;
                memcpy(d, pmc_inline_payload(pmc_inline_line(n, src, f->aux)), sizeof(d));
                int rc = PMC_OK;
                if (d[1].kind == DISPLS_STRIDE)
                    displ = (uint64_t)me * d[1].where;
                else
                    rc = pmc_fetch(n, src, &d[1], (uint64_t)me * sizeof(uint64_t), &displ, sizeof(displ));
                if (rc == PMC_OK)
                    rc = pmc_fetch(n, src, &d[0], displ, out + (root < 0 ? rdispls[src] : 0),
                                   pmc_count_of(rcounts, block, src));
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
        }
    }
    if (root < 0) {
        PMC_AWAIT(f, pmc_pairs_node_cico(op, f + 1, send, f->p ? (const uint64_t *)f->p : scounts, sdispls, recv,
                                         f->p ? (const uint64_t *)f->p + L : rcounts, rdispls, block, root, 0));
    } else if (i_write) {
        PMC_AWAIT(f, pmc_pairs_node_cico(op, f + 1, send, f->p ? (const uint64_t *)f->p : scounts, sdispls, recv,
                                         NULL, NULL, block, root, 0));
    } else {
        PMC_AWAIT(f, pmc_pairs_node_cico(op, f + 1, send, NULL, NULL, recv, NULL, NULL,
                                         pmc_single_copy(c, kind, block) ? 0 : block, root, 0));
    }
    /* The single-copy receivers are done with the send buffer. */
    if (exposes) PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1, f->aux));
    PMC_CO_END(f);
}
