/* Alltoall and Alltoallv across nodes: every local rank a leader for a
 * share of the node pairs (the multi-object design applied to the pairwise
 * exchange). Node pairs go by distance j = 1 .. N-1: node m sends everything
 * its ranks send to node m+j in one message and receives the one of node
 * m-j. Lane (j-1) mod L carries distance j, so a phase serves L distances
 * at once, one per lane; distance 0 (the node's own blocks) rides along in
 * the first phase without MPI.
 *
 * A message lies source-rank-major: for each local rank r of the sending
 * node, its blocks for the receiving node's ranks in local order. Every
 * rank packs its own row of every message of the phase into the node
 * buffer, the lanes exchange, every rank unpacks its own column. Messages
 * larger than a slot go in chunks of C bytes, the same C on every node (it
 * follows from the segment size and the layout only), so both ends of a
 * pair cut a message alike; a phase takes as many rounds as its longest
 * message has chunks on this node. Send slots are refilled only after the
 * lanes sent them and receive slots posted again only after every rank
 * packed the next round, i.e. unpacked this one; the node's own blocks,
 * packed and unpacked by everyone, alternate between two slots. With a
 * lane count of 1 the same code is
 * the single-leader variant.
 *
 * A node pair whose blocks average PYMCOLL_LANES_DIRECT_MIN bytes or more
 * is not gathered: its ranks send each other their blocks straight from
 * and into the caller's buffers, completed before the first round (every
 * rank then sends on its own, and the copies through the node buffer would
 * cost more than the message count saves). They are not overlapped with
 * the rounds: ranks waiting on the node's flags do not drive MPI, and a
 * large message needs both ends to. Both ends of a pair know its total, so
 * they agree.
 *
 * Alltoallv: every rank publishes its send and receive counts in the node
 * buffer first; offsets inside a message follow from them on both ends. */
#include <string.h>

#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

/* Slots are aligned for the copies (and never smaller than this). */
#define SLOT_ALIGN 64u
#define SLOT_MIN 4096u

typedef struct a2a {
    pmc_comm *c;
    int nl;                  /* lanes used: c->lanes, or 1 for the single leader */
    int N, m, ls;            /* nodes, this node, its ranks */
    uint64_t block;          /* Alltoall: bytes per pair */
    const uint64_t *sc, *rc; /* Alltoallv: published [ls][size] send / receive counts */
    uint64_t C;              /* chunk (slot) bytes */
    uint64_t direct_min;     /* mean block from which a node pair goes rank to rank */
    unsigned char *slots;    /* 2*nl + 2 slots of C: sends, receives, the node's own (two) */
} a2a;

static uint64_t counts_bytes(const pmc_comm *c, int v)
{
    return v ? 2u * (uint64_t)c->max_local * (uint64_t)c->size * sizeof(uint64_t) : 0;
}

/* The chunk size every node computes alike; 0 when the segment is too
 * small for slots worth having. */
static uint64_t chunk_bytes(const pmc_comm *c, int nl, int v)
{
    const uint64_t counts = counts_bytes(c, v);
    if (c->data_bytes <= counts) return 0;
    uint64_t C = (c->data_bytes - counts) / (2u * (uint64_t)nl + 2u);
    C -= C % SLOT_ALIGN;
    return C >= SLOT_MIN ? C : 0;
}

int pmc_alltoall_lanes_fits(const pmc_comm *c, int single_leader, int v)
{
    return chunk_bytes(c, single_leader ? 1 : c->lanes, v) > 0;
}

/* Bytes local rank r of this node sends to rank q, and local rank q of this
 * node receives from rank r. */
static uint64_t sent(const a2a *x, int r, int q)
{
    return x->sc ? x->sc[(size_t)r * (size_t)x->c->size + (size_t)q] : x->block;
}
static uint64_t received(const a2a *x, int q, int r)
{
    return x->rc ? x->rc[(size_t)q * (size_t)x->c->size + (size_t)r] : x->block;
}

/* Rank of local index i on node d. */
static int member(const pmc_comm *c, int d, int i) { return c->members[c->member_start[d] + i]; }

/* Bytes of local rank r's row in the message to node d. */
static uint64_t row_out(const a2a *x, int r, int d)
{
    if (!x->sc) return (uint64_t)x->c->node_count[d] * x->block;
    uint64_t b = 0;
    for (int i = 0; i < x->c->node_count[d]; ++i) b += sent(x, r, member(x->c, d, i));
    return b;
}

