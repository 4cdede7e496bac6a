/* FTAR connections: TCP setup, the token handshake and control frames.
 *
 * Handshake (the token never crosses the wire):
 *   server -> HELLO   nonce_s                      (no MAC: no key yet)
 *   client -> AUTH    nonce_c | proof_c | identity (proof_c = HMAC(token, client label, nonces, identity))
 *   server -> AUTH_OK proof_s                      (MAC'ed with the new session key)
 * after which every frame carries a MAC under the session key of its
 * direction and an in-order sequence number, so a forged, replayed,
 * reordered or reflected frame fails.
 */
#include "conn.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#define SET_MSG(...) do { if (msg != NULL && msgcap > 0) snprintf(msg, msgcap, __VA_ARGS__); } while (0)

int64_t pmc_ftar_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int split_hostport(const char *hostport, char *host, size_t hostcap, char *port, size_t portcap)
{
    if (hostport == NULL) return -1;
    const char *colon = strrchr(hostport, ':');
    if (colon == NULL || colon[1] == '\0') return -1;
    const char *h = hostport;
    size_t hl = (size_t)(colon - hostport);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        ++h;
        hl -= 2;
    }
    if (hl == 0 || hl >= hostcap || strlen(colon + 1) >= portcap) return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    strcpy(port, colon + 1);
    for (const char *q = port; *q; ++q)
        if (*q < '0' || *q > '9') return -1;
    return atoi(port) <= 65535 ? 0 : -1;
}

int pmc_addr_resolve(const char *hostport, void *sockaddr_out, uint32_t *len_out, char *msg, size_t msgcap)
{
    char host[256], port[8];
    if (split_hostport(hostport, host, sizeof(host), port, sizeof(port)) != 0) {
        SET_MSG("address '%s' is not HOST:PORT (e.g. 127.0.0.1:29500)", hostport ? hostport : "(null)");
        return PMC_IO_ERROR;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        SET_MSG("cannot resolve '%s': %s", hostport, gai_strerror(rc));
        return PMC_IO_ERROR;
    }
    memcpy(sockaddr_out, res->ai_addr, res->ai_addrlen);
    *len_out = (uint32_t)res->ai_addrlen;
    freeaddrinfo(res);
    return PMC_IO_OK;
}

static void format_addr(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        port = ntohs(a->sin_port);
        snprintf(out, cap, "%s:%u", host, port);
    } else {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        port = ntohs(a->sin6_port);
        snprintf(out, cap, "[%s]:%u", host, port);
    }
}

void pmc_socket_tune(int fd, int bulk)
{
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* A dead host sends no reset: data left unacknowledged this long fails
     * the connection (deadlines and heartbeats usually notice first). */
    const unsigned user_timeout_ms = 10000;
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
    if (bulk) {
        const int size = 4 << 20;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    }
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* A non-blocking TCP socket of the family of hostport's address (in *ss). */
static int open_socket(const char *hostport, struct sockaddr_storage *ss, uint32_t *len, int *fd, char *msg,
                       size_t msgcap)
{
    const int rc = pmc_addr_resolve(hostport, ss, len, msg, msgcap);
    if (rc != PMC_IO_OK) return rc;
    *fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (*fd < 0) {
        SET_MSG("socket: %s", strerror(errno));
        return PMC_IO_ERROR;
    }
    return PMC_IO_OK;
}

int pmc_listen(const char *hostport, int *fd, char *bound, size_t boundcap, char *msg, size_t msgcap)
{
    struct sockaddr_storage ss;
    uint32_t len = 0;
    int s = -1;
    const int rc = open_socket(hostport, &ss, &len, &s, msg, msgcap);
    if (rc != PMC_IO_OK) return rc;
    const int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s, (struct sockaddr *)&ss, len) != 0 || listen(s, 128) != 0) {
        SET_MSG("cannot listen on %s: %s", hostport, strerror(errno));
        close(s);
        return PMC_IO_ERROR;
    }
    struct sockaddr_storage got;
    socklen_t gl = sizeof(got);
    if (getsockname(s, (struct sockaddr *)&got, &gl) != 0) {
        SET_MSG("getsockname: %s", strerror(errno));
        close(s);
        return PMC_IO_ERROR;
    }
    if (bound != NULL && boundcap > 0) format_addr(&got, bound, boundcap);
    *fd = s;
    return PMC_IO_OK;
}

