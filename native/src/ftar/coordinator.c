/* FTAR coordinator: membership, per-step quorums, epochs and commit
 * decisions for the replicas of a job; it never carries tensor data.
 *
 * One thread runs one poll() loop over the listener, a stop pipe and every
 * connection. Members are soft state, rebuilt from their JOINs after a
 * restart, so the coordinator can be restarted without the job.
 *
 * Order of frames on a member's connection (payloads in proto.h):
 *   HELLO, AUTH, AUTH_OK (conn.c); the member's first frame then is JOIN, and
 *   the coordinator's first is the JOIN welcome (no HEARTBEAT comes before
 *   it). After that, HEARTBEATs both ways at any time, and rounds of
 *   QUORUM -> QUORUM, VOTE (or ABORT, a failure report) -> COMMIT or ABORT,
 *   with DONOR -> DONOR whenever. An ABORT also comes unasked when another
 *   member of the quorum fails, and an ABORT with status FENCED when this
 *   member is evicted (its connection is then closed). Welcome and HEARTBEAT
 *   headers carry the current epoch and the group's committed step.
 *
 * A failure (a member lost, evicted, replaced, a vote not ok, a reported
 * failure) aborts the undecided quorum at once, and the next quorum starts a
 * new epoch. Lost members are handled in reap(), outside of any loop over
 * the connections, because handling one loss may send frames that fail.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "proto.h"
#include "pymcoll_ftar.h"

enum {
    ID_BYTES = 64,              /* replica ids are 1..63 bytes */
    FROM_BYTES = 64,            /* "[v6]:port" of a peer, for logs */
    REASON_BYTES = 200,
    AUTH_WINDOW_MS = 2000,      /* a connection must authenticate this fast */
    SEND_DEADLINE_MS = 200,     /* one slow member must not stall everyone for long */
    FENCE_DEADLINE_MS = 50,     /* best effort: the evicted member may be stuck */
    MAX_CONNECTIONS = 1024,     /* bounds what strangers can make us hold */
    MAX_UNAUTHENTICATED = 64,   /* connections still in the handshake; the oldest gives way */
    MAX_MEMBERS = 192,          /* a QUORUM payload of this many fits a control frame */
    ACCEPT_PAUSE_MS = 100       /* out of descriptors: let some close first */
};

enum { PH_HANDSHAKE, PH_AUTHED, PH_MEMBER, PH_FREE };

typedef struct peer {
    pmc_conn conn;
    uint64_t serial;            /* unique per connection: a replaced member's slot is not its successor's */
    int phase;
    int dead;                   /* to be handled by reap() */
    int evicted;
    char reason[REASON_BYTES];
    char from[FROM_BYTES];
    int64_t accepted_ms;
    char id[ID_BYTES];
    char ring_addr[PMC_FTAR_ADDR_BYTES];
    char state_addr[PMC_FTAR_ADDR_BYTES];
    int64_t committed;          /* from JOIN, QUORUM requests and commits */
    uint64_t committed_epoch;   /* the epoch that committed it: (step, epoch) names a state */
    uint64_t last_epoch;        /* from JOIN */
    int pending;                /* a QUORUM request waits */
    int64_t asked_step;
    int64_t asked_ms;
} peer;

typedef struct qslot {
    char id[ID_BYTES];
    uint64_t serial;
    int healing;
    int32_t donor;
    int voted;
} qslot;

struct pmc_ftar_coord {
    uint8_t *token;
    size_t tokenlen;
    uint32_t min_replicas, heartbeat_ms, evict_ms, join_timeout_ms;
    int log_fd;
    int listen_fd;
    int stop_rd, stop_wr;
    uint64_t incarnation;

    peer **peers;
    size_t npeers, cappeers;
    uint64_t next_serial;
    struct pollfd *pfds;        /* poll set, rebuilt each round */
    peer **polled;              /* peers[i] behind pfds[2 + i] */
    size_t cappoll;
    uint8_t *scratch;           /* one control payload */
    peer **order;               /* [MAX_MEMBERS]: a quorum's members in ring order */

    int64_t group_step;         /* G: the group's committed step (-1: nothing known) */
    uint64_t group_epoch;       /* the epoch that committed G (0: initial or a checkpoint) */
    int64_t started_ms;         /* a restarted coordinator waits for reconnections before its first quorum */
    uint64_t epoch;
    uint64_t max_join_epoch;    /* highest last_epoch any JOIN reported */
    int failure;                /* since the last quorum: the next one starts a new epoch */

    char (*prev)[ID_BYTES];     /* ids of the last formed quorum, minus members lost since */
    size_t nprev;

    int have_quorum;            /* q* describe the active or last quorum */
    int undecided;
    uint64_t q_epoch;
    int64_t q_step;
    uint32_t q_n;
    qslot *q;
    uint32_t donor_rr;

    int have_decision;          /* the last decided (epoch, step) and its outcome */
    uint64_t d_epoch;
    int64_t d_step;
    int d_commit;
    char d_reason[REASON_BYTES];

    int64_t next_hb_ms;
    int64_t accept_paused_until;
};

#define SET_MSG(...) do { if (msg != NULL && msgcap > 0) snprintf(msg, msgcap, __VA_ARGS__); } while (0)

