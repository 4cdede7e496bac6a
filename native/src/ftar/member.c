/* FTAR member API: quorum per step, the ring of the epoch, votes.
 *
 * Every operation runs in the epoch of the last quorum. The ring's
 * connections are made on the epoch's first allreduce (each member dials its
 * right neighbour; the acceptor thread hands over the left neighbour's) and
 * kept while the epoch lasts; any failure closes them, tells the
 * coordinator (which aborts the epoch for everyone) and the next quorum
 * starts a new epoch. Nothing here blocks without a deadline, and every
 * ring wait also watches abort_fd.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "member.h"
#include "proto.h"

#define FAIL(m, status, ...) (snprintf((m)->msg, sizeof((m)->msg), __VA_ARGS__), (status))

void pmc_cond_wait_slice(pthread_cond_t *cond, pthread_mutex_t *lock, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cond, lock, &ts);
}

static int64_t deadline_of(const pmc_ftar_member *m) { return pmc_ftar_now_ms() + m->timeout_ms; }

const char *pmc_ftar_status_name(int status)
{
    switch (status) {
    case PMC_FTAR_ST_OK: return "OK";
    case PMC_FTAR_ST_ABORTED: return "ABORTED";
    case PMC_FTAR_ST_TIMEOUT: return "TIMEOUT";
    case PMC_FTAR_ST_FENCED: return "FENCED";
    case PMC_FTAR_ST_TOO_FEW: return "TOO_FEW";
    case PMC_FTAR_ST_COORDINATOR_LOST: return "COORDINATOR_LOST";
    case PMC_FTAR_ST_ERROR: return "ERROR";
    default: return "UNKNOWN";
    }
}

void pmc_ftar_free(void *p) { free(p); }

const char *pmc_ftar_member_message(pmc_ftar_member *m) { return m ? m->msg : "no member"; }

int64_t pmc_ftar_member_committed_step(pmc_ftar_member *m)
{
    pthread_mutex_lock(&m->lock);
    const int64_t s = m->committed_step;
    pthread_mutex_unlock(&m->lock);
    return s;
}

void pmc_ftar_member_set_committed_step(pmc_ftar_member *m, int64_t step)
{
    pthread_mutex_lock(&m->lock);
    m->committed_step = step;
    /* The state is named by its step and the epoch that committed it: known
     * for the last commit seen while catching up and for the fetched snapshot. */
    if (step >= 0 && step == m->healing_commit_step) m->committed_epoch = m->healing_commit_epoch;
    else if (step >= 0 && step == m->fetched_step) m->committed_epoch = m->fetched_epoch;
    else m->committed_epoch = 0;
    pthread_mutex_unlock(&m->lock);
}

static void close_ring(pmc_ftar_member *m)
{
    for (uint32_t s = 0; s < PMC_MAX_STREAMS; ++s) {
        if (m->send[s].fd >= 0) close(m->send[s].fd);
        if (m->recv[s].fd >= 0) close(m->recv[s].fd);
        m->send[s].fd = m->recv[s].fd = -1;
    }
    m->ring_ready = 0;
}

static void stop_threads(pmc_ftar_member *m)
{
    pthread_mutex_lock(&m->lock);
    m->stopping = 1;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_lock(&m->state_lock);
    pthread_cond_broadcast(&m->state_cond);
    pthread_mutex_unlock(&m->state_lock);
    pmc_member_signal(m->wake_fd);
    if (m->threads_started > 0) pthread_join(m->control_thread, NULL);
    if (m->threads_started > 1) pthread_join(m->accept_thread, NULL);
    m->threads_started = 0;
    /* Transfers hold references to m: wait for them to see `stopping`. */
    pthread_mutex_lock(&m->state_lock);
    while (m->transfers > 0) pmc_cond_wait_slice(&m->state_cond, &m->state_lock, 50);
    pthread_mutex_unlock(&m->state_lock);
}