int pmc_wait_fd(int fd, short events, int64_t deadline_ms, int interrupt_fd)
{
    for (;;) {
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = interrupt_fd, .events = POLLIN}};
        int timeout = -1;
        if (deadline_ms > 0) {
            const int64_t left = deadline_ms - pmc_ftar_now_ms();
            if (left <= 0) return PMC_IO_TIMEOUT;
            timeout = left > 1000000 ? 1000000 : (int)left;
        }
        const int n = poll(p, interrupt_fd >= 0 ? 2 : 1, timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            return PMC_IO_ERROR;
        }
        if (n == 0) continue; /* the deadline check above decides */
        if (interrupt_fd >= 0 && (p[1].revents & POLLIN)) return PMC_IO_INTERRUPTED;
        if (p[0].revents) return PMC_IO_OK;
    }
}

int pmc_connect(const char *hostport, int64_t deadline_ms, int *fd, char *msg, size_t msgcap)
{
    struct sockaddr_storage ss;
    uint32_t len = 0;
    int s = -1;
    int rc = open_socket(hostport, &ss, &len, &s, msg, msgcap);
    if (rc != PMC_IO_OK) return rc;
    if (connect(s, (struct sockaddr *)&ss, len) != 0) {
        if (errno != EINPROGRESS) {
            SET_MSG("cannot connect to %s: %s", hostport, strerror(errno));
            close(s);
            return errno == ECONNREFUSED ? PMC_IO_CLOSED : PMC_IO_ERROR;
        }
        rc = pmc_wait_fd(s, POLLOUT, deadline_ms, -1);
        int err = 0;
        socklen_t el = sizeof(err);
        if (rc == PMC_IO_OK && getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err != 0) rc = PMC_IO_CLOSED;
        if (rc != PMC_IO_OK) {
            SET_MSG("cannot connect to %s: %s", hostport,
                    rc == PMC_IO_TIMEOUT ? "timed out" : strerror(err ? err : errno));
            close(s);
            return rc;
        }
    }
    pmc_socket_tune(s, 0);
    *fd = s;
    return PMC_IO_OK;
}

void pmc_conn_init(pmc_conn *c, int fd, uint32_t sender)
{
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->sender = sender;
    c->last_recv_ms = pmc_ftar_now_ms();
}

void pmc_conn_close(pmc_conn *c)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = c->consumed = 0;
    c->authenticated = 0;
}

static int send_all(int fd, const uint8_t *p, size_t n, int64_t deadline_ms)
{
    while (n > 0) {
        const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            const int rc = pmc_wait_fd(fd, POLLOUT, deadline_ms, -1);
            if (rc != PMC_IO_OK) return rc;
            continue;
        }
        return (errno == EPIPE || errno == ECONNRESET) ? PMC_IO_CLOSED : PMC_IO_ERROR;
    }
    return PMC_IO_OK;
}

int pmc_conn_send(pmc_conn *c, int type, uint64_t epoch, uint64_t step, const void *payload, uint32_t len,
                  int64_t deadline_ms)
{
    if (c->fd < 0) return PMC_IO_CLOSED;
    if (len > PMC_CONN_MAX_CONTROL) return PMC_IO_ERROR;
    uint8_t frame[PMC_FTAR_HEADER_BYTES + PMC_CONN_MAX_CONTROL + PMC_FTAR_MAC_BYTES];
    pmc_ftar_header h = {.type = (uint8_t)type, .sender = c->sender, .epoch = epoch, .step = step,
                         .seq = c->send_seq};
    size_t written = 0;
    const int mac = c->authenticated || type == PMC_FTAR_AUTH_OK;
    if (pmc_ftar_frame_encode(&h, payload, len, mac ? c->key_tx : NULL, sizeof(c->key_tx), frame, sizeof(frame),
                              &written) != PMC_FTAR_OK)
        return PMC_IO_ERROR;
    ++c->send_seq;
    return send_all(c->fd, frame, written, deadline_ms);
}

int pmc_conn_pump(pmc_conn *c)
{
    if (c->fd < 0) return PMC_IO_CLOSED;
    if (c->consumed > 0) { /* drop frames already handed out */
        memmove(c->buf, c->buf + c->consumed, c->len - c->consumed);
        c->len -= c->consumed;
        c->consumed = 0;
    }
    /* Room for two of the largest frames: a fast sender's stream is read in
     * slices rather than all at once (the rest waits in the socket). */
    const size_t most = 2 * (PMC_FTAR_HEADER_BYTES + (size_t)PMC_CONN_MAX_CONTROL + PMC_FTAR_MAC_BYTES);
    for (;;) {
        if (c->len == most) return PMC_IO_OK;
        if (c->cap - c->len < 4096 && c->cap < most) {
            const size_t cap = c->cap ? (c->cap * 2 < most ? c->cap * 2 : most) : 8192;
            uint8_t *b = realloc(c->buf, cap);
            if (b == NULL) return PMC_IO_ERROR;
            c->buf = b;
            c->cap = cap;
        }
        const ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (r > 0) {
            c->len += (size_t)r;
            c->last_recv_ms = pmc_ftar_now_ms();
            continue;
        }
        if (r == 0) return PMC_IO_CLOSED;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return PMC_IO_OK;
        return PMC_IO_CLOSED; /* ECONNRESET and friends */
    }
}

