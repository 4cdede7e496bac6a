/* Allreduce across nodes for small vectors (PiP-MColl's small-message
 * algorithm): the node's ranks copy their inputs into the node buffer and
 * reduce them slice by slice in parallel into the node's partial; then a
 * recursive exchange runs over nodes with radix up to L+1. In a round the
 * q nodes of a group (q <= L+1) swap partials, lane k sending to the
 * (k+1)-th next member, and the lanes combine the q partials in group order,
 * one slice each, into the next round's partial: every member computes the
 * same bits. A node count that is not b * (L+1)^a with b <= L+1 folds
 * first: node M+j hands its partial to node j and gets the result back.
 *
 * Node buffer, in slots of the vector's size rounded to 64 bytes:
 * [max_local inputs | own partial, folded partial | 2 x (L+1) round slots]. */
#include <string.h>

#include "../reduce/reduce_ops.h"
#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

typedef struct plan {
    int M;       /* nodes in the exchange (the rest fold into them) */
    int b;       /* radix of the first round (1: none) */
    int rounds;  /* rounds of the exchange */
} plan;

static plan plan_of(int N, int R)
{
    plan p = {1, 1, 0};
    long pw = 1;
    int a = 0;
    while (pw * R <= N) {
        pw *= R;
        ++a;
    }
    p.b = (int)(N / pw);
    p.M = (int)pw * p.b;
    p.rounds = a + (p.b > 1);
    return p;
}

/* Radix, stride and this node's digit in round r (digit 0 past the last
 * round: the result's slot). */
static void round_of(const plan *p, int R, int r, int node, int *q, long *stride, int *digit)
{
    *q = p->b > 1 && r == 0 ? p->b : R;
    long s = 1;
    for (int i = 0; i < r; ++i) s *= i == 0 && p->b > 1 ? p->b : R;
    *stride = s;
    *digit = r < p->rounds ? (int)((node / s) % *q) : 0;
}

static uint64_t slot_bytes(uint64_t bytes) { return (bytes + 63) & ~(uint64_t)63; }

int pmc_allreduce_lanes_fits(const pmc_comm *c, uint64_t bytes)
{
    return bytes <= c->lanes_small_max &&
           ((uint64_t)c->max_local + 2u + 2u * ((uint64_t)c->lanes + 1u)) * slot_bytes(bytes) <= c->data_bytes;
}

/* Combines slots first .. first+q-1 (in order) into dst, elements [lo, hi). */
static void combine(unsigned char *buf, uint64_t vp, int first, int q, unsigned char *dst, uint64_t lo, uint64_t hi,
                    int dtype, int rop)
{
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    if (hi <= lo) return;
    memcpy(dst + lo * esize, buf + (uint64_t)first * vp + lo * esize, (hi - lo) * esize);
    for (int i = 1; i < q; ++i)
        pmc_reduce_into(dst + lo * esize, buf + (uint64_t)(first + i) * vp + lo * esize, hi - lo, dtype, rop);
}

void pmc_allreduce_lanes_exchange_order(const pmc_comm *c, unsigned char *partials, uint64_t count, int dtype,
                                        int rop)
{
    const int N = c->nnodes, R = c->lanes + 1;
    const uint64_t bytes = count * (uint64_t)pmc_dtype_size(dtype);
    const plan p = plan_of(N, R);
    /* Node M+j folds into node j: own partial first. */
    for (int j = 0; j + p.M < N; ++j)
        pmc_reduce_into(partials + (uint64_t)j * bytes, partials + (uint64_t)(j + p.M) * bytes, count, dtype, rop);
    for (int r = 0; r < p.rounds; ++r) {
        int q, digit;
        long stride;
        round_of(&p, R, r, 0, &q, &stride, &digit);
        /* Each group (the nodes whose digits differ only in this round's)
         * combines its members' partials in digit order; every member
         * then holds the sum, kept in the group's first member. */
        for (long first = 0; first < p.M; ++first) {
            if ((first / stride) % q != 0) continue;
            unsigned char *acc = partials + (uint64_t)first * bytes;
            for (int d = 1; d < q; ++d)
                pmc_reduce_into(acc, partials + (uint64_t)(first + (long)d * stride) * bytes, count, dtype, rop);
            for (int d = 1; d < q; ++d) memcpy(partials + (uint64_t)(first + (long)d * stride) * bytes, acc, bytes);
        }
    }
}

/* Starts lane `lane`'s messages of round r: its node's partial to the
 * (lane+1)-th next member of the group, the (lane+1)-th previous member's
 * partial into that member's slot. */
static int round_start(pmc_op *op, const plan *p, int R, int r, int lane, unsigned char *slots, uint64_t vp,
                       uint64_t bytes)
{
    const int node = op->c->node;
    int q, d;
    long s;
    round_of(p, R, r, node, &q, &s, &d);
    if (lane + 1 >= q) return PMC_OK;
    const long group = node - (long)d * s;
    const int fd = (d - lane - 1 + q) % q;
    int rc = pmc_lane_recv(op, slots + (uint64_t)fd * vp, bytes, (int)(group + (long)fd * s));
    return rc == PMC_OK ? pmc_lane_send(op, slots + (uint64_t)d * vp, bytes, (int)(group + (long)((d + lane + 1) % q) * s))
                        : rc;
}