void pmc_ftar_member_destroy(pmc_ftar_member *m)
{
    if (m == NULL) return;
    stop_threads(m);
    close_ring(m);
    pmc_conn_close(&m->ctrl);
    for (int i = 0; i < m->n_ring_in; ++i) close(m->ring_in[i].fd);
    if (m->listen_fd >= 0) close(m->listen_fd);
    if (m->abort_fd >= 0) close(m->abort_fd);
    if (m->wake_fd >= 0) close(m->wake_fd);
    pmc_snapshot_release(m, m->snapshot); /* stopping: freed, not kept */
    if (m->spare != NULL) {
        free(m->spare->data);
        free(m->spare);
    }
    free(m->quorum.peers);
    free(m->peers);
    free(m->scratch);
    if (m->token != NULL) memset(m->token, 0, m->tokenlen);
    free(m->token);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->send_lock);
    pthread_mutex_destroy(&m->ring_lock);
    pthread_mutex_destroy(&m->state_lock);
    pthread_cond_destroy(&m->cond);
    pthread_cond_destroy(&m->ring_cond);
    pthread_cond_destroy(&m->state_cond);
    free(m);
}

int pmc_ftar_member_create(const pmc_ftar_member_config *cfg, pmc_ftar_member **out, char *msg, size_t msgcap)
{
#define REFUSE(...) do { if (msg && msgcap) snprintf(msg, msgcap, __VA_ARGS__); return PMC_FTAR_ST_ERROR; } while (0)
    if (out == NULL || cfg == NULL) REFUSE("member: no configuration");
    *out = NULL;
    if (cfg->token == NULL || cfg->tokenlen == 0) REFUSE("token: empty; set PYMCOLL_FTAR_TOKEN or pass token=");
    if (!pmc_replica_id_valid(cfg->replica_id))
        REFUSE("replica_id '%s': use 1 to 63 characters of A-Z a-z 0-9 . _ -", cfg->replica_id ? cfg->replica_id : "");
    if (cfg->coordinator == NULL || strlen(cfg->coordinator) >= PMC_FTAR_ADDR_BYTES)
        REFUSE("coordinator: give HOST:PORT");
    if (cfg->streams < 1 || cfg->streams > PMC_MAX_STREAMS) REFUSE("streams=%u: use 1 to %d", cfg->streams, PMC_MAX_STREAMS);
    if (cfg->chunk_bytes != 0 && cfg->chunk_bytes < 1024) REFUSE("chunk_bytes=%u: use at least 1024", cfg->chunk_bytes);
    pmc_fault fault;
    char why[PMC_FTAR_MESSAGE_BYTES];
    if (pmc_fault_parse(cfg->fault, &fault, why, sizeof(why)) != 0) REFUSE("%s", why);
    char probe[PMC_FTAR_MESSAGE_BYTES] = "";
    uint8_t addrbuf[128];
    uint32_t addrlen = 0;
    if (pmc_addr_resolve(cfg->coordinator, addrbuf, &addrlen, probe, sizeof(probe)) != PMC_IO_OK)
        REFUSE("coordinator: %s", probe);

    pmc_ftar_member *m = calloc(1, sizeof(*m));
    if (m == NULL) REFUSE("member: out of memory");
    m->listen_fd = m->abort_fd = m->wake_fd = -1;
    m->ctrl.fd = -1;
    for (uint32_t s = 0; s < PMC_MAX_STREAMS; ++s) m->send[s].fd = m->recv[s].fd = -1;
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->send_lock, NULL);
    pthread_mutex_init(&m->ring_lock, NULL);
    pthread_mutex_init(&m->state_lock, NULL);
    pthread_cond_init(&m->cond, NULL);
    pthread_cond_init(&m->ring_cond, NULL);
    pthread_cond_init(&m->state_cond, NULL);
    snprintf(m->coordinator, sizeof(m->coordinator), "%s", cfg->coordinator);
    snprintf(m->id, sizeof(m->id), "%s", cfg->replica_id);
    m->token = malloc(cfg->tokenlen);
    m->tokenlen = cfg->tokenlen;
    m->streams = cfg->streams;
    m->chunk_bytes = cfg->chunk_bytes ? cfg->chunk_bytes : PMC_FTAR_DEFAULT_CHUNK_BYTES;
    m->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 30000;
    m->integrity = cfg->integrity != 0;
    m->log_fd = cfg->log_fd;
    m->fault = fault;
    m->committed_step = cfg->committed_step;
    m->healing_commit_step = m->fetched_step = -1;
    m->epoch = UINT64_MAX; /* no epoch yet */
    m->current_epoch = UINT64_MAX;
    m->aborted_epoch = UINT64_MAX;
    if (m->token == NULL) {
        pmc_ftar_member_destroy(m);
        REFUSE("member: out of memory");
    }
    memcpy(m->token, cfg->token, cfg->tokenlen);
    m->abort_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    m->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    char bind_addr[PMC_FTAR_ADDR_BYTES];
    const char *host = cfg->bind_host && cfg->bind_host[0] ? cfg->bind_host : "127.0.0.1";
    snprintf(bind_addr, sizeof(bind_addr), strchr(host, ':') ? "[%s]:0" : "%s:0", host);
    if (m->abort_fd < 0 || m->wake_fd < 0 ||
        pmc_listen(bind_addr, &m->listen_fd, m->listen_addr, sizeof(m->listen_addr), why, sizeof(why)) != PMC_IO_OK) {
        pmc_ftar_member_destroy(m);
        REFUSE("bind_host '%s': %s", host, why);
    }
    if (pthread_create(&m->control_thread, NULL, pmc_member_control_main, m) != 0) {
        pmc_ftar_member_destroy(m);
        REFUSE("member: cannot start the control thread");
    }
    m->threads_started = 1;
    if (pthread_create(&m->accept_thread, NULL, pmc_member_accept_main, m) != 0) {
        pmc_ftar_member_destroy(m);
        REFUSE("member: cannot start the acceptor thread");
    }
    m->threads_started = 2;
    pmc_member_log(m, "listening on %s, coordinator %s", m->listen_addr, m->coordinator);
    *out = m;
    return PMC_FTAR_ST_OK;