/* Bytes rank `r` (of another node) sends to this whole node. */
static uint64_t row_in(const a2a *x, int r)
{
    if (!x->rc) return (uint64_t)x->ls * x->block;
    uint64_t b = 0;
    for (int q = 0; q < x->ls; ++q) b += received(x, q, r);
    return b;
}

static uint64_t message_out(const a2a *x, int d)
{
    if (!x->sc) return (uint64_t)x->ls * (uint64_t)x->c->node_count[d] * x->block;
    uint64_t b = 0;
    for (int r = 0; r < x->ls; ++r) b += row_out(x, r, d);
    return b;
}

static uint64_t message_in(const a2a *x, int s)
{
    if (!x->rc) return (uint64_t)x->c->node_count[s] * (uint64_t)x->ls * x->block;
    uint64_t b = 0;
    for (int i = 0; i < x->c->node_count[s]; ++i) b += row_in(x, member(x->c, s, i));
    return b;
}

/* Whether the pair of nodes with ranks la and lb and `bytes` between them
 * (from one to the other) goes rank to rank. */
static int direct(const a2a *x, uint64_t bytes, int la, int lb)
{
    return bytes > 0 && bytes / ((uint64_t)la * (uint64_t)lb) >= x->direct_min;
}

/* What the lanes carry between this node and node d / node s. */
static uint64_t lane_out(const a2a *x, int d)
{
    const uint64_t b = message_out(x, d);
    return direct(x, b, x->ls, x->c->node_count[d]) ? 0 : b;
}
static uint64_t lane_in(const a2a *x, int s)
{
    const uint64_t b = message_in(x, s);
    return direct(x, b, x->c->node_count[s], x->ls) ? 0 : b;
}

static uint64_t chunks(uint64_t bytes, uint64_t C) { return (bytes + C - 1) / C; }

static int nphases(const a2a *x) { return (x->N - 1 + x->nl - 1) / x->nl; }

/* Distance lane k serves in phase P (0 if none). */
static int distance(const a2a *x, int P, int k)
{
    const int j = P * x->nl + k + 1;
    return j <= x->N - 1 ? j : 0;
}

/* Rounds of phase P on this node: chunks of its longest message. */
static uint64_t phase_rounds(const a2a *x, int P)
{
    uint64_t most = P == 0 ? chunks(message_out(x, x->m), x->C) : 0;
    for (int k = 0; k < x->nl; ++k) {
        const int j = distance(x, P, k);
        if (j == 0) break;
        const uint64_t o = chunks(lane_out(x, (x->m + j) % x->N), x->C);
        const uint64_t i = chunks(lane_in(x, (x->m - j + x->N) % x->N), x->C);
        if (o > most) most = o;
        if (i > most) most = i;
    }
    return most;
}

/* The next round with work after (P, t): phases without messages here are skipped. */
static void advance(const a2a *x, int *P, uint64_t *t)
{
    if (*t + 1 < phase_rounds(x, *P)) {
        ++*t;
        return;
    }
    *t = 0;
    for (++*P; *P < nphases(x) && phase_rounds(x, *P) == 0; ++*P) {
    }
}

/* Copies the part of [off, off+len) that falls in chunk t between the
 * caller's buffer at `user` and the slot. */
static void chunk_copy(const a2a *x, uint64_t t, uint64_t off, uint64_t len, unsigned char *slot, unsigned char *user,
                       int pack)
{
    const uint64_t lo0 = t * x->C, hi0 = lo0 + x->C;
    const uint64_t lo = off > lo0 ? off : lo0, hi = off + len < hi0 ? off + len : hi0;
    if (lo >= hi) return;
    if (pack) memcpy(slot + (lo - lo0), user + (lo - off), hi - lo);
    else memcpy(user + (lo - off), slot + (lo - lo0), hi - lo);
}

/* This rank's row of the message to node d, chunk t, into the slot. */
static void pack(const a2a *x, const unsigned char *send, const uint64_t *sdispls, int d, uint64_t t,
                 unsigned char *slot)
{
    const pmc_comm *c = x->c;
    const int me = c->node_ctx.local_rank;
    uint64_t off = 0;
    for (int r = 0; r < me; ++r) off += row_out(x, r, d);
    for (int i = 0; i < c->node_count[d] && off < (t + 1) * x->C; ++i) {
        const int q = member(c, d, i);
        const uint64_t len = sent(x, me, q);
        const uint64_t at = sdispls ? sdispls[q] : (uint64_t)q * x->block;
        chunk_copy(x, t, off, len, slot, (unsigned char *)(uintptr_t)(send + at), 1);
        off += len;
    }
}