int pmc_conn_next(pmc_conn *c, pmc_ftar_header *h, const uint8_t **payload)
{
    if (c->consumed > 0 && c->consumed == c->len) c->len = c->consumed = 0;
    const uint8_t *p = c->buf + c->consumed;
    const size_t avail = c->len - c->consumed;
    if (avail == 0) return PMC_IO_AGAIN;
    size_t bytes = 0;
    const int rc = pmc_ftar_frame_decode(p, avail, PMC_CONN_MAX_CONTROL, c->authenticated ? c->key_rx : NULL,
                                         sizeof(c->key_rx), c->authenticated, h, &bytes);
    if (rc == PMC_FTAR_NEED_MORE) return PMC_IO_AGAIN;
    if (rc != PMC_FTAR_OK) return PMC_IO_BAD_FRAME;
    if (h->seq != c->recv_seq) return PMC_IO_BAD_FRAME;
    ++c->recv_seq;
    c->consumed += bytes;
    *payload = p + PMC_FTAR_HEADER_BYTES;
    return PMC_IO_OK;
}

int pmc_conn_recv(pmc_conn *c, int64_t deadline_ms, int interrupt_fd, pmc_ftar_header *h,
                  const uint8_t **payload)
{
    for (;;) {
        int rc = pmc_conn_next(c, h, payload);
        if (rc != PMC_IO_AGAIN) return rc;
        rc = pmc_wait_fd(c->fd, POLLIN, deadline_ms, interrupt_fd);
        if (rc != PMC_IO_OK) return rc;
        rc = pmc_conn_pump(c);
        if (rc == PMC_IO_CLOSED) { /* frames that arrived before the close still count */
            rc = pmc_conn_next(c, h, payload);
            return rc == PMC_IO_AGAIN ? PMC_IO_CLOSED : rc;
        }
        if (rc != PMC_IO_OK) return rc;
    }
}

int pmc_conn_server_hello(pmc_conn *c, const uint8_t *token, size_t tokenlen, int64_t deadline_ms)
{
    (void)token;
    (void)tokenlen;
    if (pmc_ftar_random(c->nonce_server, sizeof(c->nonce_server)) != 0) return PMC_IO_ERROR;
    return pmc_conn_send(c, PMC_FTAR_HELLO, 0, 0, c->nonce_server, sizeof(c->nonce_server), deadline_ms);
}

int pmc_conn_server_accept(pmc_conn *c, const uint8_t *token, size_t tokenlen, const pmc_ftar_header *h,
                           const uint8_t *payload, int64_t deadline_ms)
{
    const uint32_t fixed = 2 * PMC_FTAR_NONCE_BYTES;
    if (h->type != PMC_FTAR_AUTH || h->length <= fixed || h->length - fixed >= sizeof(c->identity))
        return PMC_IO_AUTH;
    const uint8_t *nonce_client = payload;
    const uint8_t *proof = payload + PMC_FTAR_NONCE_BYTES;
    const size_t idlen = h->length - fixed;
    memcpy(c->identity, payload + fixed, idlen);
    c->identity[idlen] = '\0';
    if (strlen(c->identity) != idlen) return PMC_IO_AUTH; /* no NUL inside an identity */
    uint8_t want[32];
    pmc_ftar_auth_proof(token, tokenlen, PMC_FTAR_ROLE_CLIENT, c->nonce_server, nonce_client, c->identity, want);
    if (!pmc_ftar_proof_equal(want, proof)) return PMC_IO_AUTH;
    pmc_ftar_session_key(token, tokenlen, c->nonce_server, nonce_client, PMC_FTAR_SERVER_TO_CLIENT, c->key_tx);
    pmc_ftar_session_key(token, tokenlen, c->nonce_server, nonce_client, PMC_FTAR_CLIENT_TO_SERVER, c->key_rx);
    uint8_t mine[32];
    pmc_ftar_auth_proof(token, tokenlen, PMC_FTAR_ROLE_SERVER, c->nonce_server, nonce_client, c->identity, mine);
    const int rc = pmc_conn_send(c, PMC_FTAR_AUTH_OK, 0, 0, mine, sizeof(mine), deadline_ms);
    if (rc == PMC_IO_OK) c->authenticated = 1;
    return rc;
}

