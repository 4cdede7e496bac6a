/* The member's acceptor thread and state transfers.
 *
 * One listener takes both kinds of connection, told apart by the identity
 * the client proves in the handshake:
 *   ring:<replica>:<epoch>:<stream>  a left neighbour's data stream, queued for the ring
 *   state:<replica>                  a member catching up; a thread of its own serves it
 * A state transfer sends the snapshot published last (reference counted, so
 * publishing the next one never waits for a transfer), in MAC'ed frames:
 *   joiner -> STATE i64 min_step
 *   donor  -> STATE i64 step | u64 bytes, then STATE frames of data
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "member.h"
#include "proto.h"

enum { STATE_CHUNK = 60000, HANDSHAKE_MS = 3000 };

void pmc_snapshot_release(pmc_ftar_member *m, pmc_snapshot *s)
{
    if (s == NULL) return;
    pthread_mutex_lock(&m->state_lock);
    const int last = --s->refs == 0;
    if (last && m->spare == NULL && !m->stopping) { /* kept: the next publish copies into it */
        m->spare = s;
        s = NULL;
    }
    pthread_mutex_unlock(&m->state_lock);
    if (last && s != NULL) {
        free(s->data);
        free(s);
    }
}

int pmc_ftar_member_publish_state(pmc_ftar_member *m, int64_t step, const void *buf, size_t len)
{
    if (m == NULL || (buf == NULL && len > 0)) return PMC_FTAR_ST_ERROR;
    /* Memory already mapped is reused: a spare left by a finished transfer,
     * or the last snapshot when no transfer holds it. A copy into resident
     * pages costs a fraction of one into fresh ones. */
    pthread_mutex_lock(&m->state_lock);
    pmc_snapshot *s = NULL;
    if (m->spare != NULL && m->spare->cap >= len) {
        s = m->spare;
        m->spare = NULL;
        s->refs = 1;
    } else if (m->snapshot != NULL && m->snapshot->refs == 1 && m->snapshot->cap >= len) {
        s = m->snapshot;
        m->snapshot = NULL; /* transfers starting meanwhile wait for the new one */
    }
    pthread_mutex_unlock(&m->state_lock);
    if (s == NULL) {
        s = calloc(1, sizeof(*s));
        if (s == NULL || (len > 0 && (s->data = malloc(len)) == NULL)) {
            free(s);
            snprintf(m->msg, sizeof(m->msg), "publish_state: out of memory for %zu bytes", len);
            return PMC_FTAR_ST_ERROR;
        }
        s->cap = len;
        s->refs = 1;
    }
    if (len > 0) memcpy(s->data, buf, len); /* the one copy per step served */
    s->len = len;
    s->step = step;
    pthread_mutex_lock(&m->state_lock);
    pmc_snapshot *old = m->snapshot;
    m->snapshot = s;
    pthread_cond_broadcast(&m->state_cond);
    pthread_mutex_unlock(&m->state_lock);
    pmc_snapshot_release(m, old);
    return PMC_FTAR_ST_OK;
}

typedef struct serve_job {
    pmc_ftar_member *m;
    pmc_conn c;
} serve_job;

static void *serve_state(void *arg)
{
    serve_job *job = arg;
    pmc_ftar_member *m = job->m;
    pmc_conn *c = &job->c;
    const int64_t deadline = pmc_ftar_now_ms() + (m->timeout_ms ? m->timeout_ms : 30000);
    pmc_ftar_header h;
    const uint8_t *payload = NULL;
    int rc = pmc_conn_recv(c, deadline, m->wake_fd, &h, &payload);
    int64_t min_step = 0;
    if (rc == PMC_IO_OK) {
        pmc_rd r;
        pmc_rd_init(&r, payload, h.length);
        min_step = pmc_rd_i64(&r);
        if (h.type != PMC_FTAR_STATE || !pmc_rd_done(&r)) rc = PMC_IO_BAD_FRAME;
    }
    pmc_snapshot *s = NULL;
    if (rc == PMC_IO_OK) { /* wait for a snapshot new enough */
        pthread_mutex_lock(&m->state_lock);
        while (!m->stopping && (m->snapshot == NULL || m->snapshot->step < min_step) &&
               pmc_ftar_now_ms() < deadline) {
            pmc_cond_wait_slice(&m->state_cond, &m->state_lock, 50);
        }
        if (m->snapshot != NULL && m->snapshot->step >= min_step) {
            s = m->snapshot;
            ++s->refs;
        }
        pthread_mutex_unlock(&m->state_lock);
        if (s == NULL) rc = PMC_IO_TIMEOUT;
    }
    if (rc == PMC_IO_OK) {
        uint8_t head[16];
        pmc_wr w;
        pmc_wr_init(&w, head, sizeof(head));
        pmc_wr_i64(&w, s->step);
        pmc_wr_u64(&w, s->len);
        rc = pmc_conn_send(c, PMC_FTAR_STATE, 0, (uint64_t)s->step, head, (uint32_t)w.len, deadline);
        for (size_t off = 0; rc == PMC_IO_OK && off < s->len; off += STATE_CHUNK) {
            const size_t n = s->len - off < STATE_CHUNK ? s->len - off : STATE_CHUNK;
            rc = pmc_conn_send(c, PMC_FTAR_STATE, 0, (uint64_t)s->step, s->data + off, (uint32_t)n, deadline);
            if (off < s->len / 2 && off + n >= s->len / 2) pmc_member_fault(m, PMC_FAULT_SERVE, s->step);
        }
        pmc_member_log(m, "served the state of step %" PRId64 " (%zu bytes) to %s: %s", s->step, s->len,
                       c->identity, pmc_io_strerror(rc));
    }
    pmc_snapshot_release(m, s);
    pmc_conn_close(c);
    free(job);
    pthread_mutex_lock(&m->state_lock);
    --m->transfers;
    pthread_cond_broadcast(&m->state_cond);
    pthread_mutex_unlock(&m->state_lock);
    return NULL;
}