/* This rank's column of the message from node s, chunk t, out of the slot. */
static void unpack(const a2a *x, unsigned char *recv, const uint64_t *rdispls, int s, uint64_t t,
                   const unsigned char *slot)
{
    const pmc_comm *c = x->c;
    const int me = c->node_ctx.local_rank;
    uint64_t off = 0;
    for (int i = 0; i < c->node_count[s] && off < (t + 1) * x->C; ++i) {
        const int r = member(c, s, i);
        uint64_t before = 0;
        for (int q = 0; q < me; ++q) before += received(x, q, r);
        const uint64_t len = received(x, me, r);
        const uint64_t at = rdispls ? rdispls[r] : (uint64_t)r * x->block;
        chunk_copy(x, t, off + before, len, (unsigned char *)(uintptr_t)slot, recv + at, 0);
        off += row_in(x, r);
    }
}

static unsigned char *send_slot(const a2a *x, int k) { return x->slots + (uint64_t)k * x->C; }
static unsigned char *recv_slot(const a2a *x, int k) { return x->slots + (uint64_t)(x->nl + k) * x->C; }
/* The node's own blocks alternate between two slots: a rank packs round
 * t+1 while others may still unpack round t. */
static unsigned char *own_slot(const a2a *x, uint64_t t) { return x->slots + (uint64_t)(2 * x->nl + (int)(t & 1u)) * x->C; }

/* Packs or unpacks this rank's share of every message of round (P, t). */
static void copy_round(const a2a *x, const pmc_args *a, const unsigned char *send, int P, uint64_t t, int packing)
{
    const int v = a->sendcounts != NULL;
    if (P == 0) {
        if (packing) pack(x, send, v ? a->sdispls : NULL, x->m, t, own_slot(x, t));
        else unpack(x, a->recvbuf, v ? a->rdispls : NULL, x->m, t, own_slot(x, t));
    }
    for (int k = 0; k < x->nl; ++k) {
        const int j = distance(x, P, k);
        if (j == 0) break;
        const int d = (x->m + j) % x->N, s = (x->m - j + x->N) % x->N;
        if (packing && lane_out(x, d) > 0) pack(x, send, v ? a->sdispls : NULL, d, t, send_slot(x, k));
        if (!packing && lane_in(x, s) > 0) unpack(x, a->recvbuf, v ? a->rdispls : NULL, s, t, recv_slot(x, k));
    }
}

/* Starts this lane's messages of round (P, t). */
static int lane_start(pmc_op *op, const a2a *x, int lane, int P, uint64_t t)
{
    const int j = distance(x, P, lane);
    if (j == 0) return PMC_OK;
    const int to = (x->m + j) % x->N, from = (x->m - j + x->N) % x->N;
    const uint64_t in = lane_in(x, from), out = lane_out(x, to);
    int rc = PMC_OK;
    if (t * x->C < in) {
        const uint64_t len = in - t * x->C < x->C ? in - t * x->C : x->C;
        rc = pmc_lane_recv(op, recv_slot(x, lane), len, from);
    }
    if (rc == PMC_OK && t * x->C < out) {
        const uint64_t len = out - t * x->C < x->C ? out - t * x->C : x->C;
        rc = pmc_lane_send(op, send_slot(x, lane), len, to);
    }
    return rc;
}

