/* The ring allreduce between FTAR members: reduce-scatter then allgather,
 * chunked, pipelined, over `streams` connections per direction, driven by
 * one poll() loop.
 *
 * Schedule. The count elements form n segments (the first count % n get one
 * element more). Global steps g = 0 .. 2n-3: the n-1 reduce-scatter (RS)
 * steps r = g, where member i sends segment (i-r) mod n and receives and
 * reduces segment (i-r-1) mod n; then the n-1 allgather (AG) steps
 * r = g-(n-1), where it sends segment (i+1-r) mod n and stores the received
 * segment (i-r) mod n. After RS member i holds segment (i+1) mod n complete.
 * The segment sent at step g+1 is the one received at step g, so the chunks
 * pipeline: a chunk goes on as soon as it has arrived (and been reduced).
 *
 * Items. Every frame carries one item. A data item is a chunk of a segment:
 * at most chunk_bytes / (accumulator element size) elements, the same
 * element split in RS and AG, so that send chunk j of step g+1 is exactly
 * receive chunk j of step g (for the 16-bit types an AG frame is half as
 * long as an RS frame). Each RS step starts with a count item: an 8-byte
 * little-endian payload, the number of contributing members folded into the
 * segment sent at that step (step 0: this member's own 0 or 1; later: the
 * count received at the step before plus its own). The count item of step
 * g+1 waits for the count item received at step g, exactly like a chunk, so
 * counts travel the same path as the data they describe, and a segment with
 * no elements still carries its count; after the last RS step every member
 * knows the same total. Send items and receive items are two lists, built
 * once per call in step order; each send item names the receive item that
 * releases it.
 *
 * Streams. Item k of a list travels on stream k % streams. The left
 * neighbour's send list is this member's receive list (same segments, same
 * split), so both sides agree on each stream's item sequence without saying
 * so on the wire; each stream is in order, items of different streams
 * complete in any order (hence a flag per received item).
 *
 * Wire. One DATA frame per item: the 40-byte header (sender = index, epoch,
 * step = the operation number, seq = the stream's own counter, length = the
 * item's exact bytes, MAC flag iff integrity), the payload written straight
 * from (read straight into) its place in the user's or accumulator's memory,
 * and with integrity an HMAC-SHA256 over header and payload with the
 * stream's key. The MAC is computed piecewise over the bytes just moved,
 * while they are still in cache.
 *
 * Accumulation. For the 32/64-bit types the accumulator is out itself: RS
 * data lands in out and is reduced there with this member's in (in is never
 * written; step 0 sends straight from in). For the 16-bit types the RS wire
 * and the accumulator are float32 (scratch), and the owned segment is
 * narrowed into out before the AG, which moves 16-bit elements of out. The
 * AG copies the owner's bits, so every member ends with the same bits.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "ring.h"
#include "sha256.h"

#define NONE SIZE_MAX
#define COUNT_BYTES 8
/* Bytes one stream moves per turn before the others get theirs: a fast left
 * neighbour must not keep this member from forwarding what it has. */
#define TURN_BYTES ((size_t)1 << 20)

enum { ITEM_COUNT = 0, ITEM_DATA = 1 };

typedef struct ring_item {
    size_t off;         /* data: first element; received count item: the count */
    size_t dep;         /* send item: the receive item that releases it (NONE: free) */
    uint32_t nelem;     /* data: elements (>= 1) */
    uint32_t step;      /* global step g */
    uint8_t kind;
    uint8_t done;       /* receive item: arrived, checked, reduced */
} ring_item;

/* One stream in one direction, and the frame in progress on it. */
typedef struct ring_io {
    pmc_ring_stream *st;
    size_t next;        /* the item in progress, or the next one */
    size_t done;        /* bytes of the frame moved */
    size_t total;       /* bytes of the frame */
    size_t hashed;      /* payload bytes in the MAC so far */
    uint8_t *payload;
    uint32_t plen;
    int active;         /* a frame of item `next` is in progress */
    int blocked;        /* EAGAIN seen: wait for poll */
    int ready;          /* send: MAC computed; receive: header checked */
    int slot;           /* its pollfd this turn (-1: none) */
    uint8_t hdr[PMC_FTAR_HEADER_BYTES];
    uint8_t mac[PMC_FTAR_MAC_BYTES];
    uint8_t count[COUNT_BYTES];
    pmc_hmac keyed;     /* state after the key, copied per frame */
    pmc_hmac mac_state;
} ring_io;