#undef REFUSE
}

/* Waits until the control thread is connected; 0 if it is by the deadline. */
static int wait_connected(pmc_ftar_member *m, int64_t deadline)
{
    while (!m->connected && !m->stopping && pmc_ftar_now_ms() < deadline)
        pmc_cond_wait_slice(&m->cond, &m->lock, 50);
    return m->connected ? 0 : -1;
}

/* Adopts a quorum: a new epoch or member list closes the old ring. */
static int adopt(pmc_ftar_member *m, const pmc_quorum *q)
{
    int same = m->peers != NULL && q->epoch == m->epoch && q->n == m->n && q->index == m->index;
    for (uint32_t i = 0; same && i < q->n; ++i)
        same = strcmp(q->peers[i].id, m->peers[i].id) == 0 && strcmp(q->peers[i].ring_addr, m->peers[i].ring_addr) == 0;
    pmc_peer *peers = malloc(sizeof(pmc_peer) * q->n);
    if (peers == NULL) return -1;
    memcpy(peers, q->peers, sizeof(pmc_peer) * q->n);
    free(m->peers);
    m->peers = peers;
    if (!same) {
        close_ring(m);
        m->op = 0;
    }
    m->epoch = q->epoch;
    m->step = q->step;
    m->n = q->n;
    m->index = q->index;
    m->healing = peers[q->index].healing;
    return 0;
}

