/* Gatherv within a node, each block on its own path: a writer whose block is
 * big enough for single copy stores it straight into the root's receive
 * buffer; the others stream through the gather cells. A pair's path depends
 * only on its count, which both its ends know, so the writers need not know
 * each other's counts.
 *
 * The writers cannot know where their block goes (only the root has the
 * displacements), so the root publishes, in its inline line of the cells'
 * first step s, two exposures: its receive buffer and a table of
 * (displacement, count) per rank. A single-copy writer reads its entry,
 * checks the count against its own (a disagreement breaks the communicator
 * at once instead of overwriting a neighbour's block), stores its block,
 * marks its entry stored and acknowledges s; the root returns once every
 * writer has acknowledged s (so none reads its table later), and checks the
 * marks. The root publishes only when it expects a single-copy block: a
 * writer that counts one where the root counts a block for the cells waits
 * for a line that never comes and ends at the deadline (PYMCOLL_CHECK=1
 * finds it before any data moves); acknowledging early to tell it would let
 * the cells reuse a chunk the root has not read. The writers
 * store at the same time, where the root used to fetch block after block.
 * The cells run with the single-copy blocks counted as empty; sharing the
 * step keeps their rotation (one stride per call), so calls pipeline. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../comm.h"
#include "../node/cma.h"
#include "node_algos.h"

/* A table entry's count once its writer has stored the block: a writer
 * that took the cells instead (it saw a count below the crossover where the
 * root saw one above) leaves the count, and the root reports it. */
#define STORED UINT64_MAX

/* Stores this writer's block where the root's table says, after checking the count the root expects. */
static int store_block(pmc_op *op, int root, uint64_t s, const void *send, uint64_t count)
{
    pmc_node *n = &op->c->node_ctx;
    pmc_desc d[2];
    uint64_t entry[2];
    const uint64_t at = (uint64_t)n->local_rank * sizeof(entry);
    memcpy(d, pmc_inline_payload(pmc_inline_line(n, root, s)), sizeof(d));
    int rc = pmc_fetch(n, root, &d[1], at, entry, sizeof(entry));
    if (rc != PMC_OK) return rc;
    if (entry[1] != count) {
        snprintf(n->errmsg, n->errlen, "%s #%" PRIu64 ": the root (local rank %d) expects %" PRIu64
                 " bytes from local rank %d, which sends %" PRIu64 " (the ranks disagree on the message size; "
                 "PYMCOLL_CHECK=1 names the argument); the communicator is broken: Free() it",
                 n->coll, n->coll_seq, root, entry[1], n->local_rank, count);
        pmc_node_abort(n);
        return PMC_ERR_MISMATCH;
    }
    rc = pmc_store(n, root, &d[0], entry[0], send, count);
    if (rc != PMC_OK) return rc;
    const uint64_t stored = STORED;
    return pmc_store(n, root, &d[1], at + sizeof(uint64_t), &stored, sizeof(stored));
}

/* The root's exposures: its receive buffer and its table. Built inside the
 * awaited call, so that a resumed publish copies them out again. */
static int publish_table(pmc_op *op, pmc_frame *f, void *recv, const uint64_t *rcounts, const uint64_t *rdispls,
                         const uint64_t *table)
{
    const int L = op->c->node_ctx.local_size;
    pmc_desc d[2];
    pmc_desc_make(op->c->heap, recv, pmc_v_extent(rcounts, rdispls, L), &d[0]);
    pmc_desc_make(op->c->heap, table, (uint64_t)L * 2 * sizeof(uint64_t), &d[1]);
    return pmc_inline_publish(op, f, d, sizeof(d));
}

/* The root, once every writer acknowledged: each single-copy entry must say its block was stored. */
static int check_stored(pmc_op *op, const uint64_t *rcounts, const uint64_t *table)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    for (int i = 0; i < n->local_size; ++i) {
        if (i == n->local_rank || !pmc_single_copy(c, PMC_COLL_GATHERV, rcounts[i]) || table[2 * i + 1] == STORED)
            continue;
        snprintf(n->errmsg, n->errlen, "%s #%" PRIu64 ": local rank %d did not send its %" PRIu64 " bytes by single "
                 "copy (it counts another size; the ranks disagree on the message size; PYMCOLL_CHECK=1 names "
                 "the argument); the communicator is broken: Free() it", n->coll, n->coll_seq, i, rcounts[i]);
        pmc_node_abort(n);
        return PMC_ERR_MISMATCH;
    }
    return PMC_OK;
}

/* Whether the root expects any block by single copy. */
static int expects_single_copy(const pmc_comm *c, const uint64_t *rcounts, int root, int L)
{
    for (int i = 0; i < L; ++i)
        if (i != root && pmc_single_copy(c, PMC_COLL_GATHERV, rcounts[i])) return 1;
    return 0;
}

int pmc_gatherv_node_split(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count,
                           const uint64_t *rcounts, const uint64_t *rdispls, int root)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f->p = NULL;
    /* A node of one rank has no segment: the cells copy its block. */
    if (L > 1 && me == root && expects_single_copy(c, rcounts, root, L)) {
        /* The cells' counts (single-copy blocks empty), then the table the writers read. */
        uint64_t *cells = pmc_scratch(c, (size_t)L * 3 * sizeof(uint64_t));
        if (cells == NULL) {
            f->pc = 0;
            return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
        }
        uint64_t *table = cells + L;
        for (int i = 0; i < L; ++i) {
            int single = i != root && pmc_single_copy(c, PMC_COLL_GATHERV, rcounts[i]);
            cells[i] = single ? 0 : rcounts[i];
            table[2 * i] = rdispls[i];
            table[2 * i + 1] = rcounts[i];
        }
        f->p = cells;
        f[1].aux = f->aux;
        PMC_AWAIT(f, publish_table(op, f + 1, recv, rcounts, rdispls, (const uint64_t *)f->p + L));
    }
    if (me == root) {
        PMC_AWAIT(f, pmc_gather_node_cico(op, f + 1, send, recv, 0, f->p ? (const uint64_t *)f->p : rcounts,
                                          rdispls, root, 0));
        if (f->p != NULL) {
            /* Every writer acknowledges the first step once done with this rank's line and table (a
             * single-copy writer once its block is in place); then the marks tell who stored. */
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1, f->aux));
            int rc = check_stored(op, rcounts, (const uint64_t *)f->p + L);
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
    } else if (L > 1 && pmc_single_copy(c, PMC_COLL_GATHERV, count)) {
        f->peers[0] = root;
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, f->peers, 1, f->aux));
        {
            int rc = store_block(op, root, f->aux, send, count);
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
        pmc_node_post(n, PMC_FLAG_ACK, f->aux);
        PMC_AWAIT(f, pmc_gather_node_cico(op, f + 1, send, recv, 0, NULL, NULL, root, 0));
    } else {
        PMC_AWAIT(f, pmc_gather_node_cico(op, f + 1, send, recv, count, NULL, NULL, root, 0));
    }
    PMC_CO_END(f);
}