typedef struct ring {
    const pmc_ring_args *a;
    int dtype, op, half, contribute;
    size_t esz, asz;    /* element bytes in in/out, and in the accumulator (RS wire) */
    const uint8_t *in;
    uint8_t *out, *acc;
    uint32_t left, rs_steps;
    ring_item *sitems, *ritems;
    size_t nsend, nrecv, send_left, recv_left;
    ring_io *tx, *rx;
    struct pollfd *pfd;
    uint64_t own, total;
    int fault_rs, fault_ag;
} ring;

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
    return v;
}

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

/* (i + delta) mod n for |delta| < 2n. */
static uint32_t wrap(uint32_t n, uint32_t i, int64_t delta)
{
    int64_t v = ((int64_t)i + delta) % (int64_t)n;
    return (uint32_t)(v < 0 ? v + n : v);
}

static void segment(size_t count, uint32_t n, uint32_t s, size_t *off, size_t *len)
{
    const size_t base = count / n, rem = count % n;
    *off = s * base + (s < rem ? s : rem);
    *len = base + (s < rem);
}

static uint32_t send_seg(uint32_t n, uint32_t i, uint32_t g)
{
    return g < n - 1 ? wrap(n, i, -(int64_t)g) : wrap(n, i, 1 - (int64_t)(g - (n - 1)));
}

static uint32_t recv_seg(uint32_t n, uint32_t i, uint32_t g)
{
    return g < n - 1 ? wrap(n, i, -(int64_t)g - 1) : wrap(n, i, -(int64_t)(g - (n - 1)));
}

static size_t chunks(size_t len, size_t ce) { return (len + ce - 1) / ce; }

/* Items of both lists; the send list's dependencies point into the receive list. */
static void build_items(ring *r, size_t count, size_t ce)
{
    const uint32_t n = r->a->n, i = r->a->index, steps = 2 * n - 2;
    size_t ks = 0, kr = 0, prev_rstart = NONE;
    for (uint32_t g = 0; g < steps; ++g) {
        const int rs = g < r->rs_steps;
        /* Sends: count item, then chunk j, each released by its twin
         * received at step g-1 (whose list had a count item iff RS). */
        if (rs) r->sitems[ks++] = (ring_item){.dep = prev_rstart, .step = g, .kind = ITEM_COUNT};
        const size_t data_dep = g == 0 ? NONE : prev_rstart + (g - 1 < r->rs_steps);
        size_t off, len;
        segment(count, n, send_seg(n, i, g), &off, &len);
        for (size_t j = 0, nc = chunks(len, ce); j < nc; ++j) {
            const size_t o = j * ce;
            r->sitems[ks++] = (ring_item){.off = off + o, .dep = g == 0 ? NONE : data_dep + j,
                                          .nelem = (uint32_t)(len - o < ce ? len - o : ce), .step = g,
                                          .kind = ITEM_DATA};
        }
        prev_rstart = kr;
        if (rs) r->ritems[kr++] = (ring_item){.dep = NONE, .step = g, .kind = ITEM_COUNT};
        segment(count, n, recv_seg(n, i, g), &off, &len);
        for (size_t j = 0, nc = chunks(len, ce); j < nc; ++j) {
            const size_t o = j * ce;
            r->ritems[kr++] = (ring_item){.off = off + o, .dep = NONE,
                                          .nelem = (uint32_t)(len - o < ce ? len - o : ce), .step = g,
                                          .kind = ITEM_DATA};
        }
    }
}

/* The frame's pieces from byte `done` on: header, payload, MAC (if `mac`). */
static int frame_iov(const ring_io *x, struct iovec *iov, int mac)
{
    uint8_t *const base[3] = {(uint8_t *)x->hdr, x->payload, (uint8_t *)x->mac};
    const size_t len[3] = {PMC_FTAR_HEADER_BYTES, x->plen, mac ? PMC_FTAR_MAC_BYTES : 0};
    size_t pos = x->done;
    int n = 0;
    for (int k = 0; k < 3; ++k) {
        if (pos >= len[k]) {
            pos -= len[k];
            continue;
        }
        iov[n].iov_base = base[k] + pos;
        iov[n].iov_len = len[k] - pos;
        ++n;
        pos = 0;
    }
    return n;
}