int pmc_ftar_member_begin_step(pmc_ftar_member *m, int64_t step, pmc_ftar_step_info *info)
{
    if (m == NULL || info == NULL) return PMC_FTAR_ST_ERROR;
    memset(info, 0, sizeof(*info));
    const int64_t deadline = deadline_of(m);
    pthread_mutex_lock(&m->lock);
    int status = PMC_FTAR_ST_OK;
    uint64_t sent_generation = 0;
    m->in_quorum = 0;
    /* A quorum that arrived after an earlier begin_step gave up answers the
     * request still pending at the coordinator: it is taken as it is. */
    if (m->have_quorum) sent_generation = m->generation;
    for (;;) {
        if (m->have_quorum) break;
        if (wait_connected(m, deadline) != 0) {
            status = FAIL(m, PMC_FTAR_ST_COORDINATOR_LOST, "begin_step(%" PRId64 "): no coordinator at %.60s (%.120s)",
                          step, m->coordinator, m->join_error[0] ? m->join_error : "not reachable");
            break;
        }
        if (sent_generation != m->generation) { /* (re)send after every reconnection */
            sent_generation = m->generation;
            uint8_t buf[24];
            pmc_wr w;
            pmc_wr_init(&w, buf, sizeof(buf));
            pmc_wr_i64(&w, step);
            pmc_wr_i64(&w, m->committed_step);
            pmc_wr_u64(&w, m->committed_epoch);
            pthread_mutex_unlock(&m->lock);
            const int rc = pmc_member_send(m, PMC_FTAR_QUORUM, 0, (uint64_t)step, buf, (uint32_t)w.len);
            pthread_mutex_lock(&m->lock);
            if (rc != PMC_IO_OK) continue; /* the link dropped: wait for the next one */
        }
        if (pmc_ftar_now_ms() >= deadline) {
            status = FAIL(m, PMC_FTAR_ST_TOO_FEW, "begin_step(%" PRId64 "): no quorum within %u ms (too few replicas?)",
                          step, m->timeout_ms);
            break;
        }
        pmc_cond_wait_slice(&m->cond, &m->lock, 50);
    }
    if (status == PMC_FTAR_ST_OK && m->quorum.status != PMC_FTAR_ST_OK) {
        status = (int)m->quorum.status;
        snprintf(m->msg, sizeof(m->msg), "begin_step(%" PRId64 "): the coordinator answered %s", step,
                 pmc_ftar_status_name(status));
    }
    if (status == PMC_FTAR_ST_OK) {
        m->have_quorum = 0; /* consumed */
        if (adopt(m, &m->quorum) != 0) {
            status = FAIL(m, PMC_FTAR_ST_ERROR, "begin_step: out of memory");
        } else {
            if (m->quorum_fences == m->fences) m->fenced = 0; /* a fence after this quorum still holds */
            m->in_quorum = 1;
            const int32_t donor = m->peers[m->index].donor;
            snprintf(m->donor_at_quorum, sizeof(m->donor_at_quorum), "%s",
                     donor >= 0 ? m->peers[donor].state_addr : "");
            m->donor_index_at_quorum = donor;
            m->current_epoch = m->epoch;
            m->last_epoch = m->epoch;
            pmc_member_drain(m->abort_fd); /* aborts of earlier epochs are spent */
            if (m->aborted_epoch == m->epoch) pmc_member_signal(m->abort_fd);
        }
    }
    pthread_mutex_unlock(&m->lock);
    info->status = status;
    if (status != PMC_FTAR_ST_OK) return status;
    info->epoch = m->epoch;
    info->step = m->step;
    info->n_members = m->n;
    info->index = m->index;
    info->healing = m->healing;
    uint32_t healing = 0;
    for (uint32_t i = 0; i < m->n; ++i) healing += m->peers[i].healing != 0;
    info->n_healing = healing;
    info->serve_state = healing > 0 && !m->healing;
    return status;
}

/* Tells the coordinator this member saw the epoch fail, so that it aborts
 * everyone's operation at once rather than letting them time out. */
static void report_failure(pmc_ftar_member *m, int status, const char *reason)
{
    uint8_t buf[300];
    pmc_wr w;
    pmc_wr_init(&w, buf, sizeof(buf));
    pmc_wr_u32(&w, (uint32_t)status);
    char r[PMC_PROTO_STR_MAX + 1];
    snprintf(r, sizeof(r), "%s", reason);
    pmc_wr_str(&w, r);
    (void)pmc_member_send(m, PMC_FTAR_ABORT, m->epoch, (uint64_t)m->step, buf, (uint32_t)w.len);
    pmc_member_log(m, "epoch %" PRIu64 " step %" PRId64 " failed: %s", m->epoch, m->step, reason);
}

