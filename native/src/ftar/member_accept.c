/* The member's acceptor thread and state transfers.
 *
 * One listener takes both kinds of connection, each handled by a thread of
 * its own from the handshake on (so a stranger that connects and says
 * nothing holds up no one), told apart by the identity the client proves:
 *   ring:<replica>:<epoch>:<stream>  a left neighbour's data stream, queued for the ring
 *   state:<replica>                  a member catching up; served on that thread
 * A state transfer sends the snapshot published last (reference counted, so
 * publishing the next one never waits for a transfer), in MAC'ed frames:
 *   joiner -> STATE i64 min_step
 *   donor  -> STATE i64 step | u64 bytes | u64 epoch of the state, then STATE frames of data
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

enum { STATE_CHUNK = 60000, HANDSHAKE_MS = 2000, MAX_CONNECTION_THREADS = 32, IDLE_MS = 5000 };

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
    pthread_mutex_lock(&m->lock);
    s->epoch = step == m->committed_step ? m->committed_epoch : 0;
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_lock(&m->state_lock);
    pmc_snapshot *old = m->snapshot;
    m->snapshot = s;
    pthread_cond_broadcast(&m->state_cond);
    pthread_mutex_unlock(&m->state_lock);
    pmc_snapshot_release(m, old);
    return PMC_FTAR_ST_OK;
}

static void serve_state(pmc_ftar_member *m, pmc_conn *c)
{
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
               pmc_ftar_now_ms() < deadline)
            pmc_cond_wait_slice(&m->state_cond, &m->state_lock, 50);
        if (m->snapshot != NULL && m->snapshot->step >= min_step) {
            s = m->snapshot;
            ++s->refs;
        }
        pthread_mutex_unlock(&m->state_lock);
        if (s == NULL) rc = PMC_IO_TIMEOUT;
    }
    if (rc == PMC_IO_OK) {
        uint8_t head[24];
        pmc_wr w;
        pmc_wr_init(&w, head, sizeof(head));
        pmc_wr_i64(&w, s->step);
        pmc_wr_u64(&w, s->len);
        pmc_wr_u64(&w, s->epoch);
        rc = pmc_conn_send(c, PMC_FTAR_STATE, 0, (uint64_t)s->step, head, (uint32_t)w.len, deadline);
        for (size_t off = 0; rc == PMC_IO_OK && off < s->len && !m->stopping; off += STATE_CHUNK) {
            const size_t n = s->len - off < STATE_CHUNK ? s->len - off : STATE_CHUNK;
            rc = pmc_conn_send(c, PMC_FTAR_STATE, 0, (uint64_t)s->step, s->data + off, (uint32_t)n, deadline);
            if (off < s->len / 2 && off + n >= s->len / 2) pmc_member_fault(m, PMC_FAULT_SERVE, s->step);
        }
        pmc_member_log(m, "served the state of step %" PRId64 " (%zu bytes) to %s: %s", s->step, s->len,
                       c->identity, pmc_io_strerror(rc));
    }
    pmc_snapshot_release(m, s);
}

/* "ring:<replica>:<epoch>:<stream>", digits only in the numbers. */
static int parse_ring_identity(const char *id, char *from, size_t fromcap, uint64_t *epoch, uint32_t *stream)
{
    if (strncmp(id, "ring:", 5) != 0) return -1;
    const char *p = id + 5;
    const char *colon = strchr(p, ':');
    if (colon == NULL || (size_t)(colon - p) >= fromcap) return -1;
    memcpy(from, p, (size_t)(colon - p));
    from[colon - p] = '\0';
    if (!pmc_replica_id_valid(from)) return -1;
    uint64_t v[2] = {0, 0};
    p = colon + 1;
    for (int k = 0; k < 2; ++k) {
        if (*p < '0' || *p > '9') return -1;
        for (; *p >= '0' && *p <= '9'; ++p) {
            if (v[k] > (UINT64_MAX - 9) / 10) return -1;
            v[k] = v[k] * 10 + (uint64_t)(*p - '0');
        }
        if (k == 0 && *p++ != ':') return -1;
    }
    if (*p != '\0' || v[1] >= PMC_MAX_STREAMS) return -1;
    *epoch = v[0];
    *stream = (uint32_t)v[1];
    return 0;
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
    if (parse_ring_identity(c.identity, from, sizeof(from), &epoch, &stream) == 0) {
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
        memcpy(in->key, c.key_rx, sizeof(in->key));
        pthread_cond_broadcast(&m->ring_cond);
        pthread_mutex_unlock(&m->ring_lock);
        c.fd = -1; /* the ring owns the socket now */
        pmc_conn_close(&c);
        return;
    }
    if (strncmp(c.identity, "state:", 6) == 0 && pmc_replica_id_valid(c.identity + 6)) {
        serve_state(m, &c);
        pmc_conn_close(&c);
        return;
    }
    pmc_member_log(m, "refused a connection with an identity of %zu bytes that names no use", strlen(c.identity));
    pmc_conn_close(&c);
}

