/* The member's control thread: it owns the link to the coordinator, sends
 * heartbeats from C (so a busy or GIL-bound training loop is never taken
 * for dead), reconnects after a coordinator restart, and files what the
 * coordinator says (quorum, decisions, donors) for the API calls waiting on
 * them. An ABORT for the running epoch also trips abort_fd, which every wait
 * of the ring polls. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "member.h"
#include "proto.h"

void pmc_member_log(pmc_ftar_member *m, const char *fmt, ...)
{
    if (m->log_fd < 0) return;
    char line[512];
    int n = snprintf(line, sizeof(line), "ftar-member %s: ", m->id);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line)) n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof(line) - 1) n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(m->log_fd, line, (size_t)n);
    (void)w;
}

void pmc_member_signal(int fd)
{
    const uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof(one));
    (void)w;
}

void pmc_member_drain(int fd)
{
    uint64_t v;
    while (read(fd, &v, sizeof(v)) > 0) {
    }
}

int pmc_member_send(pmc_ftar_member *m, int type, uint64_t epoch, uint64_t step, const void *payload, uint32_t len)
{
    pthread_mutex_lock(&m->send_lock);
    int rc = PMC_IO_CLOSED;
    pthread_mutex_lock(&m->lock);
    const int connected = m->connected;
    pthread_mutex_unlock(&m->lock);
    if (connected) rc = pmc_conn_send(&m->ctrl, type, epoch, step, payload, len, pmc_ftar_now_ms() + 1000);
    pthread_mutex_unlock(&m->send_lock);
    return rc;
}

/* Connects, authenticates and joins; 0 when welcomed. */
static int join(pmc_ftar_member *m)
{
    int fd = -1;
    char why[PMC_FTAR_MESSAGE_BYTES] = "";
    const int64_t deadline = pmc_ftar_now_ms() + 2000;
    if (pmc_connect(m->coordinator, deadline, &fd, why, sizeof(why)) != PMC_IO_OK) {
        pthread_mutex_lock(&m->lock);
        snprintf(m->join_error, sizeof(m->join_error), "%s", why);
        pthread_mutex_unlock(&m->lock);
        return -1;
    }
    pmc_conn c;
    pmc_conn_init(&c, fd, 0);
    char identity[PMC_CONN_IDENTITY_BYTES];
    snprintf(identity, sizeof(identity), "member:%s", m->id);
    int rc = pmc_conn_handshake_client(&c, m->token, m->tokenlen, identity, deadline);
    if (rc != PMC_IO_OK) {
        pmc_member_log(m, "coordinator %s refused the handshake: %s", m->coordinator, pmc_io_strerror(rc));
        pthread_mutex_lock(&m->lock);
        snprintf(m->join_error, sizeof(m->join_error), "the handshake with %s failed: %s", m->coordinator,
                 rc == PMC_IO_CLOSED || rc == PMC_IO_AUTH ? "refused (is the job token the same?)" : pmc_io_strerror(rc));
        pthread_mutex_unlock(&m->lock);
        pmc_conn_close(&c);
        return -1;
    }
    uint8_t buf[1024];
    pmc_wr w;
    pmc_wr_init(&w, buf, sizeof(buf));
    pthread_mutex_lock(&m->lock);
    pmc_wr_i64(&w, m->committed_step);
    pmc_wr_u64(&w, m->last_epoch);
    pthread_mutex_unlock(&m->lock);
    pmc_wr_str(&w, m->id);
    pmc_wr_str(&w, m->listen_addr);
    pmc_wr_str(&w, m->listen_addr);
    pthread_mutex_lock(&m->lock);
    pmc_wr_u64(&w, m->committed_epoch);
    pthread_mutex_unlock(&m->lock);
    rc = pmc_conn_send(&c, PMC_FTAR_JOIN, 0, 0, buf, (uint32_t)w.len, deadline);
    pmc_ftar_header h;
    const uint8_t *payload = NULL;
    if (rc == PMC_IO_OK) rc = pmc_conn_recv(&c, deadline, m->wake_fd, &h, &payload);
    if (rc == PMC_IO_OK && h.type != PMC_FTAR_JOIN) rc = PMC_IO_BAD_FRAME;
    uint32_t hb = 0, evict = 0;
    uint64_t incarnation = 0;
    if (rc == PMC_IO_OK) {
        pmc_rd r;
        pmc_rd_init(&r, payload, h.length);
        hb = pmc_rd_u32(&r);
        evict = pmc_rd_u32(&r);
        incarnation = pmc_rd_u64(&r);
        if (!pmc_rd_done(&r) || hb == 0 || evict == 0) rc = PMC_IO_BAD_FRAME;
    }
    if (rc != PMC_IO_OK) {
        pthread_mutex_lock(&m->lock);
        snprintf(m->join_error, sizeof(m->join_error), "the coordinator at %s did not welcome the JOIN: %s",
                 m->coordinator, pmc_io_strerror(rc));
        pthread_mutex_unlock(&m->lock);
        pmc_conn_close(&c);
        return -1;
    }
    pthread_mutex_lock(&m->send_lock);
    pthread_mutex_lock(&m->lock);
    m->ctrl = c;
    m->connected = 1;
    ++m->generation;
    m->heartbeat_ms = hb;
    m->evict_ms = evict;
    if (incarnation != m->incarnation && m->incarnation != 0)
        pmc_member_log(m, "coordinator %s restarted: rejoined", m->coordinator);
    m->incarnation = incarnation;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_unlock(&m->send_lock);
    return 0;
}