/* Adds the payload bytes moved since the last call to the MAC. */
static void hash_progress(ring_io *x)
{
    if (x->done <= PMC_FTAR_HEADER_BYTES) return;
    size_t upto = x->done - PMC_FTAR_HEADER_BYTES;
    if (upto > x->plen) upto = x->plen;
    if (upto > x->hashed) {
        pmc_hmac_update(&x->mac_state, x->payload + x->hashed, upto - x->hashed);
        x->hashed = upto;
    }
}

static int send_ready(const ring *r, const ring_io *t)
{
    if (t->active) return 1;
    const size_t dep = r->sitems[t->next].dep;
    return dep == NONE || r->ritems[dep].done;
}

static void send_start(ring *r, ring_io *t, const ring_item *it)
{
    const pmc_ring_args *a = r->a;
    if (it->kind == ITEM_COUNT) {
        put64(t->count, (it->dep == NONE ? 0 : r->ritems[it->dep].off) + r->own);
        t->payload = t->count;
        t->plen = COUNT_BYTES;
    } else if (it->step < r->rs_steps) {
        /* Step 0 of a contributing 32/64-bit member sends its input as it is
         * (only read: the cast is for the iovec). */
        const uint8_t *base = it->step == 0 && !r->half && r->contribute ? r->in : r->acc;
        t->payload = (uint8_t *)(base + it->off * r->asz);
        t->plen = (uint32_t)(it->nelem * r->asz);
    } else {
        t->payload = r->out + it->off * r->esz;
        t->plen = (uint32_t)(it->nelem * r->esz);
    }
    const pmc_ftar_header h = {.type = PMC_FTAR_DATA,
                               .flags = a->integrity ? PMC_FTAR_FLAG_MAC : 0,
                               .length = t->plen,
                               .sender = a->index,
                               .epoch = a->epoch,
                               .step = a->op,
                               .seq = t->st->seq};
    pmc_ftar_header_encode(&h, t->hdr);
    t->total = pmc_ftar_frame_size(t->plen, a->integrity);
    t->done = t->hashed = 0;
    t->ready = 0;
    t->active = 1;
    if (a->integrity) {
        t->mac_state = t->keyed;
        pmc_hmac_update(&t->mac_state, t->hdr, PMC_FTAR_HEADER_BYTES);
    }
}

static int pump_send(ring *r, ring_io *t)
{
    const pmc_ring_args *a = r->a;
    size_t moved = 0;
    while (t->next < r->nsend && moved < TURN_BYTES) {
        if (!t->active) {
            if (!send_ready(r, t)) return PMC_RING_OK;
            send_start(r, t, &r->sitems[t->next]);
        }
        if (a->integrity && !t->ready && t->done == PMC_FTAR_HEADER_BYTES + (size_t)t->plen) {
            pmc_hmac_final(&t->mac_state, t->mac);
            t->ready = 1;
        }
        struct iovec iov[3];
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)frame_iov(t, iov, a->integrity && t->ready)};
        const ssize_t w = sendmsg(t->st->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                t->blocked = 1;
                return PMC_RING_OK;
            }
            return PMC_RING_PEER_LOST;
        }
        t->done += (size_t)w;
        moved += (size_t)w;
        if (a->integrity) hash_progress(t);
        if (t->done == t->total) {
            ++t->st->seq;
            t->active = 0;
            t->next += a->streams;
            --r->send_left;
        }
    }
    return PMC_RING_OK;
}

static void recv_start(ring *r, ring_io *x, const ring_item *it)
{
    if (it->kind == ITEM_COUNT) {
        x->payload = x->count;
        x->plen = COUNT_BYTES;
    } else if (it->step < r->rs_steps) {
        x->payload = r->acc + it->off * r->asz;
        x->plen = (uint32_t)(it->nelem * r->asz);
    } else {
        x->payload = r->out + it->off * r->esz;
        x->plen = (uint32_t)(it->nelem * r->esz);
    }
    x->total = pmc_ftar_frame_size(x->plen, r->a->integrity);
    x->done = x->hashed = 0;
    x->ready = 0;
    x->active = 1;
}