typedef struct conn_job {
    pmc_ftar_member *m;
    int fd;
} conn_job;

static void *connection_main(void *arg)
{
    conn_job *job = arg;
    pmc_ftar_member *m = job->m;
    const int fd = job->fd;
    free(job);
    take_connection(m, fd);
    pthread_mutex_lock(&m->state_lock);
    --m->transfers;
    pthread_cond_broadcast(&m->state_cond);
    pthread_mutex_unlock(&m->state_lock);
    return NULL;
}

/* Hands fd to a thread of its own (counted in m->transfers, which destroy
 * waits for); too many at once and the newcomer is turned away. */
static void spawn_connection(pmc_ftar_member *m, int fd)
{
    pthread_mutex_lock(&m->state_lock);
    const int busy = m->transfers >= MAX_CONNECTION_THREADS;
    if (!busy) ++m->transfers;
    pthread_mutex_unlock(&m->state_lock);
    conn_job *job = busy ? NULL : malloc(sizeof(*job));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int started = 0;
    if (job != NULL) {
        job->m = m;
        job->fd = fd;
        started = pthread_create(&t, &attr, connection_main, job) == 0;
        if (!started) free(job);
    }
    pthread_attr_destroy(&attr);
    if (started) return;
    if (!busy) {
        pthread_mutex_lock(&m->state_lock);
        --m->transfers;
        pthread_mutex_unlock(&m->state_lock);
    }
    pmc_member_log(m, "turned a connection away: %s", busy ? "too many at once" : "no thread");
    close(fd);
}

void *pmc_member_accept_main(void *arg)
{
    pmc_ftar_member *m = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = m->listen_fd, .events = POLLIN}, {.fd = m->wake_fd, .events = POLLIN}};
        const int n = poll(p, 2, 200);
        if (m->stopping) break;
        if (n <= 0 || !(p[0].revents & POLLIN)) continue;
        const int fd = accept4(m->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
            spawn_connection(m, fd);
        } else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            struct pollfd w = {.fd = m->wake_fd, .events = POLLIN}; /* out of descriptors: let some close */
            poll(&w, 1, 100);
        }
    }
    return NULL;
}

/* One attempt to fetch from the donor at addr. Besides the overall deadline,
 * a donor that sends nothing for IDLE_MS (stopped, or its host gone without
 * a reset) is given up, so that another can be asked in time. */