/* Takes the left neighbour's stream s of this epoch from the acceptor's queue. */
static int take_left(pmc_ftar_member *m, uint32_t s, const char *left, int64_t deadline)
{
    pthread_mutex_lock(&m->ring_lock);
    int found = -1;
    for (;;) {
        for (int i = 0; i < m->n_ring_in; ++i) {
            pmc_ring_in *in = &m->ring_in[i];
            if (in->epoch < m->epoch && in->epoch != UINT64_MAX) { /* stale: a former epoch's */
                close(in->fd);
                *in = m->ring_in[--m->n_ring_in];
                --i;
                continue;
            }
            if (in->epoch == m->epoch && in->stream == s && strcmp(in->from, left) == 0) {
                found = in->fd;
                m->recv[s].fd = in->fd;
                memcpy(m->recv[s].key, in->key, sizeof(in->key));
                m->recv[s].seq = 0;
                *in = m->ring_in[--m->n_ring_in];
                break;
            }
        }
        if (found >= 0) break;
        pthread_mutex_lock(&m->lock);
        const int aborted = m->aborted_epoch == m->epoch || m->fenced || m->stopping;
        pthread_mutex_unlock(&m->lock);
        if (aborted || pmc_ftar_now_ms() >= deadline) break;
        pmc_cond_wait_slice(&m->ring_cond, &m->ring_lock, 20);
    }
    pthread_mutex_unlock(&m->ring_lock);
    return found >= 0 ? 0 : -1;
}

static int open_ring(pmc_ftar_member *m, int64_t deadline)
{
    const pmc_peer *right = &m->peers[(m->index + 1) % m->n];
    const pmc_peer *left = &m->peers[(m->index + m->n - 1) % m->n];
    for (uint32_t s = 0; s < m->streams; ++s) {
        int fd = -1;
        char why[PMC_FTAR_MESSAGE_BYTES];
        int rc = pmc_connect(right->ring_addr, deadline, &fd, why, sizeof(why));
        if (rc != PMC_IO_OK) return FAIL(m, rc == PMC_IO_TIMEOUT ? PMC_FTAR_ST_TIMEOUT : PMC_FTAR_ST_ABORTED,
                                         "ring: cannot reach %s: %.150s", right->id, why);
        pmc_socket_tune(fd, 1);
        pmc_conn c;
        pmc_conn_init(&c, fd, m->index);
        char identity[PMC_CONN_IDENTITY_BYTES];
        snprintf(identity, sizeof(identity), "ring:%s:%" PRIu64 ":%u", m->id, m->epoch, s);
        rc = pmc_conn_handshake_client(&c, m->token, m->tokenlen, identity, deadline);
        if (rc != PMC_IO_OK) {
            pmc_conn_close(&c);
            return FAIL(m, rc == PMC_IO_TIMEOUT ? PMC_FTAR_ST_TIMEOUT : PMC_FTAR_ST_ABORTED,
                        "ring: handshake with %s failed: %s", right->id, pmc_io_strerror(rc));
        }
        m->send[s].fd = c.fd;
        memcpy(m->send[s].key, c.key_tx, sizeof(c.key_tx));
        m->send[s].seq = 0;
        c.fd = -1;
        pmc_conn_close(&c);
    }
    for (uint32_t s = 0; s < m->streams; ++s)
        if (take_left(m, s, left->id, deadline) != 0) {
            pthread_mutex_lock(&m->lock);
            const int aborted = m->aborted_epoch == m->epoch;
            const int fenced = m->fenced;
            pthread_mutex_unlock(&m->lock);
            if (fenced) return FAIL(m, PMC_FTAR_ST_FENCED, "ring: fenced by the coordinator");
            return FAIL(m, aborted ? PMC_FTAR_ST_ABORTED : PMC_FTAR_ST_TIMEOUT,
                        "ring: %s did not connect (stream %u)", left->id, s);
        }
    m->ring_ready = 1;
    return PMC_FTAR_ST_OK;
}