static int check_header(ring *r, ring_io *x)
{
    const pmc_ring_args *a = r->a;
    pmc_ftar_header h;
    size_t need;
    /* Magic, version, type and flag bits, length bound; the MAC itself is
     * checked here once the payload is in. */
    const int rc = pmc_ftar_frame_decode(x->hdr, PMC_FTAR_HEADER_BYTES, x->plen, NULL, 0, a->integrity, &h, &need);
    if (rc != PMC_FTAR_OK && rc != PMC_FTAR_NEED_MORE) return PMC_RING_BAD_FRAME;
    if (h.type != PMC_FTAR_DATA || h.sender != r->left || h.epoch != a->epoch || h.step != a->op ||
        h.seq != x->st->seq || h.length != x->plen || ((h.flags & PMC_FTAR_FLAG_MAC) != 0) != (a->integrity != 0))
        return PMC_RING_BAD_FRAME;
    x->ready = 1;
    if (a->integrity) {
        x->mac_state = x->keyed;
        pmc_hmac_update(&x->mac_state, x->hdr, PMC_FTAR_HEADER_BYTES);
    }
    return PMC_RING_OK;
}

static int recv_finish(ring *r, ring_io *x, ring_item *it)
{
    const pmc_ring_args *a = r->a;
    if (a->integrity) {
        uint8_t want[PMC_FTAR_MAC_BYTES];
        pmc_hmac_final(&x->mac_state, want);
        if (!pmc_equal_ct(want, x->mac, PMC_FTAR_MAC_BYTES)) return PMC_RING_BAD_FRAME;
    }
    ++x->st->seq;
    const int rs = it->step < r->rs_steps;
    if (it->kind == ITEM_COUNT) {
        /* g+1 members fed the segment received at step g: no more. */
        const uint64_t v = get64(x->count);
        if (v > (uint64_t)it->step + 1) return PMC_RING_BAD_FRAME;
        it->off = (size_t)v;
        if (it->step == r->rs_steps - 1) r->total = v + r->own;
    } else if (rs) {
        uint8_t *acc = r->acc + it->off * r->asz;
        pmc_ftar_reduce_own(acc, r->contribute ? r->in + it->off * r->esz : NULL, it->nelem, r->dtype, r->op);
        /* The owned segment is final: narrow it for the allgather. */
        if (r->half && it->step == r->rs_steps - 1)
            pmc_ftar_narrow(r->out + it->off * r->esz, (const float *)(const void *)acc, it->nelem, r->dtype);
    }
    it->done = 1;
    --r->recv_left;
    x->active = 0;
    x->next += a->streams;
    /* Each point once, at the first item received in its phase (a member
     * whose AG segments are all empty, count < n, has no AG point). The
     * callback may close the sockets: the next call on them fails. */
    if (a->fault != NULL) {
        if (rs && !r->fault_rs) {
            r->fault_rs = 1;
            a->fault(a->fault_arg, PMC_RING_AT_REDUCE_SCATTER);
        } else if (!rs && !r->fault_ag) {
            r->fault_ag = 1;
            a->fault(a->fault_arg, PMC_RING_AT_ALLGATHER);
        }
    }
    return PMC_RING_OK;
}

static int pump_recv(ring *r, ring_io *x)
{
    const pmc_ring_args *a = r->a;
    size_t moved = 0;
    while (x->next < r->nrecv && moved < TURN_BYTES) {
        ring_item *it = &r->ritems[x->next];
        if (!x->active) recv_start(r, x, it);
        /* The whole expected frame in one call: never more than this frame,
         * so the next frame's bytes stay in the socket. */
        struct iovec iov[3];
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)frame_iov(x, iov, a->integrity)};
        const ssize_t got = recvmsg(x->st->fd, &mh, MSG_DONTWAIT);
        if (got == 0) return PMC_RING_PEER_LOST;
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                x->blocked = 1;
                return PMC_RING_OK;
            }
            return PMC_RING_PEER_LOST;
        }
        x->done += (size_t)got;
        moved += (size_t)got;
        if (!x->ready) {
            if (x->done < PMC_FTAR_HEADER_BYTES) continue;
            const int rc = check_header(r, x);
            if (rc != PMC_RING_OK) return rc;
        }
        if (a->integrity) hash_progress(x);
        if (x->done == x->total) {
            const int rc = recv_finish(r, x, it);
            if (rc != PMC_RING_OK) return rc;
        }
    }
    return PMC_RING_OK;
}