static void take_connection(pmc_ftar_member *m, int fd)
{
    pmc_socket_tune(fd, 1);
    pmc_conn c;
    pmc_conn_init(&c, fd, 0);
    const int rc = pmc_conn_handshake_server(&c, m->token, m->tokenlen, pmc_ftar_now_ms() + HANDSHAKE_MS);
    if (rc != PMC_IO_OK) {
        pmc_member_log(m, "refused a connection: %s", pmc_io_strerror(rc));
        pmc_conn_close(&c);
        return;
    }
    char from[64];
    uint64_t epoch = 0;
    uint32_t stream = 0;
    int used = 0;
    if (sscanf(c.identity, "ring:%63[A-Za-z0-9._-]:%" SCNu64 ":%" SCNu32 "%n", from, &epoch, &stream, &used) == 3 &&
        c.identity[used] == '\0' && stream < PMC_MAX_STREAMS) {
        pthread_mutex_lock(&m->ring_lock);
        if (m->n_ring_in == PMC_RING_QUEUE) { /* the oldest is stale by now */
            close(m->ring_in[0].fd);
            memmove(m->ring_in, m->ring_in + 1, sizeof(m->ring_in[0]) * (PMC_RING_QUEUE - 1));
            --m->n_ring_in;
        }
        pmc_ring_in *in = &m->ring_in[m->n_ring_in++];
        in->epoch = epoch;
        in->stream = stream;
        snprintf(in->from, sizeof(in->from), "%s", from);
        in->fd = c.fd;
        memcpy(in->key, c.key, sizeof(in->key));
        pthread_cond_broadcast(&m->ring_cond);
        pthread_mutex_unlock(&m->ring_lock);
        c.fd = -1; /* the ring owns the socket now */
        pmc_conn_close(&c);
        return;
    }
    if (strncmp(c.identity, "state:", 6) == 0) {
        serve_job *job = malloc(sizeof(*job));
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (job != NULL) {
            job->m = m;
            job->c = c;
            pthread_mutex_lock(&m->state_lock);
            ++m->transfers;
            pthread_mutex_unlock(&m->state_lock);
            if (pthread_create(&t, &attr, serve_state, job) == 0) {
                pthread_attr_destroy(&attr);
                return;
            }
            pthread_mutex_lock(&m->state_lock);
            --m->transfers;
            pthread_mutex_unlock(&m->state_lock);
            free(job);
        }
        pthread_attr_destroy(&attr);
        pmc_member_log(m, "cannot serve the state to %s: no thread", c.identity);
        pmc_conn_close(&c);
        return;
    }
    pmc_member_log(m, "refused a connection with identity '%s'", c.identity);
    pmc_conn_close(&c);
}

void *pmc_member_accept_main(void *arg)
{
    pmc_ftar_member *m = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = m->listen_fd, .events = POLLIN}, {.fd = m->wake_fd, .events = POLLIN}};
        const int n = poll(p, 2, 200);
        pthread_mutex_lock(&m->lock);
        const int stopping = m->stopping;
        pthread_mutex_unlock(&m->lock);
        if (stopping) break;
        if (n <= 0 || !(p[0].revents & POLLIN)) continue;
        const int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) take_connection(m, fd);
    }
    return NULL;
}