int pmc_conn_handshake_server(pmc_conn *c, const uint8_t *token, size_t tokenlen, int64_t deadline_ms)
{
    int rc = pmc_conn_server_hello(c, token, tokenlen, deadline_ms);
    if (rc != PMC_IO_OK) return rc;
    pmc_ftar_header h;
    const uint8_t *payload = NULL;
    rc = pmc_conn_recv(c, deadline_ms, -1, &h, &payload);
    if (rc == PMC_IO_BAD_FRAME) return PMC_IO_AUTH;
    if (rc != PMC_IO_OK) return rc;
    return pmc_conn_server_accept(c, token, tokenlen, &h, payload, deadline_ms);
}

int pmc_conn_handshake_client(pmc_conn *c, const uint8_t *token, size_t tokenlen, const char *identity,
                              int64_t deadline_ms)
{
    pmc_ftar_header h;
    const uint8_t *payload = NULL;
    int rc = pmc_conn_recv(c, deadline_ms, -1, &h, &payload);
    if (rc == PMC_IO_BAD_FRAME) return PMC_IO_AUTH;
    if (rc != PMC_IO_OK) return rc;
    if (h.type != PMC_FTAR_HELLO || h.length != PMC_FTAR_NONCE_BYTES) return PMC_IO_AUTH;
    memcpy(c->nonce_server, payload, PMC_FTAR_NONCE_BYTES);
    const size_t idlen = strlen(identity);
    if (idlen == 0 || idlen >= sizeof(c->identity)) return PMC_IO_ERROR;
    uint8_t auth[2 * PMC_FTAR_NONCE_BYTES + PMC_CONN_IDENTITY_BYTES];
    uint8_t *nonce_client = auth;
    if (pmc_ftar_random(nonce_client, PMC_FTAR_NONCE_BYTES) != 0) return PMC_IO_ERROR;
    pmc_ftar_auth_proof(token, tokenlen, PMC_FTAR_ROLE_CLIENT, c->nonce_server, nonce_client, identity,
                        auth + PMC_FTAR_NONCE_BYTES);
    memcpy(auth + 2 * PMC_FTAR_NONCE_BYTES, identity, idlen);
    rc = pmc_conn_send(c, PMC_FTAR_AUTH, 0, 0, auth, (uint32_t)(2 * PMC_FTAR_NONCE_BYTES + idlen), deadline_ms);
    if (rc != PMC_IO_OK) return rc;
    /* The server's answer is MAC'ed with the session key both now derive. */
    pmc_ftar_session_key(token, tokenlen, c->nonce_server, nonce_client, PMC_FTAR_CLIENT_TO_SERVER, c->key_tx);
    pmc_ftar_session_key(token, tokenlen, c->nonce_server, nonce_client, PMC_FTAR_SERVER_TO_CLIENT, c->key_rx);
    c->authenticated = 1;
    rc = pmc_conn_recv(c, deadline_ms, -1, &h, &payload);
    if (rc == PMC_IO_BAD_FRAME) rc = PMC_IO_AUTH;
    if (rc == PMC_IO_OK && (h.type != PMC_FTAR_AUTH_OK || h.length != 32)) rc = PMC_IO_AUTH;
    if (rc == PMC_IO_OK) {
        uint8_t want[32];
        pmc_ftar_auth_proof(token, tokenlen, PMC_FTAR_ROLE_SERVER, c->nonce_server, nonce_client, identity, want);
        if (!pmc_ftar_proof_equal(want, payload)) rc = PMC_IO_AUTH;
    }
    if (rc != PMC_IO_OK) c->authenticated = 0;
    else snprintf(c->identity, sizeof(c->identity), "%s", identity);
    return rc;
}

const char *pmc_io_strerror(int code)
{
    switch (code) {
    case PMC_IO_OK: return "ok";
    case PMC_IO_AGAIN: return "no complete frame yet";
    case PMC_IO_CLOSED: return "connection closed by the peer";
    case PMC_IO_TIMEOUT: return "timed out";
    case PMC_IO_ERROR: return "system call failed";
    case PMC_IO_BAD_FRAME: return "malformed or unauthenticated frame";
    case PMC_IO_AUTH: return "authentication failed (wrong token?)";
    case PMC_IO_INTERRUPTED: return "interrupted";
    default: return "unknown i/o status";
    }
}