int pmc_allreduce_lanes_exchange(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype,
                                 int rop)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int N = c->nnodes, R = c->lanes + 1, me = n->local_rank, lane = pmc_lane_of(c);
    const int shared = n->local_size > 1;
    const uint64_t bytes = count * (uint64_t)pmc_dtype_size(dtype), vp = slot_bytes(bytes);
    const plan p = plan_of(N, R);
    const int main_node = c->node < p.M, extra = c->node + p.M < N ? c->node + p.M : -1;
    const int folds = !main_node || extra >= 0;
    const int IN = 0, F = c->max_local, X = c->max_local + 2;
    /* This lane's slice of the vector, reduced by it in every round. */
    const uint64_t lo = lane >= 0 ? count * (uint64_t)lane / (uint64_t)c->lanes : 0;
    const uint64_t hi = lane >= 0 ? count * (uint64_t)(lane + 1) / (uint64_t)c->lanes : 0;
    /* Slot of round r's partial of digit d (r = rounds: the result). */
#define XSLOT(r, d) (X + ((r) % 2) * R + (d))
    unsigned char *buf = f->p;
    int q, digit;
    long stride;
    /* f->aux: last step posted; f->j: round; f->n: steps in all (for ranks past the lanes). */
    PMC_CO_BEGIN(f);
    {
        int rc = pmc_node_buffer_claim(op, f, (uint64_t)(X + 2 * R) * vp);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    buf = f->p;
    f->n = 2u + (main_node ? 2u * (uint64_t)p.rounds + (extra >= 0 ? 2u : 0u) : 1u);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, n->local_size - 1, f->base));
    memcpy(buf + (uint64_t)(IN + me) * vp, send, bytes);
    if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 1);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, n->local_size - 1, f->base + 1));
    /* The node's partial: in F when it folds (either side), else round 0's slot. */
    round_of(&p, R, 0, c->node, &q, &stride, &digit);
    combine(buf, vp, IN, n->local_size, buf + (uint64_t)(folds ? F : XSLOT(0, digit)) * vp,
            count * (uint64_t)me / (uint64_t)n->local_size, count * (uint64_t)(me + 1) / (uint64_t)n->local_size,
            dtype, rop);
    if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 2);
    f->aux = f->base + 2;
    if (lane < 0) {
        /* Ranks past the lanes helped with the node's partial; they wait for the result. */
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, c->lane_others, c->nlane_others, f->base + f->n));
    } else {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, n->local_size - 1, f->base + 2));
        if (folds) {
            /* Node M+j hands its partial to node j and gets the result back. */
            if (lane == 0) {
                int rc = main_node ? pmc_lane_recv(op, buf + (uint64_t)(F + 1) * vp, bytes, extra)
                                   : pmc_lane_send(op, buf + (uint64_t)F * vp, bytes, c->node - p.M);
                if (rc == PMC_OK && !main_node)
                    rc = pmc_lane_recv(op, buf + (uint64_t)XSLOT(0, 0) * vp, bytes, c->node - p.M);
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
            PMC_AWAIT(f, pmc_lane_wait(op));
            PMC_AWAIT(f, pmc_lane_barrier(op, f->aux = f->base + 3));
            if (main_node) {
                round_of(&p, R, 0, c->node, &q, &stride, &digit);
                combine(buf, vp, F, 2, buf + (uint64_t)XSLOT(0, digit) * vp, lo, hi, dtype, rop);
                PMC_AWAIT(f, pmc_lane_barrier(op, f->aux = f->base + 4));
            }
        }
        for (f->j = 0; main_node && f->j < p.rounds; ++f->j) {
            {
                int rc = round_start(op, &p, R, f->j, lane, buf + (uint64_t)XSLOT(f->j, 0) * vp, vp, bytes);
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
            PMC_AWAIT(f, pmc_lane_wait(op));
            PMC_AWAIT(f, pmc_lane_barrier(op, f->aux = f->base + 3 + (extra >= 0 ? 2u : 0u) + 2u * (uint64_t)f->j));
            round_of(&p, R, f->j, c->node, &q, &stride, &digit);
            {
                int qn, dnext;
                long sn;
                round_of(&p, R, f->j + 1, c->node, &qn, &sn, &dnext);
                combine(buf, vp, XSLOT(f->j, 0), q, buf + (uint64_t)XSLOT(f->j + 1, dnext) * vp, lo, hi, dtype, rop);
            }
            PMC_AWAIT(f, pmc_lane_barrier(op, f->aux = f->base + 4 + (extra >= 0 ? 2u : 0u) + 2u * (uint64_t)f->j));
        }
        if (main_node && extra >= 0 && lane == 0) {
            int rc = pmc_lane_send(op, buf + (uint64_t)XSLOT(p.rounds, 0) * vp, bytes, extra);
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
    }
    memcpy(recv, buf + (uint64_t)(main_node ? XSLOT(p.rounds, 0) : XSLOT(0, 0)) * vp, bytes);
    PMC_AWAIT(f, pmc_lane_wait(op));
    n->step = f->base + f->n;
    if (shared) pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
#undef XSLOT
}