/* A ring that fails has often been told why already (a fence after a
 * SIGSTOP, an abort): when the coordinator's link holds unread bytes, the
 * control thread gets a moment to file them, so the status says the cause. */
static void settle_control(pmc_ftar_member *m)
{
    pthread_mutex_lock(&m->send_lock);
    struct pollfd p = {.fd = m->ctrl.fd, .events = POLLIN};
    const int unread = p.fd >= 0 && poll(&p, 1, 0) > 0;
    pthread_mutex_unlock(&m->send_lock);
    if (!unread) return;
    const int64_t until = pmc_ftar_now_ms() + 100;
    pthread_mutex_lock(&m->lock);
    const uint64_t seen = m->frames_filed;
    while (m->frames_filed == seen && m->connected && pmc_ftar_now_ms() < until)
        pmc_cond_wait_slice(&m->cond, &m->lock, 10);
    pthread_mutex_unlock(&m->lock);
}

static void ring_fault(void *arg, int point)
{
    pmc_ftar_member *m = arg;
    pmc_member_fault(m, point == PMC_RING_AT_REDUCE_SCATTER ? PMC_FAULT_REDUCE_SCATTER : PMC_FAULT_ALLGATHER, m->step);
}

int pmc_ftar_member_allreduce(pmc_ftar_member *m, const void *in, void *out, size_t count, int dtype, int op,
                              int contribute, pmc_ftar_result *res)
{
    if (m == NULL || res == NULL) return PMC_FTAR_ST_ERROR;
    memset(res, 0, sizeof(*res));
    res->epoch = m->epoch;
    const size_t es = pmc_ftar_dtype_size(dtype);
    if (es == 0) return res->status = FAIL(m, PMC_FTAR_ST_ERROR, "allreduce: unknown dtype %d", dtype);
    if (op < 0 || op >= PMC_FTAR_OP_COUNT) return res->status = FAIL(m, PMC_FTAR_ST_ERROR, "allreduce: unknown op %d", op);
    if (count > 0 && (in == NULL || out == NULL))
        return res->status = FAIL(m, PMC_FTAR_ST_ERROR, "allreduce: NULL buffer");
    if (count > 0 && (const char *)in < (const char *)out + count * es && (const char *)out < (const char *)in + count * es)
        return res->status = FAIL(m, PMC_FTAR_ST_ERROR, "allreduce: out overlaps the input (the call is out of place)");
    if (m->peers == NULL || !m->in_quorum)
        return res->status = FAIL(m, PMC_FTAR_ST_ERROR, "allreduce: call begin_step first (and until it returns OK)");
    pthread_mutex_lock(&m->lock);
    const int fenced = m->fenced, aborted = m->aborted_epoch == m->epoch;
    pthread_mutex_unlock(&m->lock);
    if (fenced) return res->status = FAIL(m, PMC_FTAR_ST_FENCED, "allreduce: fenced by the coordinator; begin_step again");
    if (aborted) return res->status = FAIL(m, PMC_FTAR_ST_ABORTED, "allreduce: epoch %" PRIu64 " was aborted", m->epoch);
    const int64_t deadline = deadline_of(m);
    if (m->n == 1) {
        if (count > 0) {
            if (contribute) memcpy(out, in, count * es);
            else memset(out, 0, count * es);
        }
        res->n_contrib = contribute != 0;
        return res->status = PMC_FTAR_ST_OK;
    }
    if (!m->ring_ready) {
        const int st = open_ring(m, deadline);
        if (st != PMC_FTAR_ST_OK) {
            close_ring(m);
            if (st != PMC_FTAR_ST_FENCED) report_failure(m, st, m->msg);
            return res->status = st;
        }
    }
    pmc_ring_args a = {
        .n = m->n, .index = m->index, .streams = m->streams, .send = m->send, .recv = m->recv,
        .abort_fd = m->abort_fd, .deadline_ms = deadline, .epoch = m->epoch, .op = m->op++,
        .chunk_bytes = m->chunk_bytes, .integrity = m->integrity, .fault = m->fault.point ? ring_fault : NULL,
        .fault_arg = m, .scratch = &m->scratch, .scratch_bytes = &m->scratch_bytes,
    };
    const int rc = pmc_ring_allreduce(&a, in, out, count, dtype, op, contribute, &res->n_contrib);
    if (rc == PMC_RING_OK) return res->status = PMC_FTAR_ST_OK;
    close_ring(m);
    settle_control(m);
    pthread_mutex_lock(&m->lock);
    const int now_fenced = m->fenced;
    pthread_mutex_unlock(&m->lock);
    if (now_fenced) return res->status = FAIL(m, PMC_FTAR_ST_FENCED, "allreduce: fenced by the coordinator");
    if (rc == PMC_RING_ABORTED) return res->status = FAIL(m, PMC_FTAR_ST_ABORTED, "allreduce: aborted by the coordinator");
    if (rc == PMC_RING_NO_MEMORY || rc == PMC_RING_BAD_ARG)
        return res->status = FAIL(m, PMC_FTAR_ST_ERROR, "allreduce: %s", pmc_ring_strerror(rc));
    const int st = rc == PMC_RING_TIMEOUT ? PMC_FTAR_ST_TIMEOUT : PMC_FTAR_ST_ABORTED;
    FAIL(m, st, "allreduce: %s", pmc_ring_strerror(rc));
    report_failure(m, st, m->msg);
    return res->status = st;
}