/* One attempt to fetch from the donor at addr. */
static int fetch_from(pmc_ftar_member *m, const char *addr, int64_t min_step, int64_t deadline, int64_t *step,
                      void **out, size_t *outlen)
{
    int fd = -1;
    char why[PMC_FTAR_MESSAGE_BYTES] = "";
    int rc = pmc_connect(addr, deadline, &fd, why, sizeof(why));
    if (rc != PMC_IO_OK) return rc;
    pmc_socket_tune(fd, 1);
    pmc_conn c;
    pmc_conn_init(&c, fd, 0);
    char identity[PMC_CONN_IDENTITY_BYTES];
    snprintf(identity, sizeof(identity), "state:%s", m->id);
    rc = pmc_conn_handshake_client(&c, m->token, m->tokenlen, identity, deadline);
    uint8_t req[8];
    pmc_wr w;
    pmc_wr_init(&w, req, sizeof(req));
    pmc_wr_i64(&w, min_step);
    if (rc == PMC_IO_OK) rc = pmc_conn_send(&c, PMC_FTAR_STATE, 0, 0, req, (uint32_t)w.len, deadline);
    pmc_ftar_header h;
    const uint8_t *payload = NULL;
    if (rc == PMC_IO_OK) rc = pmc_conn_recv(&c, deadline, -1, &h, &payload);
    uint64_t total = 0;
    int64_t got_step = 0;
    if (rc == PMC_IO_OK) {
        pmc_rd r;
        pmc_rd_init(&r, payload, h.length);
        got_step = pmc_rd_i64(&r);
        total = pmc_rd_u64(&r);
        if (h.type != PMC_FTAR_STATE || !pmc_rd_done(&r) || got_step < min_step || total > ((uint64_t)1 << 40))
            rc = PMC_IO_BAD_FRAME;
    }
    uint8_t *data = NULL;
    if (rc == PMC_IO_OK && (data = malloc(total ? total : 1)) == NULL) rc = PMC_IO_ERROR;
    for (uint64_t off = 0; rc == PMC_IO_OK && off < total;) {
        rc = pmc_conn_recv(&c, deadline, -1, &h, &payload);
        if (rc != PMC_IO_OK) break;
        if (h.type != PMC_FTAR_STATE || h.length == 0 || h.length > total - off) {
            rc = PMC_IO_BAD_FRAME;
            break;
        }
        memcpy(data + off, payload, h.length);
        off += h.length;
    }
    pmc_conn_close(&c);
    if (rc != PMC_IO_OK) {
        free(data);
        return rc;
    }
    *step = got_step;
    *out = data;
    *outlen = (size_t)total;
    return PMC_IO_OK;
}

int pmc_ftar_member_fetch_state(pmc_ftar_member *m, int64_t min_step, int64_t *step, void **buf, size_t *len)
{
    if (m == NULL || step == NULL || buf == NULL || len == NULL) return PMC_FTAR_ST_ERROR;
    *buf = NULL;
    *len = 0;
    const int64_t deadline = pmc_ftar_now_ms() + (m->timeout_ms ? m->timeout_ms : 30000);
    pthread_mutex_lock(&m->lock);
    int32_t donor = -1;
    char addr[PMC_FTAR_ADDR_BYTES] = "";
    uint64_t epoch = m->quorum.epoch;
    if (m->have_quorum && m->quorum.index < m->quorum.n) {
        donor = m->quorum.peers[m->quorum.index].donor;
        if (donor >= 0) snprintf(addr, sizeof(addr), "%s", m->quorum.peers[donor].state_addr);
    }
    pthread_mutex_unlock(&m->lock);
    while (pmc_ftar_now_ms() < deadline) {
        if (donor < 0) {
            snprintf(m->msg, sizeof(m->msg), "fetch_state: no donor holds the state (is any replica up to date?)");
            return PMC_FTAR_ST_ABORTED;
        }
        const int rc = fetch_from(m, addr, min_step, deadline, step, buf, len);
        if (rc == PMC_IO_OK) {
            pmc_member_log(m, "fetched the state of step %" PRId64 " (%zu bytes) from %s", *step, *len, addr);
            return PMC_FTAR_ST_OK;
        }
        pmc_member_log(m, "state transfer from %s failed (%s): asking for another donor", addr, pmc_io_strerror(rc));
        pthread_mutex_lock(&m->lock);
        m->have_donor = 0;
        pthread_mutex_unlock(&m->lock);
        uint8_t p[4];
        pmc_wr w;
        pmc_wr_init(&w, p, sizeof(p));
        pmc_wr_u32(&w, (uint32_t)donor);
        if (pmc_member_send(m, PMC_FTAR_DONOR, epoch, 0, p, (uint32_t)w.len) != PMC_IO_OK) {
            struct pollfd none = {.fd = -1};
            poll(&none, 0, 100); /* the coordinator link is down: try the same donor again shortly */
            continue;
        }
        pthread_mutex_lock(&m->lock);
        while (!m->have_donor && !m->stopping && pmc_ftar_now_ms() < deadline) {
            pmc_cond_wait_slice(&m->cond, &m->lock, 50);
        }
        if (m->have_donor) {
            donor = m->donor_index;
            snprintf(addr, sizeof(addr), "%s", m->donor_addr);
        }
        pthread_mutex_unlock(&m->lock);
    }
    snprintf(m->msg, sizeof(m->msg), "fetch_state: no donor delivered the state of step >= %" PRId64 " in time",
             min_step);
    return PMC_FTAR_ST_TIMEOUT;
}