static void disconnect(pmc_ftar_member *m, const char *why)
{
    pthread_mutex_lock(&m->send_lock);
    pthread_mutex_lock(&m->lock);
    if (m->connected) pmc_member_log(m, "lost the coordinator: %s", why);
    m->connected = 0;
    pmc_conn_close(&m->ctrl);
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_unlock(&m->send_lock);
}

static int read_quorum(pmc_ftar_member *m, const pmc_ftar_header *h, const uint8_t *payload)
{
    pmc_rd r;
    pmc_rd_init(&r, payload, h->length);
    pmc_quorum q = {.epoch = h->epoch, .step = (int64_t)h->step};
    q.status = pmc_rd_u32(&r);
    q.n = pmc_rd_u32(&r);
    q.index = pmc_rd_u32(&r);
    q.n_healing = pmc_rd_u32(&r);
    if (r.bad || q.n > PMC_MEMBER_MAX || (q.status == PMC_FTAR_ST_OK && (q.n == 0 || q.index >= q.n))) return -1;
    if (q.n > 0) {
        q.peers = calloc(q.n, sizeof(pmc_peer));
        if (q.peers == NULL) return -1;
    }
    for (uint32_t i = 0; i < q.n; ++i) {
        pmc_peer *p = &q.peers[i];
        p->healing = pmc_rd_u8(&r);
        p->donor = pmc_rd_i32(&r);
        pmc_rd_str(&r, p->id, sizeof(p->id));
        pmc_rd_str(&r, p->ring_addr, sizeof(p->ring_addr));
        pmc_rd_str(&r, p->state_addr, sizeof(p->state_addr));
        if (p->donor < -1 || p->donor >= (int32_t)q.n) r.bad = 1;
    }
    if (!pmc_rd_done(&r)) {
        free(q.peers);
        return -1;
    }
    pthread_mutex_lock(&m->lock);
    free(m->quorum.peers);
    m->quorum = q;
    m->have_quorum = 1;
    m->quorum_fences = m->fences;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    return 0;
}

static int read_decision(pmc_ftar_member *m, const pmc_ftar_header *h, const uint8_t *payload)
{
    uint32_t status = PMC_FTAR_ST_OK;
    char reason[PMC_FTAR_MESSAGE_BYTES] = "";
    if (h->type == PMC_FTAR_ABORT) {
        pmc_rd r;
        pmc_rd_init(&r, payload, h->length);
        status = pmc_rd_u32(&r);
        pmc_rd_str(&r, reason, sizeof(reason));
        if (!pmc_rd_done(&r) || status == PMC_FTAR_ST_OK) return -1;
    } else if (h->length != 0) {
        return -1;
    }
    pthread_mutex_lock(&m->lock);
    m->have_decision = 1;
    m->decision_commit = h->type == PMC_FTAR_COMMIT;
    m->decision_status = status;
    m->decision_epoch = h->epoch;
    m->decision_step = (int64_t)h->step;
    snprintf(m->decision_reason, sizeof(m->decision_reason), "%s", reason);
    /* An abort may concern the epoch of a quorum filed but not yet adopted
     * (both can arrive in one read): it is recorded for that epoch too, and
     * begin_step re-arms abort_fd when it adopts an aborted epoch. */
    const int about_running = h->epoch == m->current_epoch ||
                              (m->have_quorum && h->epoch == m->quorum.epoch) ||
                              (m->current_epoch != UINT64_MAX && h->epoch > m->current_epoch);
    if (status == PMC_FTAR_ST_FENCED) {
        m->fenced = 1;
        ++m->fences;
        if (about_running) m->aborted_epoch = h->epoch;
        pmc_member_signal(m->abort_fd);
        pmc_member_log(m, "fenced by the coordinator: %s", reason);
    } else if (h->type == PMC_FTAR_ABORT && about_running) {
        m->aborted_epoch = h->epoch;
        if (h->epoch == m->current_epoch) pmc_member_signal(m->abort_fd);
    }
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    return 0;
}

