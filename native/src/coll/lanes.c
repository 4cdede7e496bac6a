/* Lane messages, the node buffer and the node-wide share of lane parts. */
#include <stdlib.h>
#include <string.h>

#include "lanes.h"
#include "../node/heap.h"
#include "node_algos.h"

/* Lane messages of one op share a tag: ops run one at a time and in the same
 * order on every rank, and MPI keeps messages between a pair in order. */
#define LANE_TAG 7311

static MPI_Request *next_request(pmc_comm *c)
{
    if (c->nlreq == c->lreq_cap) {
        const int cap = c->lreq_cap ? 2 * c->lreq_cap : 16;
        MPI_Request *r = realloc(c->lreq, sizeof(MPI_Request) * (size_t)cap);
        if (r == NULL) return NULL;
        c->lreq = r;
        void **k = realloc(c->lreq_recv, sizeof(void *) * (size_t)cap);
        if (k == NULL) return NULL;
        c->lreq_recv = k;
        c->lreq_cap = cap;
    }
    return &c->lreq[c->nlreq];
}

static int start(pmc_op *op, void *buf, uint64_t bytes, int peer, int sending, MPI_Comm comm)
{
    pmc_comm *c = op->c;
    pmc_mpi_count n;
    int rc = pmc_mpi_count_of(c, bytes, &n);
    if (rc != PMC_OK) return rc;
    MPI_Request *req = next_request(c);
    if (req == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory for lane requests", c->node_ctx.coll);
    int mrc;
#if MPI_VERSION >= 4
    mrc = sending ? MPI_Isend_c(buf, n, MPI_BYTE, peer, LANE_TAG, comm, req)
                  : MPI_Irecv_c(buf, n, MPI_BYTE, peer, LANE_TAG, comm, req);
#else
    mrc = sending ? MPI_Isend(buf, n, MPI_BYTE, peer, LANE_TAG, comm, req)
                  : MPI_Irecv(buf, n, MPI_BYTE, peer, LANE_TAG, comm, req);
#endif
    if (mrc != MPI_SUCCESS) return pmc_mpi_fail(c, mrc, sending ? "MPI_Isend (lane)" : "MPI_Irecv (lane)");
    c->lreq_recv[c->nlreq++] = sending ? NULL : buf;
    if (sending) {
        ++c->lane_msgs;
        c->lane_bytes += bytes;
    }
    return PMC_OK;
}

int pmc_lane_send(pmc_op *op, const void *buf, uint64_t bytes, int node)
{
    return start(op, (void *)(uintptr_t)buf, bytes, node, 1, op->c->lanecomm);
}

int pmc_lane_recv(pmc_op *op, void *buf, uint64_t bytes, int node)
{
    return start(op, buf, bytes, node, 0, op->c->lanecomm);
}

int pmc_rank_send(pmc_op *op, const void *buf, uint64_t bytes, int rank)
{
    return start(op, (void *)(uintptr_t)buf, bytes, rank, 1, op->c->comm);
}

int pmc_rank_recv(pmc_op *op, void *buf, uint64_t bytes, int rank)
{
    return start(op, buf, bytes, rank, 0, op->c->comm);
}

int pmc_lane_wait(pmc_op *op)
{
    pmc_comm *c = op->c;
    if (c->nlreq == 0) return PMC_OK;
    int rc = pmc_op_mpi_all(op, c->nlreq, c->lreq, "MPI_Testall (lane messages)");
    if (rc == PMC_OK) c->nlreq = 0;
    return rc;
}

static int inside(const void *p, const void *base, size_t bytes)
{
    const unsigned char *q = p, *b = base;
    return b != NULL && q >= b && q < b + bytes;
}

/* Memory of this communicator that pmc_comm_free can keep: scratch and the
 * segment outside the shared heap (whose blocks belong to the caller). */
static int kept_at_free(const pmc_comm *c, const void *p)
{
    if (inside(p, c->scratch, c->scratch_bytes) || inside(p, c->outer, c->outer_bytes) ||
        inside(p, c->lane_scratch, c->lane_scratch_bytes))
        return 1;
    return inside(p, c->node_ctx.seg.base, c->node_ctx.seg.bytes) && pmc_heap_offset(c->heap, p, 1) < 0;
}

void pmc_lanes_abandon(pmc_comm *c)
{
    for (int i = 0; i < c->nlreq; ++i) {
        if (c->lreq[i] == MPI_REQUEST_NULL) continue;
        void *into = c->lreq_recv[i];
        if (into != NULL && !kept_at_free(c, into)) {
            /* A receive into the caller's buffer is cancelled (local and
             * reliable): no late message lands there after the error. */
            if (MPI_Cancel(&c->lreq[i]) == MPI_SUCCESS) MPI_Wait(&c->lreq[i], MPI_STATUS_IGNORE);
        } else {
            /* Sends (cancelling one needs the receiver; Open MPI hung in it)
             * and receives into our own memory are released instead: a late
             * peer's messages still match (a message left unmatched on a
             * freed communicator upset Open MPI's next communicator
             * creation), and the memory stays until the process ends. */
            MPI_Request_free(&c->lreq[i]);
            ++c->left_in_flight;
        }
    }
    c->nlreq = 0;
}

int pmc_lane_barrier(pmc_op *op, uint64_t s)
{
    pmc_comm *c = op->c;
    /* Posted again on every resume, which is harmless: the flag only grows. */
    if (c->node_ctx.local_size > 1) pmc_node_post(&c->node_ctx, PMC_FLAG_SEQ, s);
    return pmc_op_wait(op, PMC_FLAG_SEQ, c->lane_others, c->nlane_others, s);
}

unsigned char *pmc_node_buffer(pmc_comm *c, uint64_t bytes)
{
    if (c->node_ctx.local_size > 1) return c->node_ctx.seg.data;
    return pmc_scratch(c, (size_t)(bytes > 0 ? bytes : 1));
}

int pmc_node_buffer_claim(pmc_op *op, pmc_frame *f, uint64_t bytes)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    f->p = pmc_node_buffer(c, bytes);
    if (f->p == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory for the node buffer", n->coll);
    f->base = n->step;
    pmc_node_use_layout(n, PMC_LAYOUT_NODEBUF, f->base);
    return PMC_OK;
}

int pmc_node_ring_claim(pmc_op *op, pmc_frame *f, uint64_t bytes, uint64_t steps)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const uint64_t slots = pmc_ring_cells(n);
    const uint64_t slot = (c->data_bytes / slots) & ~(uint64_t)63;
    if (n->local_size == 1 || bytes > slot) {
        int rc = pmc_node_buffer_claim(op, f, bytes);
        f->aux = f->base;
        return rc;
    }
    f->base = n->step;
    pmc_node_use_layout(n, PMC_LAYOUT_NODERING, f->base);
    /* Every local rank makes the same calls in the same order, so each
     * counts the slots alike; a slot is free once every rank acknowledged
     * its last call there (or everything before the layout began). */
    const uint64_t k = n->ring_next++ % slots;
    f->aux = n->cell_last[k];
    n->cell_last[k] = f->base + steps;
    f->p = n->seg.data + k * slot;
    return PMC_OK;
}