static void logf_line(pmc_ftar_coord *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One write per line, so lines from concurrent writers to the same file do not interleave. */
static void logf_line(pmc_ftar_coord *c, const char *fmt, ...)
{
    if (c->log_fd < 0) return;
    char line[1024];
    int n = snprintf(line, sizeof(line), "ftar-coordinator: ");
    va_list ap;
    va_start(ap, fmt);
    const int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m > 0 ? (size_t)m : 0);
    if (len > sizeof(line) - 2) len = sizeof(line) - 2; /* truncated: keep the newline */
    line[len++] = '\n';
    const char *p = line;
    size_t left = len;
    while (left > 0) {
        const ssize_t w = write(c->log_fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        left -= (size_t)w;
    }
}

/* Text from the wire goes into logs and frames printable only. */
static void printable(char *out, size_t cap, const char *in)
{
    size_t i = 0;
    for (; in[i] != '\0' && i + 1 < cap; ++i) {
        const unsigned char ch = (unsigned char)in[i];
        out[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    out[i] = '\0';
}

/* Addresses from the wire are passed on to other members and logged. */
static int is_printable(const char *s)
{
    for (; *s != '\0'; ++s)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f) return 0;
    return 1;
}

static void format_peer(int fd, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char host[INET6_ADDRSTRLEN] = "?";
    snprintf(out, cap, "?");
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) return;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        snprintf(out, cap, "%s:%u", host, (unsigned)ntohs(a->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        snprintf(out, cap, "[%s]:%u", host, (unsigned)ntohs(a->sin6_port));
    }
}

/* ---- peers ----------------------------------------------------------- */

static int alive(const peer *p) { return p->phase != PH_FREE && !p->dead; }

static void kill_peer(peer *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Marks p lost; reap() closes it and does what its loss means. */
static void kill_peer(peer *p, const char *fmt, ...)
{
    if (!alive(p)) return;
    p->dead = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->reason, sizeof(p->reason), fmt, ap);
    va_end(ap);
}

static peer *find_member(pmc_ftar_coord *c, const char *id)
{
    for (size_t i = 0; i < c->npeers; ++i) {
        peer *p = c->peers[i];
        if (alive(p) && p->phase == PH_MEMBER && strcmp(p->id, id) == 0) return p;
    }
    return NULL;
}

static peer *find_serial(pmc_ftar_coord *c, uint64_t serial)
{
    for (size_t i = 0; i < c->npeers; ++i) {
        peer *p = c->peers[i];
        if (alive(p) && p->serial == serial) return p;
    }
    return NULL;
}

static int send_to(peer *p, int type, uint64_t epoch, int64_t step, const void *payload, uint32_t len)
{
    if (!alive(p)) return PMC_IO_CLOSED;
    const int rc = pmc_conn_send(&p->conn, type, epoch, (uint64_t)step, payload, len,
                                 pmc_ftar_now_ms() + SEND_DEADLINE_MS);
    if (rc != PMC_IO_OK) kill_peer(p, "send failed: %s", pmc_io_strerror(rc));
    return rc;
}

static void send_abort(pmc_ftar_coord *c, peer *p, uint64_t epoch, int64_t step, uint32_t status,
                       const char *reason, int64_t deadline_ms)
{
    pmc_wr w;
    pmc_wr_init(&w, c->scratch, PMC_CONN_MAX_CONTROL);
    pmc_wr_u32(&w, status);
    pmc_wr_str(&w, reason);
    if (deadline_ms > 0) { /* best effort: the failure is not a new loss */
        if (alive(p)) pmc_conn_send(&p->conn, PMC_FTAR_ABORT, epoch, (uint64_t)step, w.p, (uint32_t)w.len,
                                    deadline_ms);
        return;
    }
    send_to(p, PMC_FTAR_ABORT, epoch, step, w.p, (uint32_t)w.len);
}

/* ---- decisions ------------------------------------------------------- */

static qslot *slot_of(pmc_ftar_coord *c, const peer *p)
{
    if (!c->have_quorum) return NULL;
    for (uint32_t k = 0; k < c->q_n; ++k)
        if (c->q[k].serial == p->serial) return &c->q[k];
    return NULL;
}

static void decide_abort(pmc_ftar_coord *c, const char *reason)
{
    if (!c->undecided) return;
    c->undecided = 0;
    c->failure = 1;
    c->have_decision = 1;
    c->d_epoch = c->q_epoch;
    c->d_step = c->q_step;
    c->d_commit = 0;
    printable(c->d_reason, sizeof(c->d_reason), reason);
    logf_line(c, "abort: epoch %llu, step %lld: %s", (unsigned long long)c->q_epoch, (long long)c->q_step,
              c->d_reason);
    /* Every survivor at once: this is what unblocks their ring operations. */
    for (uint32_t k = 0; k < c->q_n; ++k) {
        peer *p = find_serial(c, c->q[k].serial);
        if (p != NULL) send_abort(c, p, c->q_epoch, c->q_step, PMC_FTAR_ST_ABORTED, c->d_reason, 0);
    }
}

static void decide_commit(pmc_ftar_coord *c)
{
    c->undecided = 0;
    c->have_decision = 1;
    c->d_epoch = c->q_epoch;
    c->d_step = c->q_step;
    c->d_commit = 1;
    c->d_reason[0] = '\0';
    c->group_step = c->q_step;
    c->group_epoch = c->q_epoch;
    logf_line(c, "commit: epoch %llu, step %lld, %u members", (unsigned long long)c->q_epoch,
              (long long)c->q_step, c->q_n);
    for (uint32_t k = 0; k < c->q_n; ++k) {
        peer *p = find_serial(c, c->q[k].serial);
        if (p == NULL) continue;
        p->committed = c->q_step;
        p->committed_epoch = c->q_epoch;
        send_to(p, PMC_FTAR_COMMIT, c->q_epoch, c->q_step, NULL, 0);
    }
}

/* A VOTE or ABORT about a quorum that is not the undecided one: the last
 * decision again if it is about that one, else an abort (a coordinator
 * restarted since, or a stranger's epoch). */
static void answer_stale(pmc_ftar_coord *c, peer *p, uint64_t epoch, int64_t step)
{
    if (c->have_decision && epoch == c->d_epoch && step == c->d_step && slot_of(c, p) != NULL) {
        if (c->d_commit) send_to(p, PMC_FTAR_COMMIT, epoch, step, NULL, 0);
        else send_abort(c, p, epoch, step, PMC_FTAR_ST_ABORTED, c->d_reason, 0);
        return;
    }
    send_abort(c, p, epoch, step, PMC_FTAR_ST_ABORTED, "unknown epoch", 0);
}

static void drop_prev(pmc_ftar_coord *c, const char *id)
{
    for (size_t i = 0; i < c->nprev; ++i) {
        if (strcmp(c->prev[i], id) != 0) continue;
        memmove(c->prev[i], c->prev[i + 1], (c->nprev - i - 1) * sizeof(c->prev[0]));
        --c->nprev;
        return;
    }
}

/* Closes every peer marked lost and acts on it; a loss can cause more (a
 * failed ABORT send), hence the loop. Nothing is freed here (see compact). */
static void reap(pmc_ftar_coord *c)
{
    for (int again = 1; again;) {
        again = 0;
        for (size_t i = 0; i < c->npeers; ++i) {
            peer *p = c->peers[i];
            if (p->phase == PH_FREE || !p->dead) continue;
            again = 1;
            const int was_member = p->phase == PH_MEMBER;
            if (was_member)
                logf_line(c, "member %s (%s) %s: %s", p->id, p->from, p->evicted ? "evicted" : "lost",
                          p->reason);
            else
                logf_line(c, "closed connection from %s: %s", p->from, p->reason);
            pmc_conn_close(&p->conn);
            p->phase = PH_FREE;
            if (!was_member) continue;
            c->failure = 1;
            drop_prev(c, p->id);
            if (c->undecided && slot_of(c, p) != NULL) {
                char reason[REASON_BYTES + 96];
                snprintf(reason, sizeof(reason), "member %s %s: %s", p->id, p->evicted ? "evicted" : "lost",
                         p->reason);
                decide_abort(c, reason);
            }
        }
    }
}

/* Frees what reap() closed; never while a loop over c->peers runs. */
static void compact(pmc_ftar_coord *c)
{
    size_t j = 0;
    for (size_t i = 0; i < c->npeers; ++i) {
        if (c->peers[i]->phase == PH_FREE) free(c->peers[i]);
        else c->peers[j++] = c->peers[i];
    }
    c->npeers = j;
}

/* ---- quorum ---------------------------------------------------------- */

static int by_id(const void *a, const void *b)
{
    const peer *const *x = a;
    const peer *const *y = b;
    return strcmp((*x)->id, (*y)->id);
}

/* A state is named by (step, epoch of the commit that made it): two members
 * at the same step with different epochs hold different states (a coordinator
 * lost between its COMMIT messages, a group re-formed without them). */
static int newer(int64_t step, uint64_t epoch, int64_t than_step, uint64_t than_epoch)
{
    return step > than_step || (step == than_step && epoch > than_epoch);
}

/* The group's state: the newest one the coordinator committed or any live
 * member (requester or not) holds. *held_by_requester: whether one of the
 * requesters holds it. */
static void group_state(const pmc_ftar_coord *c, int64_t *step, uint64_t *epoch, int *held_by_requester)
{
    int64_t g = c->group_step;
    uint64_t ge = c->group_epoch;
    for (size_t i = 0; i < c->npeers; ++i) {
        const peer *p = c->peers[i];
        if (alive(p) && p->phase == PH_MEMBER && newer(p->committed, p->committed_epoch, g, ge)) {
            g = p->committed;
            ge = p->committed_epoch;
        }
    }
    int held = 0, held_live = 0;
    for (size_t i = 0; i < c->npeers; ++i) {
        const peer *p = c->peers[i];
        if (!alive(p) || p->phase != PH_MEMBER || p->committed != g || p->committed_epoch != ge) continue;
        held_live = 1;
        held |= p->pending;
    }
    if (!held_live) { /* whoever held it is gone: the newest state a requester holds is the group's */
        int64_t top = INT64_MIN;
        uint64_t top_epoch = 0;
        for (size_t i = 0; i < c->npeers; ++i) {
            const peer *p = c->peers[i];
            if (alive(p) && p->phase == PH_MEMBER && p->pending && newer(p->committed, p->committed_epoch, top, top_epoch)) {
                top = p->committed;
                top_epoch = p->committed_epoch;
            }
        }
        if (top != INT64_MIN) {
            g = top;
            ge = top_epoch;
            held = 1;
        }
    }
    *step = g;
    *epoch = ge;
    *held_by_requester = held;
}

static void form_quorum(pmc_ftar_coord *c)
{
    peer **r = c->order;
    uint32_t n = 0;
    for (size_t i = 0; i < c->npeers && n < MAX_MEMBERS; ++i)
        if (alive(c->peers[i]) && c->peers[i]->phase == PH_MEMBER && c->peers[i]->pending) r[n++] = c->peers[i];
    qsort(r, n, sizeof(*r), by_id);

    int64_t g;
    uint64_t ge;
    int held = 0;
    group_state(c, &g, &ge, &held);
    if (g != c->group_step || ge != c->group_epoch)
        logf_line(c, "the group's state is step %lld of epoch %llu (was step %lld of epoch %llu)", (long long)g,
                  (unsigned long long)ge, (long long)c->group_step, (unsigned long long)c->group_epoch);
    c->group_step = g;
    c->group_epoch = ge;

    int changed = c->failure || n != c->nprev;
    for (uint32_t k = 0; k < n && !changed; ++k) changed = strcmp(r[k]->id, c->prev[k]) != 0;
    if (changed) c->epoch = (c->epoch > c->max_join_epoch ? c->epoch : c->max_join_epoch) + 1;
    c->failure = 0;

    c->have_quorum = 1;
    c->undecided = 1;
    c->q_epoch = c->epoch;
    c->q_step = g + 1;
    c->q_n = n;
    uint32_t n_healing = 0, rr = 0;
    uint32_t healthy_idx[MAX_MEMBERS];
    uint32_t nh = 0;
    for (uint32_t k = 0; k < n; ++k)
        if (r[k]->committed == g && r[k]->committed_epoch == ge) healthy_idx[nh++] = k;
    for (uint32_t k = 0; k < n; ++k) {
        qslot *s = &c->q[k];
        snprintf(s->id, sizeof(s->id), "%s", r[k]->id);
        s->serial = r[k]->serial;
        s->voted = 0;
        s->healing = r[k]->committed != g || r[k]->committed_epoch != ge;
        s->donor = PMC_FTAR_NO_MEMBER;
        if (s->healing) { /* spread the catch-up load over the healthy members */
            s->donor = (int32_t)healthy_idx[rr++ % nh];
            ++n_healing;
        }
        snprintf(c->prev[k], sizeof(c->prev[k]), "%s", r[k]->id);
    }
    c->nprev = n;

    char line[900];
    size_t used = 0;
    line[0] = '\0';
    for (uint32_t k = 0; k < n && used < sizeof(line); ++k) {
        const int m = c->q[k].healing
                          ? snprintf(line + used, sizeof(line) - used, "%s%s (healing from %s)", k ? ", " : "",
                                     c->q[k].id, c->q[c->q[k].donor].id)
                          : snprintf(line + used, sizeof(line) - used, "%s%s", k ? ", " : "", c->q[k].id);
        if (m > 0) used += (size_t)m;
    }
    logf_line(c, "quorum formed: epoch %llu, step %lld, %u members, %u healing: %s", (unsigned long long)c->q_epoch,
              (long long)c->q_step, n, n_healing, line);

    for (uint32_t k = 0; k < n; ++k) {
        pmc_wr w;
        pmc_wr_init(&w, c->scratch, PMC_CONN_MAX_CONTROL);
        pmc_wr_u32(&w, PMC_FTAR_ST_OK);
        pmc_wr_u32(&w, n);
        pmc_wr_u32(&w, k);
        pmc_wr_u32(&w, n_healing);
        for (uint32_t j = 0; j < n; ++j) {
            pmc_wr_u8(&w, (uint8_t)c->q[j].healing);
            pmc_wr_i32(&w, c->q[j].donor);
            pmc_wr_str(&w, r[j]->id);
            pmc_wr_str(&w, r[j]->ring_addr);
            pmc_wr_str(&w, r[j]->state_addr);
        }
        r[k]->pending = 0;
        if (w.overflow) { /* cannot happen below MAX_MEMBERS; refuse rather than send half */
            kill_peer(r[k], "quorum payload too large");
            continue;
        }
        send_to(r[k], PMC_FTAR_QUORUM, c->q_epoch, c->q_step, w.p, (uint32_t)w.len);
    }
}

/* Forms a quorum when (a) every member of the last one still here asks,
 * (b) the oldest request waited join_timeout_ms, or (c) with no last quorum,
 * every member asks; each with at least min_replicas requesters. */
static void try_quorum(pmc_ftar_coord *c, int64_t now)
{
    if (c->undecided) return;
    uint32_t members = 0, r = 0;
    int64_t oldest = INT64_MAX;
    for (size_t i = 0; i < c->npeers; ++i) {
        const peer *p = c->peers[i];
        if (!alive(p) || p->phase != PH_MEMBER) continue;
        ++members;
        if (p->pending) {
            ++r;
            if (p->asked_ms < oldest) oldest = p->asked_ms;
        }
    }
    if (r == 0 || r < c->min_replicas) return;
    int ready;
    if (c->nprev > 0) {
        ready = 1;
        for (size_t i = 0; i < c->nprev && ready; ++i) {
            const peer *p = find_member(c, c->prev[i]);
            if (p != NULL && !p->pending) ready = 0;
        }
    } else {
        ready = r == members;
    }
    if (!ready && now - oldest >= (int64_t)c->join_timeout_ms) ready = 1;
    /* A (re)started coordinator gives every live member a join timeout to
     * reconnect and say what it holds before the first quorum. */
    if (c->nprev == 0 && now - c->started_ms < (int64_t)c->join_timeout_ms) ready = 0;
    if (!ready) return;
    int64_t g;
    uint64_t ge;
    int held = 0;
    group_state(c, &g, &ge, &held);
    if (!held) return; /* the group's state is with a live member that has not asked yet: wait for it */
    form_quorum(c);
}

/* ---- frames ---------------------------------------------------------- */

static void on_auth(pmc_ftar_coord *c, peer *p, const pmc_ftar_header *h, const uint8_t *payload)
{
    if (h->type != PMC_FTAR_AUTH) {
        kill_peer(p, "expected AUTH, got frame type %u", (unsigned)h->type);
        return;
    }
    const int rc = pmc_conn_server_accept(&p->conn, c->token, c->tokenlen, h, payload,
                                          pmc_ftar_now_ms() + SEND_DEADLINE_MS);
    if (rc != PMC_IO_OK) {
        kill_peer(p, "%s", rc == PMC_IO_AUTH ? "authentication failed (wrong token?)" : pmc_io_strerror(rc));
        return;
    }
    static const char prefix[] = "member:";
    const char *id = p->conn.identity + sizeof(prefix) - 1;
    if (strncmp(p->conn.identity, prefix, sizeof(prefix) - 1) != 0 || !pmc_replica_id_valid(id)) {
        char shown[PMC_CONN_IDENTITY_BYTES];
        printable(shown, sizeof(shown), p->conn.identity);
        kill_peer(p, "identity '%s' is not member:<replica id>", shown);
        return;
    }
    snprintf(p->id, sizeof(p->id), "%s", id);
    p->phase = PH_AUTHED;
}

static void on_join(pmc_ftar_coord *c, peer *p, const pmc_ftar_header *h, const uint8_t *payload)
{
    if (h->type != PMC_FTAR_JOIN) {
        kill_peer(p, "expected JOIN, got frame type %u", (unsigned)h->type);
        return;
    }
    pmc_rd r;
    char id[ID_BYTES];
    pmc_rd_init(&r, payload, h->length);
    const int64_t committed = pmc_rd_i64(&r);
    const uint64_t last_epoch = pmc_rd_u64(&r);
    pmc_rd_str(&r, id, sizeof(id));
    pmc_rd_str(&r, p->ring_addr, sizeof(p->ring_addr));
    pmc_rd_str(&r, p->state_addr, sizeof(p->state_addr));
    const uint64_t committed_epoch = pmc_rd_u64(&r);
    if (!pmc_rd_done(&r) || committed < -1 || !is_printable(p->ring_addr) || !is_printable(p->state_addr)) {
        kill_peer(p, "bad JOIN payload");
        return;
    }
    if (strcmp(id, p->id) != 0) {
        char shown[ID_BYTES];
        printable(shown, sizeof(shown), id);
        kill_peer(p, "JOIN for '%s' on the connection of member:%s", shown, p->id);
        return;
    }
    peer *old = find_member(c, p->id);
    if (old != NULL) {
        kill_peer(old, "replaced by a new connection from %s", p->from);
        reap(c); /* its quorum aborts before the new member enters */
    }
    uint32_t members = 0;
    for (size_t i = 0; i < c->npeers; ++i) members += alive(c->peers[i]) && c->peers[i]->phase == PH_MEMBER;
    if (members >= MAX_MEMBERS) {
        kill_peer(p, "too many members (at most %d)", MAX_MEMBERS);
        return;
    }
    p->committed = committed;
    p->committed_epoch = committed_epoch;
    p->last_epoch = last_epoch;
    p->pending = 0;
    p->phase = PH_MEMBER;
    if (last_epoch > c->max_join_epoch) c->max_join_epoch = last_epoch;
    uint8_t welcome[16];
    pmc_wr w;
    pmc_wr_init(&w, welcome, sizeof(welcome));
    pmc_wr_u32(&w, c->heartbeat_ms);
    pmc_wr_u32(&w, c->evict_ms);
    pmc_wr_u64(&w, c->incarnation);
    logf_line(c, "member %s joined from %s (ring %s, state %s, committed step %lld, last epoch %llu)", p->id,
              p->from, p->ring_addr, p->state_addr, (long long)committed, (unsigned long long)last_epoch);
    send_to(p, PMC_FTAR_JOIN, c->epoch, c->group_step, w.p, (uint32_t)w.len);
}

static void on_request(pmc_ftar_coord *c, peer *p, const pmc_ftar_header *h, const uint8_t *payload)
{
    pmc_rd r;
    pmc_rd_init(&r, payload, h->length);
    const int64_t step = pmc_rd_i64(&r);
    const int64_t committed = pmc_rd_i64(&r);
    const uint64_t committed_epoch = pmc_rd_u64(&r);
    if (!pmc_rd_done(&r) || committed < -1) {
        kill_peer(p, "bad QUORUM payload");
        return;
    }
    if (c->undecided && slot_of(c, p) != NULL) { /* it gave up on the quorum it is in */
        char reason[REASON_BYTES];
        snprintf(reason, sizeof(reason), "member %s asked for a new quorum before the decision", p->id);
        decide_abort(c, reason);
    }
    p->committed = committed;
    p->committed_epoch = committed_epoch;
    p->asked_step = step;
    if (!p->pending) {
        p->pending = 1;
        p->asked_ms = pmc_ftar_now_ms();
    }
}

static void on_vote(pmc_ftar_coord *c, peer *p, const pmc_ftar_header *h, const uint8_t *payload)
{
    pmc_rd r;
    pmc_rd_init(&r, payload, h->length);
    const uint8_t ok = pmc_rd_u8(&r);
    if (!pmc_rd_done(&r) || ok > 1) {
        kill_peer(p, "bad VOTE payload");
        return;
    }
    const int64_t step = (int64_t)h->step;
    if (!c->undecided || h->epoch != c->q_epoch || step != c->q_step) {
        answer_stale(c, p, h->epoch, step);
        return;
    }
    qslot *s = slot_of(c, p);
    if (s == NULL) { /* only requesters are in the quorum */
        send_abort(c, p, h->epoch, step, PMC_FTAR_ST_ABORTED, "not a member of this quorum", 0);
        return;
    }
    if (!ok) {
        char reason[REASON_BYTES];
        snprintf(reason, sizeof(reason), "member %s voted not ok", p->id);
        decide_abort(c, reason);
        return;
    }
    s->voted = 1;
    for (uint32_t k = 0; k < c->q_n; ++k)
        if (!c->q[k].voted) return;
    decide_commit(c);
}

static const char *status_word(uint32_t status)
{
    switch (status) {
    case PMC_FTAR_ST_OK: return "ok";
    case PMC_FTAR_ST_ABORTED: return "aborted";
    case PMC_FTAR_ST_TIMEOUT: return "timeout";
    case PMC_FTAR_ST_FENCED: return "fenced";
    case PMC_FTAR_ST_TOO_FEW: return "too few";
    case PMC_FTAR_ST_COORDINATOR_LOST: return "coordinator lost";
    case PMC_FTAR_ST_ERROR: return "error";
    default: return "unknown status";
    }
}

static void on_failure_report(pmc_ftar_coord *c, peer *p, const pmc_ftar_header *h, const uint8_t *payload)
{
    pmc_rd r;
    char text[PMC_PROTO_STR_MAX + 1];
    pmc_rd_init(&r, payload, h->length);
    const uint32_t status = pmc_rd_u32(&r);
    pmc_rd_str(&r, text, sizeof(text));
    if (!pmc_rd_done(&r)) {
        kill_peer(p, "bad ABORT payload");
        return;
    }
    const int64_t step = (int64_t)h->step;
    if (!c->undecided || h->epoch != c->q_epoch || step != c->q_step || slot_of(c, p) == NULL) {
        answer_stale(c, p, h->epoch, step);
        return;
    }
    char shown[PMC_PROTO_STR_MAX + 1], reason[PMC_PROTO_STR_MAX + ID_BYTES + 64]; /* cut to REASON_BYTES later */
    printable(shown, sizeof(shown), text);
    snprintf(reason, sizeof(reason), "member %s reported a failure (%s): %s", p->id,
             status_word(status), shown);
    decide_abort(c, reason);
}

static void on_donor(pmc_ftar_coord *c, peer *p, const pmc_ftar_header *h, const uint8_t *payload)
{
    pmc_rd r;
    pmc_rd_init(&r, payload, h->length);
    const uint32_t failed = pmc_rd_u32(&r);
    if (!pmc_rd_done(&r)) {
        kill_peer(p, "bad DONOR payload");
        return;
    }
    int32_t pick = PMC_FTAR_NO_MEMBER;
    const char *addr = "";
    if (c->have_quorum) {
        /* An index from another epoch names a place in another ring: exclude nobody then. */
        const uint32_t skip = h->epoch == c->q_epoch ? failed : UINT32_MAX;
        uint32_t cand[MAX_MEMBERS], nc = 0;
        for (uint32_t k = 0; k < c->q_n; ++k) {
            const peer *d = find_serial(c, c->q[k].serial);
            if (!c->q[k].healing && k != skip && d != NULL && d != p && d->phase == PH_MEMBER) cand[nc++] = k;
        }
        if (nc > 0) {
            pick = (int32_t)cand[c->donor_rr++ % nc];
            addr = find_serial(c, c->q[pick].serial)->state_addr;
        }
    }
    uint8_t buf[8 + PMC_FTAR_ADDR_BYTES];
    pmc_wr w;
    pmc_wr_init(&w, buf, sizeof(buf));
    pmc_wr_i32(&w, pick);
    pmc_wr_str(&w, addr);
    send_to(p, PMC_FTAR_DONOR, c->have_quorum ? c->q_epoch : c->epoch, c->have_quorum ? c->q_step : 0, w.p,
            (uint32_t)w.len);
}

static void on_frame(pmc_ftar_coord *c, peer *p, const pmc_ftar_header *h, const uint8_t *payload)
{
    switch (p->phase) {
    case PH_HANDSHAKE: on_auth(c, p, h, payload); return;
    case PH_AUTHED: on_join(c, p, h, payload); return;
    default: break;
    }
    switch (h->type) {
    case PMC_FTAR_HEARTBEAT: return; /* pump already noted the time */
    case PMC_FTAR_QUORUM: on_request(c, p, h, payload); return;
    case PMC_FTAR_VOTE: on_vote(c, p, h, payload); return;
    case PMC_FTAR_ABORT: on_failure_report(c, p, h, payload); return;
    case PMC_FTAR_DONOR: on_donor(c, p, h, payload); return;
    default: kill_peer(p, "unexpected frame type %u", (unsigned)h->type); return;
    }
}

/* Why pmc_conn_next refused the next frame: the decoder's reason, else the sequence. */
static const char *bad_frame_reason(const peer *p)
{
    const pmc_conn *k = &p->conn;
    pmc_ftar_header h;
    size_t bytes = 0;
    const int rc = pmc_ftar_frame_decode(k->buf + k->consumed, k->len - k->consumed, PMC_CONN_MAX_CONTROL,
                                         k->authenticated ? k->key_rx : NULL, sizeof(k->key_rx), k->authenticated,
                                         &h, &bytes);
    return rc == PMC_FTAR_OK ? "frame out of sequence (replayed or reordered)" : pmc_ftar_strerror(rc);
}

static void on_readable(pmc_ftar_coord *c, peer *p)
{
    if (!alive(p)) return;
    int rc = pmc_conn_pump(&p->conn);
    const int closed = rc == PMC_IO_CLOSED;
    if (rc == PMC_IO_BAD_FRAME) {
        kill_peer(p, "bad frame (more unread bytes than any control frame)");
        return;
    }
    if (rc != PMC_IO_OK && !closed) {
        kill_peer(p, "receive failed: %s", pmc_io_strerror(rc));
        return;
    }
    for (;;) { /* frames that arrived before a close still count */
        pmc_ftar_header h;
        const uint8_t *payload = NULL;
        rc = pmc_conn_next(&p->conn, &h, &payload);
        if (rc == PMC_IO_AGAIN) break;
        if (rc != PMC_IO_OK) {
            kill_peer(p, "bad frame (%s)", bad_frame_reason(p));
            return;
        }
        on_frame(c, p, &h, payload);
        if (!alive(p)) return;
    }
    if (closed) {
        const pmc_conn *k = &p->conn;
        if (k->len > k->consumed) kill_peer(p, "connection closed in the middle of a frame");
        else kill_peer(p, "connection closed by the peer");
    }
}

static void on_listener(pmc_ftar_coord *c, int64_t now)
{
    for (;;) {
        const int fd = accept4(c->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                logf_line(c, "cannot accept connections for now: %s", strerror(errno));
                c->accept_paused_until = now + ACCEPT_PAUSE_MS;
            }
            return; /* EAGAIN: all taken */
        }
        char from[FROM_BYTES];
        format_peer(fd, from, sizeof(from));
        if (c->npeers >= MAX_CONNECTIONS) {
            logf_line(c, "closed connection from %s: too many connections (at most %d)", from, MAX_CONNECTIONS);
            close(fd);
            continue;
        }
        /* Strangers that connect and stay silent must not crowd out a member
         * that reconnects: past the cap, the oldest handshake is dropped. */
        peer *oldest = NULL;
        size_t waiting = 0;
        for (size_t i = 0; i < c->npeers; ++i) {
            peer *q = c->peers[i];
            if (!alive(q) || q->phase == PH_MEMBER) continue;
            ++waiting;
            if (oldest == NULL || q->accepted_ms < oldest->accepted_ms) oldest = q;
        }
        if (waiting >= MAX_UNAUTHENTICATED && oldest != NULL)
            kill_peer(oldest, "too many connections waiting to authenticate (at most %d)", MAX_UNAUTHENTICATED);
        if (c->npeers == c->cappeers) {
            const size_t cap = c->cappeers ? 2 * c->cappeers : 16;
            peer **np = realloc(c->peers, cap * sizeof(*np));
            struct pollfd *pf = realloc(c->pfds, (cap + 2) * sizeof(*pf));
            if (np != NULL) c->peers = np;
            if (pf != NULL) c->pfds = pf;
            peer **pl = np != NULL && pf != NULL ? realloc(c->polled, cap * sizeof(*pl)) : NULL;
            if (pl == NULL) {
                logf_line(c, "closed connection from %s: out of memory", from);
                close(fd);
                return;
            }
            c->polled = pl;
            c->cappeers = cap;
        }
        peer *p = calloc(1, sizeof(*p));
        if (p == NULL) {
            logf_line(c, "closed connection from %s: out of memory", from);
            close(fd);
            return;
        }
        pmc_socket_tune(fd, 0);
        pmc_conn_init(&p->conn, fd, 0xFFFFFFFFu);
        p->serial = ++c->next_serial;
        p->phase = PH_HANDSHAKE;
        p->accepted_ms = now;
        snprintf(p->from, sizeof(p->from), "%s", from);
        c->peers[c->npeers++] = p;
        const int rc = pmc_conn_server_hello(&p->conn, c->token, c->tokenlen, now + SEND_DEADLINE_MS);
        if (rc != PMC_IO_OK) kill_peer(p, "sending HELLO failed: %s", pmc_io_strerror(rc));
    }
}

/* Heartbeats out, silent members evicted, slow handshakes dropped. */
static void tick(pmc_ftar_coord *c, int64_t now)
{
    const int beat = now >= c->next_hb_ms;
    if (beat) c->next_hb_ms = now + c->heartbeat_ms;
    for (size_t i = 0; i < c->npeers; ++i) {
        peer *p = c->peers[i];
        if (!alive(p)) continue;
        if (p->phase == PH_HANDSHAKE) {
            if (now - p->accepted_ms >= AUTH_WINDOW_MS)
                kill_peer(p, "no AUTH within %d ms", AUTH_WINDOW_MS);
            continue;
        }
        int64_t silent = now - p->conn.last_recv_ms;
        if (silent >= (int64_t)c->evict_ms) {
            /* Its frames may have come while this loop was busy elsewhere: read them before judging. */
            on_readable(c, p);
            if (!alive(p)) continue;
            silent = pmc_ftar_now_ms() - p->conn.last_recv_ms;
        }
        if (silent >= (int64_t)c->evict_ms && p->phase == PH_AUTHED) {
            kill_peer(p, "no JOIN within %u ms", c->evict_ms);
            continue;
        }
        if (silent >= (int64_t)c->evict_ms) {
            char reason[64];
            snprintf(reason, sizeof(reason), "evicted: silent for %lld ms", (long long)silent);
            const qslot *s = slot_of(c, p);
            /* The deadline counts from now, not from the tick's start: reading the silent
             * peers before this one may have used it up on a loaded host. */
            send_abort(c, p, s != NULL ? c->q_epoch : c->epoch, s != NULL ? c->q_step : c->group_step + 1,
                       PMC_FTAR_ST_FENCED, reason, pmc_ftar_now_ms() + FENCE_DEADLINE_MS);
            p->evicted = 1;
            kill_peer(p, "silent for %lld ms", (long long)silent);
            continue;
        }
        /* Only to members: the first frame after AUTH_OK is the JOIN welcome. */
        if (beat && p->phase == PH_MEMBER) send_to(p, PMC_FTAR_HEARTBEAT, c->epoch, c->group_step, NULL, 0);
    }
}

/* Milliseconds poll() may sleep: until the next timer of any kind. */
static int poll_timeout(const pmc_ftar_coord *c, int64_t now)
{
    int64_t wake = c->next_hb_ms;
    const int64_t cap = now + (c->heartbeat_ms / 2 > 0 ? c->heartbeat_ms / 2 : 1);
    if (cap < wake) wake = cap;
    for (size_t i = 0; i < c->npeers; ++i) {
        const peer *p = c->peers[i];
        if (!alive(p)) continue;
        int64_t t = p->phase == PH_HANDSHAKE ? p->accepted_ms + AUTH_WINDOW_MS
                                             : p->conn.last_recv_ms + (int64_t)c->evict_ms;
        if (t < wake) wake = t;
        if (p->pending && !c->undecided) {
            t = p->asked_ms + (int64_t)c->join_timeout_ms;
            if (t < wake) wake = t;
        }
    }
    if (c->accept_paused_until > now && c->accept_paused_until < wake) wake = c->accept_paused_until;
    return wake <= now ? 0 : (int)(wake - now);
}

/* ---- public ---------------------------------------------------------- */

int pmc_ftar_coord_create(const pmc_ftar_coord_config *cfg, pmc_ftar_coord **out, char *addr, size_t addrcap,
                          char *msg, size_t msgcap)
{
    if (out != NULL) *out = NULL;
    if (cfg == NULL || out == NULL) {
        SET_MSG("no configuration or output pointer");
        return -1;
    }
    if (cfg->token == NULL || cfg->tokenlen == 0) {
        SET_MSG("the job token is empty");
        return -1;
    }
    if (cfg->bind == NULL) {
        SET_MSG("no bind address");
        return -1;
    }
    const uint32_t hb = cfg->heartbeat_ms ? cfg->heartbeat_ms : PMC_FTAR_DEFAULT_HEARTBEAT_MS;
    const uint32_t ev = cfg->evict_ms ? cfg->evict_ms : PMC_FTAR_DEFAULT_EVICT_MS;
    const uint32_t jt = cfg->join_timeout_ms ? cfg->join_timeout_ms : PMC_FTAR_DEFAULT_JOIN_TIMEOUT_MS;
    if (cfg->min_replicas < 1) {
        SET_MSG("min_replicas must be at least 1");
        return -1;
    }
    if (ev <= hb) {
        SET_MSG("evict_ms (%u) must be larger than heartbeat_ms (%u)", ev, hb);
        return -1;
    }
    if (hb > 3600000 || ev > 3600000 || jt > 3600000) { /* keeps every timer sum far from overflow */
        SET_MSG("heartbeat_ms, evict_ms and join_timeout_ms must be at most one hour");
        return -1;
    }
    pmc_ftar_coord *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        SET_MSG("out of memory");
        return -1;
    }
    c->listen_fd = c->stop_rd = c->stop_wr = -1;
    c->log_fd = cfg->log_fd;
    c->min_replicas = cfg->min_replicas;
    c->heartbeat_ms = hb;
    c->evict_ms = ev;
    c->join_timeout_ms = jt;
    c->group_step = -1;
    c->token = malloc(cfg->tokenlen);
    c->scratch = malloc(PMC_CONN_MAX_CONTROL);
    c->prev = calloc(MAX_MEMBERS, sizeof(c->prev[0]));
    c->q = calloc(MAX_MEMBERS, sizeof(c->q[0]));
    c->order = calloc(MAX_MEMBERS, sizeof(c->order[0]));
    c->pfds = malloc(2 * sizeof(*c->pfds));
    if (c->token == NULL || c->scratch == NULL || c->prev == NULL || c->q == NULL || c->order == NULL ||
        c->pfds == NULL) {
        SET_MSG("out of memory");
        pmc_ftar_coord_destroy(c);
        return -1;
    }
    memcpy(c->token, cfg->token, cfg->tokenlen);
    c->tokenlen = cfg->tokenlen;
    if (pmc_ftar_random(&c->incarnation, sizeof(c->incarnation)) != 0) {
        SET_MSG("no random bytes from the kernel: %s", strerror(errno));
        pmc_ftar_coord_destroy(c);
        return -1;
    }
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
        SET_MSG("pipe: %s", strerror(errno));
        pmc_ftar_coord_destroy(c);
        return -1;
    }
    c->stop_rd = fds[0];
    c->stop_wr = fds[1];
    char bound[PMC_FTAR_ADDR_BYTES];
    if (pmc_listen(cfg->bind, &c->listen_fd, bound, sizeof(bound), msg, msgcap) != PMC_IO_OK) {
        pmc_ftar_coord_destroy(c);
        return -1;
    }
    if (addr != NULL && addrcap > 0) snprintf(addr, addrcap, "%s", bound);
    logf_line(c, "listening on %s (heartbeat %u ms, evict after %u ms, join timeout %u ms, min replicas %u)", bound,
              hb, ev, jt, c->min_replicas);
    *out = c;
    return 0;
}