static int read_donor(pmc_ftar_member *m, const pmc_ftar_header *h, const uint8_t *payload)
{
    pmc_rd r;
    pmc_rd_init(&r, payload, h->length);
    const int32_t index = pmc_rd_i32(&r);
    char addr[PMC_FTAR_ADDR_BYTES];
    pmc_rd_str(&r, addr, sizeof(addr));
    if (!pmc_rd_done(&r)) return -1;
    pthread_mutex_lock(&m->lock);
    m->have_donor = 1;
    m->donor_index = index;
    snprintf(m->donor_addr, sizeof(m->donor_addr), "%s", addr);
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    return 0;
}

/* Files one frame; -1 when it makes no sense (the link is then dropped). */
static int dispatch(pmc_ftar_member *m, const pmc_ftar_header *h, const uint8_t *payload)
{
    switch (h->type) {
    case PMC_FTAR_HEARTBEAT: return 0;
    case PMC_FTAR_QUORUM: return read_quorum(m, h, payload);
    case PMC_FTAR_COMMIT:
    case PMC_FTAR_ABORT: return read_decision(m, h, payload);
    case PMC_FTAR_DONOR: return read_donor(m, h, payload);
    default: return -1;
    }
}

void *pmc_member_control_main(void *arg)
{
    pmc_ftar_member *m = arg;
    int64_t next_beat = 0;
    for (;;) {
        pthread_mutex_lock(&m->lock);
        const int stopping = m->stopping, connected = m->connected;
        const uint32_t hb = m->heartbeat_ms ? m->heartbeat_ms : PMC_FTAR_DEFAULT_HEARTBEAT_MS;
        const uint32_t silent_max = m->evict_ms ? m->evict_ms : PMC_FTAR_DEFAULT_EVICT_MS;
        pthread_mutex_unlock(&m->lock);
        if (stopping) break;
        if (!connected) {
            if (join(m) != 0) { /* the coordinator may be restarting: try again soon */
                struct pollfd p = {.fd = m->wake_fd, .events = POLLIN};
                poll(&p, 1, 100);
                continue;
            }
            next_beat = 0;
            continue;
        }
        const int64_t now = pmc_ftar_now_ms();
        if (now >= next_beat) {
            if (pmc_member_send(m, PMC_FTAR_HEARTBEAT, 0, 0, NULL, 0) != PMC_IO_OK) {
                disconnect(m, "heartbeat could not be sent");
                continue;
            }
            next_beat = now + hb;
        }
        struct pollfd p[2] = {{.fd = m->ctrl.fd, .events = POLLIN}, {.fd = m->wake_fd, .events = POLLIN}};
        const int64_t wait = next_beat - pmc_ftar_now_ms();
        const int n = poll(p, 2, wait < 0 ? 0 : (int)wait);
        if (n < 0 && errno != EINTR) { /* cannot happen with valid descriptors; say so rather than fall silent */
            pmc_member_log(m, "control thread: poll failed (%s): dropping the link and retrying", strerror(errno));
            disconnect(m, "poll failed");
            continue;
        }
        if (n > 0 && p[0].revents) {
            int rc = pmc_conn_pump(&m->ctrl);
            pmc_ftar_header h;
            const uint8_t *payload = NULL;
            int bad = 0;
            while (!bad && pmc_conn_next(&m->ctrl, &h, &payload) == PMC_IO_OK) bad = dispatch(m, &h, payload) != 0;
            pthread_mutex_lock(&m->lock);
            ++m->frames_filed;
            pthread_cond_broadcast(&m->cond);
            pthread_mutex_unlock(&m->lock);
            if (bad || pmc_conn_next(&m->ctrl, &h, &payload) == PMC_IO_BAD_FRAME) {
                disconnect(m, "the coordinator sent a bad frame");
                continue;
            }
            if (rc != PMC_IO_OK) {
                disconnect(m, pmc_io_strerror(rc));
                continue;
            }
        }
        /* Judged after reading what is there: a member resuming from SIGSTOP
         * must first see the FENCED notice waiting in its socket. */
        if (pmc_ftar_now_ms() - m->ctrl.last_recv_ms > (int64_t)silent_max) disconnect(m, "the coordinator went silent");
    }
    return NULL;
}