int pmc_lane_share(pmc_op *op, pmc_frame *f, void *buf)
{
    pmc_comm *c = op->c;
    const int me = c->node_ctx.local_rank;
    uint64_t largest = 0;
    for (int j = 0; j < c->node_ctx.local_size; ++j)
        if (c->lcounts[j] > largest) largest = c->lcounts[j];
    const unsigned char *mine = (const unsigned char *)buf + c->ldispls[me];
    if (pmc_single_copy(c, PMC_COLL_ALLGATHER, largest)) return pmc_gather_node_cma(op, f, mine, buf, 0, c->lcounts, c->ldispls, -1);
    return pmc_gather_node_cico(op, f, mine, buf, 0, c->lcounts, c->ldispls, -1, 1);
}

void pmc_nodes_reorder(const pmc_comm *c, unsigned char *nodebuf, unsigned char *ranks, uint64_t block, int first,
                       int to_ranks)
{
    uint64_t off = 0;
    for (int j = 0; j < c->nnodes; ++j) {
        const int m = (first + j) % c->nnodes;
        const uint64_t bytes = (uint64_t)c->node_count[m] * block;
        for (int i = 0; i < (c->consecutive ? 1 : c->node_count[m]); ++i) {
            /* Consecutive nodes move whole; others rank by rank. */
            const int r = c->consecutive ? c->node_first[m] : c->members[c->member_start[m] + i];
            const uint64_t len = c->consecutive ? bytes : block;
            unsigned char *nb = nodebuf + off + (uint64_t)i * block, *rk = ranks + (uint64_t)r * block;
            if (to_ranks) memcpy(rk, nb, len);
            else memcpy(nb, rk, len);
        }
        off += bytes;
    }
}