/* Starts this rank's own messages to and from the ranks of node pairs that go rank to rank. */
static int direct_start(pmc_op *op, const a2a *x, const unsigned char *send)
{
    const pmc_comm *c = x->c;
    const pmc_args *a = &op->a;
    const int me = c->node_ctx.local_rank, v = a->sendcounts != NULL;
    for (int j = 1; j < x->N; ++j) {
        const int d = (x->m + j) % x->N, s = (x->m - j + x->N) % x->N;
        if (direct(x, message_in(x, s), c->node_count[s], x->ls)) {
            for (int i = 0; i < c->node_count[s]; ++i) {
                const int r = member(c, s, i);
                const uint64_t len = received(x, me, r);
                int rc = len ? pmc_rank_recv(op, (unsigned char *)a->recvbuf + (v ? a->rdispls[r] : (uint64_t)r * x->block),
                                             len, r)
                             : PMC_OK;
                if (rc != PMC_OK) return rc;
            }
        }
        if (direct(x, message_out(x, d), x->ls, c->node_count[d])) {
            for (int i = 0; i < c->node_count[d]; ++i) {
                const int q = member(c, d, i);
                const uint64_t len = sent(x, me, q);
                int rc = len ? pmc_rank_send(op, send + (v ? a->sdispls[q] : (uint64_t)q * x->block), len, q) : PMC_OK;
                if (rc != PMC_OK) return rc;
            }
        }
    }
    return PMC_OK;
}

int pmc_alltoall_lanes_pairwise(pmc_op *op, pmc_frame *f, const void *send, int single_leader)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const pmc_args *a = &op->a;
    const int v = a->sendcounts != NULL, me = n->local_rank, shared = n->local_size > 1;
    a2a x = {.c = c, .nl = single_leader ? 1 : c->lanes, .N = c->nnodes, .m = c->node, .ls = n->local_size,
             .block = a->count, .direct_min = c->lanes_direct_min};
    x.C = chunk_bytes(c, x.nl, v);
    const int lane = me < x.nl ? me : -1;
    /* The lanes other than this rank, which every rank waits for after an exchange. */
    const int *lanes = single_leader ? f->peers : c->lane_others;
    const int nlanes = single_leader ? (me == 0 ? 0 : 1) : c->nlane_others;
    const uint64_t counts = counts_bytes(c, v);
    /* f->p: node buffer; f->j: phase; f->k: round in the phase; f->n: rounds done;
     * f->aux: first step of the rounds. */
    if (f->pc != 0) {
        unsigned char *buf = f->p;
        x.sc = v ? (const uint64_t *)(const void *)buf : NULL;
        x.rc = v ? x.sc + (size_t)x.ls * (size_t)c->size : NULL;
        x.slots = buf + counts;
    }
    PMC_CO_BEGIN(f);
    f->peers[0] = 0;
    {
        /* A node of one rank has no segment: its scratch holds the slots
         * (the chunk size stays the shared one). */
        int rc = pmc_node_buffer_claim(op, f, counts + (2u * (uint64_t)x.nl + 2u) * x.C);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
        unsigned char *buf = f->p;
        x.sc = v ? (const uint64_t *)(const void *)buf : NULL;
        x.rc = v ? x.sc + (size_t)x.ls * (size_t)c->size : NULL;
        x.slots = buf + counts;
    }
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, n->local_size - 1, f->base));
    f->aux = f->base;
    if (v) {
        uint64_t *mine = (uint64_t *)f->p;
        memcpy(mine + (size_t)me * (size_t)c->size, a->sendcounts, sizeof(uint64_t) * (size_t)c->size);
        memcpy(mine + (size_t)(x.ls + me) * (size_t)c->size, a->recvcounts, sizeof(uint64_t) * (size_t)c->size);
        f->aux = f->base + 1;
        if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->aux);
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, n->local_size - 1, f->aux));
    }
    {
        int rc = direct_start(op, &x, send);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    PMC_AWAIT(f, pmc_lane_wait(op));
    f->j = 0;
    f->k = 0;
    f->n = 0;
    if (phase_rounds(&x, 0) == 0) {
        int P = 0;
        uint64_t t = 0;
        advance(&x, &P, &t);
        f->j = P;
    }
    while (f->j < nphases(&x)) {
        copy_round(&x, a, send, f->j, f->k, 1);
        if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->aux + 1 + 2 * f->n);
        if (lane >= 0) {
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, n->local_size - 1, f->aux + 1 + 2 * f->n));
            {
                int rc = lane_start(op, &x, lane, f->j, f->k);
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
            PMC_AWAIT(f, pmc_lane_wait(op));
            if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->aux + 2 + 2 * f->n);
        }
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, lanes, nlanes, f->aux + 2 + 2 * f->n));
        copy_round(&x, a, send, f->j, f->k, 0);
        ++f->n;
        {
            int P = f->j;
            uint64_t t = f->k;
            advance(&x, &P, &t);
            f->j = P;
            f->k = t;
        }
    }
    n->step = f->aux + 2 * f->n;
    if (shared) pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}