int pmc_ftar_member_commit(pmc_ftar_member *m, int64_t step, int ok)
{
    if (m == NULL) return PMC_FTAR_ST_ERROR;
    if (m->peers == NULL || !m->in_quorum)
        return FAIL(m, PMC_FTAR_ST_ERROR, "commit: call begin_step first (and until it returns OK)");
    pmc_member_fault(m, PMC_FAULT_VOTE, step);
    const int64_t deadline = deadline_of(m);
    uint8_t vote = ok ? 1 : 0;
    pthread_mutex_lock(&m->lock);
    int status = PMC_FTAR_ST_OK;
    uint64_t sent_generation = 0;
    m->have_decision = 0;
    for (;;) {
        /* The decision first: a COMMIT that came before a fence stands. */
        if (m->have_decision && m->decision_epoch == m->epoch && m->decision_step == step) {
            status = m->decision_commit ? PMC_FTAR_ST_OK : (int)m->decision_status;
            if (!m->decision_commit)
                snprintf(m->msg, sizeof(m->msg), "commit(%" PRId64 "): aborted: %.200s", step, m->decision_reason);
            break;
        }
        if (m->fenced) {
            status = FAIL(m, PMC_FTAR_ST_FENCED, "commit(%" PRId64 "): fenced by the coordinator", step);
            break;
        }
        if (m->connected && sent_generation != m->generation) {
            sent_generation = m->generation;
            pthread_mutex_unlock(&m->lock);
            const int rc = pmc_member_send(m, PMC_FTAR_VOTE, m->epoch, (uint64_t)step, &vote, 1);
            pthread_mutex_lock(&m->lock);
            if (rc != PMC_IO_OK) continue;
        }
        if (pmc_ftar_now_ms() >= deadline) {
            status = m->connected ? FAIL(m, PMC_FTAR_ST_TIMEOUT, "commit(%" PRId64 "): no decision in time", step)
                                  : FAIL(m, PMC_FTAR_ST_COORDINATOR_LOST,
                                         "commit(%" PRId64 "): no coordinator, so no decision: the step is not applied",
                                         step);
            break;
        }
        pmc_cond_wait_slice(&m->cond, &m->lock, 20);
    }
    if (status == PMC_FTAR_ST_OK && !m->healing) {
        m->committed_step = step;
        m->committed_epoch = m->epoch;
    } else if (status == PMC_FTAR_ST_OK) {
        m->healing_commit_step = step;
        m->healing_commit_epoch = m->epoch;
    }
    pthread_mutex_unlock(&m->lock);
    if (status == PMC_FTAR_ST_OK) pmc_member_fault(m, PMC_FAULT_COMMIT, step);
    return status;
}