static int fetch_from(pmc_ftar_member *m, const char *addr, int64_t min_step, int64_t deadline, int64_t *step,
                      uint64_t *epoch, void **out, size_t *outlen)
{
    int fd = -1;
    char why[PMC_FTAR_MESSAGE_BYTES] = "";
    const int64_t t0 = pmc_ftar_now_ms();
    int rc = pmc_connect(addr, t0 + IDLE_MS < deadline ? t0 + IDLE_MS : deadline, &fd, why, sizeof(why));
    if (rc != PMC_IO_OK) return rc;
    pmc_socket_tune(fd, 1);
    pmc_conn c;
    pmc_conn_init(&c, fd, 0);
    char identity[PMC_CONN_IDENTITY_BYTES];
    snprintf(identity, sizeof(identity), "state:%s", m->id);
    rc = pmc_conn_handshake_client(&c, m->token, m->tokenlen, identity, t0 + IDLE_MS < deadline ? t0 + IDLE_MS : deadline);
    uint8_t req[8];
    pmc_wr w;
    pmc_wr_init(&w, req, sizeof(req));
    pmc_wr_i64(&w, min_step);
    if (rc == PMC_IO_OK) rc = pmc_conn_send(&c, PMC_FTAR_STATE, 0, 0, req, (uint32_t)w.len, deadline);
    pmc_ftar_header h;
    const uint8_t *payload = NULL;
    /* The donor may first wait for its next publish (one step): the whole deadline for that. */
    if (rc == PMC_IO_OK) rc = pmc_conn_recv(&c, deadline, m->wake_fd, &h, &payload);
    uint64_t total = 0, got_epoch = 0;
    int64_t got_step = 0;
    if (rc == PMC_IO_OK) {
        pmc_rd r;
        pmc_rd_init(&r, payload, h.length);
        got_step = pmc_rd_i64(&r);
        total = pmc_rd_u64(&r);
        got_epoch = pmc_rd_u64(&r);
        if (h.type != PMC_FTAR_STATE || !pmc_rd_done(&r) || got_step < min_step || total > ((uint64_t)1 << 40))
            rc = PMC_IO_BAD_FRAME;
    }
    uint8_t *data = NULL;
    if (rc == PMC_IO_OK && (data = malloc(total ? total : 1)) == NULL) rc = PMC_IO_ERROR;
    for (uint64_t off = 0; rc == PMC_IO_OK && off < total;) {
        const int64_t idle = pmc_ftar_now_ms() + IDLE_MS;
        rc = pmc_conn_recv(&c, idle < deadline ? idle : deadline, m->wake_fd, &h, &payload);
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
    *epoch = got_epoch;
    *out = data;
    *outlen = (size_t)total;
    return PMC_IO_OK;
}

const char *pmc_ftar_member_fetch_message(pmc_ftar_member *m) { return m ? m->fetch_msg : "no member"; }

int pmc_ftar_member_fetch_state(pmc_ftar_member *m, int64_t min_step, int64_t *step, void **buf, size_t *len)
{
    if (m == NULL || step == NULL || buf == NULL || len == NULL) return PMC_FTAR_ST_ERROR;
    *buf = NULL;
    *len = 0;
    const int64_t deadline = pmc_ftar_now_ms() + (m->timeout_ms ? m->timeout_ms : 30000);
    pthread_mutex_lock(&m->lock);
    int32_t donor = m->donor_index_at_quorum;
    char addr[PMC_FTAR_ADDR_BYTES];
    snprintf(addr, sizeof(addr), "%s", m->donor_at_quorum);
    const uint64_t epoch = m->current_epoch;
    pthread_mutex_unlock(&m->lock);
    while (pmc_ftar_now_ms() < deadline && !m->stopping) {
        if (donor < 0 || addr[0] == '\0') {
            snprintf(m->fetch_msg, sizeof(m->fetch_msg),
                     "fetch_state: no donor holds the state (is any replica up to date?)");
            return PMC_FTAR_ST_ABORTED;
        }
        uint64_t got_epoch = 0;
        const int rc = fetch_from(m, addr, min_step, deadline, step, &got_epoch, buf, len);
        if (rc == PMC_IO_OK) {
            pthread_mutex_lock(&m->lock);
            m->fetched_step = *step;
            m->fetched_epoch = got_epoch;
            pthread_mutex_unlock(&m->lock);
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
        while (!m->have_donor && !m->stopping && pmc_ftar_now_ms() < deadline)
            pmc_cond_wait_slice(&m->cond, &m->lock, 50);
        if (m->have_donor) {
            donor = m->donor_index;
            snprintf(addr, sizeof(addr), "%s", m->donor_addr);
        }
        pthread_mutex_unlock(&m->lock);
    }
    snprintf(m->fetch_msg, sizeof(m->fetch_msg),
             "fetch_state: no donor delivered the state of step >= %" PRId64 " in time", min_step);
    return PMC_FTAR_ST_TIMEOUT;
}