static int run(ring *r)
{
    const pmc_ring_args *a = r->a;
    struct pollfd *pfd = r->pfd;
    for (;;) {
        if (r->send_left == 0 && r->recv_left == 0) return PMC_RING_OK;
        int timeout = -1;
        if (a->deadline_ms > 0) {
            const int64_t left = a->deadline_ms - pmc_ftar_now_ms();
            if (left <= 0) return PMC_RING_TIMEOUT;
            timeout = left > INT_MAX ? INT_MAX : (int)left;
        }
        nfds_t np = 0;
        int busy = 0;
        if (a->abort_fd >= 0) pfd[np++] = (struct pollfd){.fd = a->abort_fd, .events = POLLIN};
        for (uint32_t s = 0; s < a->streams; ++s) {
            ring_io *x = &r->rx[s], *t = &r->tx[s];
            x->slot = t->slot = -1;
            if (x->next < r->nrecv) {
                x->slot = (int)np;
                pfd[np++] = (struct pollfd){.fd = x->st->fd, .events = POLLIN};
                busy |= !x->blocked;
            }
            if (t->next < r->nsend) {
                /* Watched even when nothing is ready to go: the right
                 * neighbour hanging up must not wait for the deadline. */
                short ev = POLLRDHUP;
                if (send_ready(r, t)) {
                    ev |= POLLOUT;
                    busy |= !t->blocked;
                }
                t->slot = (int)np;
                pfd[np++] = (struct pollfd){.fd = t->st->fd, .events = ev};
            }
        }
        /* With work at hand the poll only looks (abort, hang-ups). */
        const int k = poll(pfd, np, busy ? 0 : timeout);
        if (k < 0) {
            if (errno == EINTR) continue;
            return errno == ENOMEM ? PMC_RING_NO_MEMORY : PMC_RING_BAD_ARG;
        }
        if (k > 0) {
            if (a->abort_fd >= 0 && pfd[0].revents != 0) return PMC_RING_ABORTED;
            for (uint32_t s = 0; s < a->streams; ++s) {
                ring_io *x = &r->rx[s], *t = &r->tx[s];
                if (x->slot >= 0 && pfd[x->slot].revents != 0) {
                    if (pfd[x->slot].revents & POLLNVAL) return PMC_RING_PEER_LOST;
                    x->blocked = 0; /* data, EOF or an error: recvmsg tells which */
                }
                if (t->slot >= 0 && pfd[t->slot].revents != 0) {
                    if (pfd[t->slot].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return PMC_RING_PEER_LOST;
                    t->blocked = 0;
                }
            }
        }
        for (uint32_t s = 0; s < a->streams; ++s) {
            ring_io *x = &r->rx[s];
            if (x->next < r->nrecv && !x->blocked) {
                const int rc = pump_recv(r, x);
                if (rc != PMC_RING_OK) return rc;
            }
        }
        for (uint32_t s = 0; s < a->streams; ++s) {
            ring_io *t = &r->tx[s];
            if (t->next < r->nsend && !t->blocked) {
                const int rc = pump_send(r, t);
                if (rc != PMC_RING_OK) return rc;
            }
        }
    }
}

static int overlap(const void *p, const void *q, size_t bytes)
{
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return a < b + bytes && b < a + bytes;
}

static int check_args(const pmc_ring_args *a, const void *in, const void *out, size_t count, int dtype, int op)
{
    if (a == NULL || a->n < 2 || a->index >= a->n || a->streams < 1 || a->send == NULL || a->recv == NULL)
        return 0;
    if (a->n > UINT32_MAX / 2 || a->streams > (INT_MAX - 1) / 2) return 0; /* steps and pollfds fit */
    if (dtype < 0 || dtype >= PMC_FTAR_DTYPE_COUNT || op < 0 || op >= PMC_FTAR_OP_COUNT) return 0;
    if (a->chunk_bytes < 1024 || a->scratch == NULL || a->scratch_bytes == NULL) return 0;
    for (uint32_t s = 0; s < a->streams; ++s)
        if (a->send[s].fd < 0 || a->recv[s].fd < 0) return 0;
    if (count > SIZE_MAX / 8) return 0;
    if (count > 0 && (in == NULL || out == NULL || overlap(in, out, count * pmc_ftar_dtype_size(dtype)))) return 0;
    return 1;
}

int pmc_ring_allreduce(const pmc_ring_args *a, const void *in, void *out, size_t count, int dtype, int op,
                       int contribute, uint32_t *n_contrib)
{
    if (!check_args(a, in, out, count, dtype, op)) return PMC_RING_BAD_ARG;
    ring r = {
        .a = a,
        .dtype = dtype,
        .op = op,
        .half = dtype == PMC_FTAR_BFLOAT16 || dtype == PMC_FTAR_FLOAT16,
        .contribute = contribute != 0,
        .esz = pmc_ftar_dtype_size(dtype),
        .in = in,
        .out = out,
        .left = (a->index + a->n - 1) % a->n,
        .rs_steps = a->n - 1,
        .own = contribute != 0,
    };
    r.asz = r.half ? sizeof(float) : r.esz;
    const uint32_t n = a->n, i = a->index, S = a->streams;
    const size_t ce = a->chunk_bytes / r.asz;

    /* Sizes of the lists, then one scratch area for everything. */
    r.nsend = r.nrecv = n - 1;
    for (uint32_t g = 0; g < 2 * n - 2; ++g) {
        size_t off, len;
        segment(count, n, send_seg(n, i, g), &off, &len);
        r.nsend += chunks(len, ce);
        segment(count, n, recv_seg(n, i, g), &off, &len);
        r.nrecv += chunks(len, ce);
    }
    const size_t acc_bytes = r.half ? align64(count * sizeof(float)) : 0;
    const size_t items_bytes = align64((r.nsend + r.nrecv) * sizeof(ring_item));
    const size_t io_bytes = align64(2 * (size_t)S * sizeof(ring_io));
    const size_t need = acc_bytes + items_bytes + io_bytes + (1 + 2 * (size_t)S) * sizeof(struct pollfd);
    if (*a->scratch == NULL || *a->scratch_bytes < need) {
        void *p = realloc(*a->scratch, need);
        if (p == NULL) return PMC_RING_NO_MEMORY;
        *a->scratch = p;
        *a->scratch_bytes = need;
    }
    uint8_t *sp = *a->scratch;
    r.acc = r.half ? sp : r.out;
    r.sitems = (ring_item *)(void *)(sp + acc_bytes);
    r.ritems = r.sitems + r.nsend;
    r.tx = (ring_io *)(void *)(sp + acc_bytes + items_bytes);
    r.rx = r.tx + S;
    r.pfd = (struct pollfd *)(void *)(sp + acc_bytes + items_bytes + io_bytes);
    build_items(&r, count, ce);
    r.send_left = r.nsend;
    r.recv_left = r.nrecv;
    memset(r.tx, 0, 2 * (size_t)S * sizeof(ring_io));
    for (uint32_t s = 0; s < S; ++s) {
        r.tx[s].st = &a->send[s];
        r.rx[s].st = &a->recv[s];
        r.tx[s].next = r.rx[s].next = s;
        if (a->integrity) {
            pmc_hmac_init(&r.tx[s].keyed, a->send[s].key, sizeof(a->send[s].key));
            pmc_hmac_init(&r.rx[s].keyed, a->recv[s].key, sizeof(a->recv[s].key));
        }
    }

    /* What step 0 sends (segment i), where it is not `in` itself. */
    size_t off0, len0;
    segment(count, n, i, &off0, &len0);
    if (len0 > 0) {
        if (r.half && r.contribute)
            pmc_ftar_widen((float *)(void *)(r.acc + off0 * r.asz), r.in + off0 * r.esz, len0, dtype);
        else if (!r.contribute)
            memset(r.acc + off0 * r.asz, 0, len0 * r.asz);
    }

    const int rc = run(&r);
    if (rc == PMC_RING_OK && n_contrib != NULL) *n_contrib = (uint32_t)r.total;
    return rc;
}

const char *pmc_ring_strerror(int code)
{
    switch (code) {
    case PMC_RING_OK: return "ok";
    case PMC_RING_ABORTED: return "ring operation aborted";
    case PMC_RING_TIMEOUT: return "ring operation timed out";
    case PMC_RING_PEER_LOST: return "ring neighbour lost (connection closed or reset)";
    case PMC_RING_BAD_FRAME: return "bad data frame from the ring neighbour (header, order, length or MAC)";
    case PMC_RING_NO_MEMORY: return "out of memory for the ring's scratch";
    case PMC_RING_BAD_ARG: return "invalid ring argument";
    default: return "unknown ring status";
    }
}