int pmc_ftar_coord_run(pmc_ftar_coord *c)
{
    if (c == NULL) return -1;
    c->next_hb_ms = pmc_ftar_now_ms();
    c->started_ms = c->next_hb_ms;
    for (;;) {
        compact(c);
        int64_t now = pmc_ftar_now_ms();
        const size_t n = c->npeers;
        c->pfds[0] = (struct pollfd){.fd = c->stop_rd, .events = POLLIN};
        c->pfds[1] = (struct pollfd){.fd = c->accept_paused_until > now ? -1 : c->listen_fd, .events = POLLIN};
        for (size_t i = 0; i < n; ++i) {
            c->polled[i] = c->peers[i];
            c->pfds[2 + i] = (struct pollfd){.fd = c->peers[i]->conn.fd, .events = POLLIN};
        }
        const int ready = poll(c->pfds, 2 + n, poll_timeout(c, now));
        if (ready < 0 && errno != EINTR) {
            logf_line(c, "poll failed: %s", strerror(errno));
            return -1;
        }
        if (ready > 0 && (c->pfds[0].revents & POLLIN)) {
            char drain[64];
            while (read(c->stop_rd, drain, sizeof(drain)) > 0) {
            }
            return 0;
        }
        now = pmc_ftar_now_ms();
        /* Peers first: the accepts below may move the arrays behind pfds and polled. */
        if (ready > 0)
            for (size_t i = 0; i < n; ++i)
                if (c->pfds[2 + i].revents) on_readable(c, c->polled[i]);
        const int accept_now = ready > 0 && (c->pfds[1].revents & POLLIN);
        reap(c);
        if (accept_now) on_listener(c, now);
        tick(c, now);
        reap(c);
        try_quorum(c, now);
        reap(c);
    }
}

void pmc_ftar_coord_stop(pmc_ftar_coord *c)
{
    if (c == NULL) return;
    const char one = 1;
    /* A full pipe is already readable: nothing more to do. */
    ssize_t w;
    do {
        w = write(c->stop_wr, &one, 1);
    } while (w < 0 && errno == EINTR);
}

void pmc_ftar_coord_destroy(pmc_ftar_coord *c)
{
    if (c == NULL) return;
    for (size_t i = 0; i < c->npeers; ++i) {
        pmc_conn_close(&c->peers[i]->conn);
        free(c->peers[i]);
    }
    free(c->peers);
    free(c->polled);
    free(c->pfds);
    if (c->listen_fd >= 0) close(c->listen_fd);
    if (c->stop_rd >= 0) close(c->stop_rd);
    if (c->stop_wr >= 0) close(c->stop_wr);
    if (c->token != NULL) memset(c->token, 0, c->tokenlen);
    free(c->token);
    free(c->scratch);
    free(c->prev);
    free(c->q);
    free(c->order);
    free(c);
}
