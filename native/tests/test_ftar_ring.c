/* FTAR's ring allreduce among threads of one process, without MPI: members
 * joined by AF_UNIX socketpairs (and loopback TCP), every dtype and op,
 * 2..8 members, 1..3 streams, empty and uneven segments, many small chunks,
 * members that contribute zeros, integrity on and off; results checked
 * exactly against a serial reduction (integer-valued inputs keep float sums
 * exact) and bitwise equal on all members. Then the failures: a neighbour
 * that hangs up, the abort descriptor, the deadline, corrupted frames; the
 * 16-bit conversions against known values.
 *
 * PMC_TEST_QUICK=1: fewer and smaller cases (valgrind).
 * PMC_RING_BENCH=1: only a throughput measurement over loopback TCP
 * (PMC_RING_BENCH_N members, PMC_RING_BENCH_MB MiB of float32). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include "ftar/ring.h"
#include "testutil.h"

#define MAXN 8
#define MAXS 4

static int g_quick;

/* ---- Connections ----------------------------------------------------- */

typedef struct mesh {
    uint32_t n, streams;
    pmc_ring_stream send[MAXN][MAXS], recv[MAXN][MAXS];
} mesh;

static void set_nonblocking(int fd)
{
    const int fl = fcntl(fd, F_GETFL);
    CHECK(fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK: %s", strerror(errno));
}

/* A connected loopback TCP pair, tuned as the member tunes its ring sockets. */
static int tcp_pair(int fds[2])
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&sa, &len) != 0) {
        close(l);
        return -1;
    }
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(l);
        return -1;
    }
    fds[1] = accept(l, NULL, NULL);
    close(l);
    if (fds[1] < 0) return -1;
    const int one = 1, size = 4 << 20;
    for (int k = 0; k < 2; ++k) {
        setsockopt(fds[k], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(fds[k], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
        setsockopt(fds[k], SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    }
    return 0;
}

static int make_pair(int fds[2], int tcp)
{
    return tcp ? tcp_pair(fds) : socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
}

static void fill_key(uint8_t key[32], uint64_t seed)
{
    for (int k = 0; k < 32; ++k) key[k] = (uint8_t)t_mix(seed * 32 + (uint64_t)k);
}

/* Member i's stream s to the right is member i+1's stream s from the left;
 * both ends share a key and a first sequence number (not 0: the counters
 * carry over between operations). */
static int mesh_open(mesh *m, uint32_t n, uint32_t streams, int tcp)
{
    memset(m, 0, sizeof(*m));
    m->n = n;
    m->streams = streams;
    for (uint32_t i = 0; i < n; ++i)
        for (uint32_t s = 0; s < streams; ++s) {
            int fds[2];
            if (make_pair(fds, tcp) != 0) {
                CHECK(0, "socket pair: %s", strerror(errno));
                return -1;
            }
            set_nonblocking(fds[0]);
            set_nonblocking(fds[1]);
            pmc_ring_stream st = {.fd = fds[0], .seq = 1000u * i + s};
            fill_key(st.key, 31u * i + s + 1);
            m->send[i][s] = st;
            st.fd = fds[1];
            m->recv[(i + 1) % n][s] = st;
        }
    return 0;
}

static void mesh_close(mesh *m)
{
    for (uint32_t i = 0; i < m->n; ++i)
        for (uint32_t s = 0; s < m->streams; ++s) {
            close(m->send[i][s].fd);
            close(m->recv[i][s].fd);
        }
}

/* ---- Members ----------------------------------------------------------- */

typedef struct member {
    pmc_ring_args a;
    const void *in;
    void *out;
    size_t count;
    int dtype, op, contribute;
    uint32_t n_contrib;
    int rc;
    double secs;
    int fault_calls[2];
    int fault_shutdown;     /* at the RS fault point: hang up every connection */
    int shutdown_on_error;  /* a failed member hangs up, as the member layer does */
    void *scratch;
    size_t scratch_bytes;
} member;

static void shutdown_all(const pmc_ring_args *a)
{
    for (uint32_t s = 0; s < a->streams; ++s) {
        shutdown(a->send[s].fd, SHUT_RDWR);
        shutdown(a->recv[s].fd, SHUT_RDWR);
    }
}

static void on_fault(void *arg, int point)
{
    member *p = arg;
    if (point >= 0 && point < 2) ++p->fault_calls[point];
    if (point == PMC_RING_AT_REDUCE_SCATTER && p->fault_shutdown) shutdown_all(&p->a);
}

static void *member_main(void *arg)
{
    member *p = arg;
    const double t0 = t_now();
    p->rc = pmc_ring_allreduce(&p->a, p->in, p->out, p->count, p->dtype, p->op, p->contribute, &p->n_contrib);
    p->secs = t_now() - t0;
    if (p->rc != PMC_RING_OK && p->shutdown_on_error) shutdown_all(&p->a);
    return NULL;
}

/* Member p's arguments on mesh m (scratch kept in p across calls). */
static void member_setup(member *p, mesh *m, uint32_t i, uint64_t op_no, uint32_t chunk_bytes, int integrity)
{
    void *scratch = p->scratch;
    const size_t scratch_bytes = p->scratch_bytes;
    memset(p, 0, sizeof(*p));
    p->scratch = scratch;
    p->scratch_bytes = scratch_bytes;
    p->a = (pmc_ring_args){
        .n = m->n, .index = i, .streams = m->streams, .send = m->send[i], .recv = m->recv[i], .abort_fd = -1,
        .deadline_ms = pmc_ftar_now_ms() + 30000, .epoch = 7, .op = op_no, .chunk_bytes = chunk_bytes,
        .integrity = integrity, .fault = on_fault, .fault_arg = p, .scratch = &p->scratch,
        .scratch_bytes = &p->scratch_bytes,
    };
    p->shutdown_on_error = 1;
}

static void run_members(member *ms, uint32_t n)
{
    pthread_t th[MAXN];
    for (uint32_t i = 0; i < n; ++i) CHECK(pthread_create(&th[i], NULL, member_main, &ms[i]) == 0, "thread");
    for (uint32_t i = 0; i < n; ++i) pthread_join(th[i], NULL);
}

/* ---- Values and the serial reference ---------------------------------- */

/* Element e of member p: small integers, a few large ones for the integer
 * types (their sums wrap), a few NaNs for the float types. */
static int64_t ival(uint64_t seed, uint32_t p, size_t e, int dtype)
{
    const uint64_t h = t_mix(seed ^ t_mix(((uint64_t)p << 40) + e));
    if ((dtype == PMC_FTAR_INT32 || dtype == PMC_FTAR_INT64) && h % 7 == 0)
        return (dtype == PMC_FTAR_INT32 ? INT32_MAX : INT64_MAX) - (int64_t)(h >> 60);
    return (int64_t)(h % 17) - 8;
}

static int is_nan_slot(uint32_t p, size_t e, uint32_t n, int dtype)
{
    return dtype <= PMC_FTAR_FLOAT16 && e % 97 == 13 && (e / 97) % n == p;
}

static void fill_input(void *buf, uint64_t seed, uint32_t p, uint32_t n, size_t count, int dtype)
{
    for (size_t e = 0; e < count; ++e) {
        const int64_t v = ival(seed, p, e, dtype);
        const float f = is_nan_slot(p, e, n, dtype) ? NAN : (float)v;
        switch (dtype) {
        case PMC_FTAR_FLOAT32: ((float *)buf)[e] = f; break;
        case PMC_FTAR_FLOAT64: ((double *)buf)[e] = is_nan_slot(p, e, n, dtype) ? (double)NAN : (double)v; break;
        case PMC_FTAR_BFLOAT16:
        case PMC_FTAR_FLOAT16: pmc_ftar_narrow((uint16_t *)buf + e, &f, 1, dtype); break;
        case PMC_FTAR_INT32: ((int32_t *)buf)[e] = (int32_t)v; break;
        default: ((int64_t *)buf)[e] = v; break;
        }
    }
}

static double dop(double x, double y, int op)
{
    if (isnan(x) || isnan(y)) return NAN;
    return op == PMC_FTAR_SUM ? x + y : op == PMC_FTAR_MAX ? (x > y ? x : y) : (x < y ? x : y);
}

static uint64_t uop(uint64_t x, uint64_t y, int op, int bits)
{
    if (op == PMC_FTAR_SUM) return x + y;
    const int64_t a = bits == 32 ? (int32_t)(uint32_t)x : (int64_t)x, b = bits == 32 ? (int32_t)(uint32_t)y : (int64_t)y;
    return (uint64_t)(op == PMC_FTAR_MAX ? (a > b ? a : b) : (a < b ? a : b));
}

/* Compares out (member 0's) with the serial reduction; -1 if equal, else
 * the first differing element. */
static int64_t check_result(const void *out, uint64_t seed, uint32_t n, const int *contrib, size_t count, int dtype,
                            int op)
{
    for (size_t e = 0; e < count; ++e) {
        if (dtype == PMC_FTAR_INT32 || dtype == PMC_FTAR_INT64) {
            const int bits = dtype == PMC_FTAR_INT32 ? 32 : 64;
            uint64_t acc = 0;
            for (uint32_t p = 0; p < n; ++p) {
                const uint64_t v = contrib[p] ? (uint64_t)ival(seed, p, e, dtype) : 0;
                acc = p == 0 ? v : uop(acc, v, op, bits);
            }
            const uint64_t got = bits == 32 ? (uint32_t)((const int32_t *)out)[e] : (uint64_t)((const int64_t *)out)[e];
            if (bits == 32 ? (uint32_t)acc != got : acc != got) return (int64_t)e;
            continue;
        }
        double acc = 0;
        for (uint32_t p = 0; p < n; ++p) {
            double v = 0;
            if (contrib[p]) v = is_nan_slot(p, e, n, dtype) ? NAN : (double)ival(seed, p, e, dtype);
            acc = p == 0 ? v : dop(acc, v, op);
        }
        double got;
        if (dtype == PMC_FTAR_FLOAT32) got = ((const float *)out)[e];
        else if (dtype == PMC_FTAR_FLOAT64) got = ((const double *)out)[e];
        else {
            float f;
            pmc_ftar_widen(&f, (const uint16_t *)out + e, 1, dtype);
            got = f;
        }
        if (isnan(acc) ? !isnan(got) : acc != got) return (int64_t)e;
    }
    return -1;
}

/* ---- One allreduce among the members of a mesh ------------------------ */

typedef struct run_cfg {
    size_t count;
    int dtype, op, integrity;
    uint32_t chunk_bytes;
    int pattern;            /* which members contribute (see contributes) */
} run_cfg;

static int contributes(int pattern, uint32_t p, uint32_t n)
{
    switch (pattern % 5) {
    case 0: return 1;
    case 1: return p != 0;
    case 2: return p == n - 1;
    case 3: return 0;
    default: return p % 2 == 1;
    }
}

static uint64_t g_op_no = 1; /* the test's own counter of operations (header step) */

static void run_one(mesh *m, member *ms, const run_cfg *c, void **bufs)
{
    const uint32_t n = m->n;
    const size_t es = pmc_ftar_dtype_size(c->dtype), bytes = c->count * es;
    const uint64_t seed = t_mix(g_op_no * 977 + (uint64_t)c->dtype);
    int contrib[MAXN];
    uint32_t want_contrib = 0;
    for (uint32_t p = 0; p < n; ++p) {
        contrib[p] = contributes(c->pattern, p, n);
        want_contrib += (uint32_t)contrib[p];
        unsigned char *in = bufs[2 * p], *out = bufs[2 * p + 1];
        fill_input(in, seed, p, n, c->count, c->dtype);
        memset(out, 0xA5, bytes + 8); /* stale bytes must be overwritten, the guard must stay */
        member_setup(&ms[p], m, p, g_op_no, c->chunk_bytes, c->integrity);
        ms[p].in = c->count ? in : NULL;
        ms[p].out = c->count ? out : NULL;
        ms[p].count = c->count;
        ms[p].dtype = c->dtype;
        ms[p].op = c->op;
        ms[p].contribute = contrib[p];
    }
    ++g_op_no;
    run_members(ms, n);
    snprintf(t_who, sizeof(t_who), "N=%u S=%u count=%zu dtype=%d op=%d mac=%d chunk=%u pattern=%d", n, m->streams,
             c->count, c->dtype, c->op, c->integrity, c->chunk_bytes, c->pattern % 5);
    for (uint32_t p = 0; p < n; ++p) {
        CHECK(ms[p].rc == PMC_RING_OK, "member %u: %s", p, pmc_ring_strerror(ms[p].rc));
        CHECK(ms[p].n_contrib == want_contrib, "member %u: n_contrib %u, want %u", p, ms[p].n_contrib, want_contrib);
        /* The AG point comes with the first AG item received: member p
         * receives every segment but its own (p+1), possibly all empty. */
        const uint32_t own = (p + 1) % n;
        const size_t own_len = c->count / n + (own < c->count % n);
        CHECK(ms[p].fault_calls[0] == 1 && ms[p].fault_calls[1] == (c->count > own_len),
              "member %u: fault calls %d %d", p, ms[p].fault_calls[0], ms[p].fault_calls[1]);
        const unsigned char *out = bufs[2 * p + 1];
        CHECK(t_verify_const(out + bytes, 8, 0xA5) < 0, "member %u: wrote past out", p);
        if (p > 0) CHECK(memcmp(out, bufs[1], bytes) == 0, "member %u: bits differ from member 0", p);
        /* in is untouched */
        unsigned char *again = bufs[2 * n];
        fill_input(again, seed, p, n, c->count, c->dtype);
        CHECK(memcmp(again, bufs[2 * p], bytes) == 0, "member %u: input modified", p);
    }
    const int64_t bad = check_result(bufs[1], seed, n, contrib, c->count, c->dtype, c->op);
    CHECK(bad < 0, "result differs from the serial reduction at element %lld", (long long)bad);
    snprintf(t_who, sizeof(t_who), "main");
}

static void **alloc_bufs(uint32_t n, size_t bytes)
{
    void **b = calloc(2 * n + 1, sizeof(void *));
    for (uint32_t k = 0; k < 2 * n + 1; ++k) b[k] = malloc(bytes + 8);
    return b;
}

static void free_bufs(void **b, uint32_t n)
{
    for (uint32_t k = 0; k < 2 * n + 1; ++k) free(b[k]);
    free(b);
}

static void free_scratch(member *ms, uint32_t n)
{
    for (uint32_t p = 0; p < n; ++p) {
        free(ms[p].scratch);
        ms[p].scratch = NULL;
        ms[p].scratch_bytes = 0;
    }
}

static void test_matrix(void)
{
    const uint32_t ns_full[] = {2, 3, 4, 8}, ns_quick[] = {2, 3, 4};
    const size_t small_full[] = {0, 1, 2, 7, 1000}, small_quick[] = {0, 1, 7, 1000};
    const uint32_t *ns = g_quick ? ns_quick : ns_full;
    const size_t *smalls = g_quick ? small_quick : small_full;
    const int nn = g_quick ? 3 : 4, nsmall = g_quick ? 4 : 5, max_streams = g_quick ? 2 : 3;
    const size_t big = g_quick ? 20000 + 3 : ((size_t)1 << 20) + 3;
    member ms[MAXN];
    memset(ms, 0, sizeof(ms));
    int runs = 0;
    for (int a = 0; a < nn; ++a) {
        const uint32_t n = ns[a];
        void **bufs = alloc_bufs(n, big * 8);
        for (uint32_t streams = 1; streams <= (uint32_t)max_streams; ++streams) {
            mesh m;
            if (mesh_open(&m, n, streams, 0) != 0) return;
            for (int b = 0; b < nsmall; ++b)
                for (int dtype = 0; dtype < PMC_FTAR_DTYPE_COUNT; ++dtype)
                    for (int op = 0; op < PMC_FTAR_OP_COUNT; ++op)
                        for (int integ = 0; integ < 2; ++integ) {
                            if (g_quick && (op + integ + dtype) % 3 != 0) continue;
                            /* Mostly the smallest chunk (many chunks per
                             * segment), sometimes larger ones. */
                            const uint32_t chunk = runs % 4 == 3 ? 4096u << (runs % 3 * 3) : 1024u;
                            const run_cfg c = {.count = smalls[b], .dtype = dtype, .op = op, .integrity = integ,
                                               .chunk_bytes = chunk, .pattern = runs};
                            run_one(&m, ms, &c, bufs);
                            ++runs;
                        }
            /* Large counts: the largest once per N (a different dtype
             * each time), a medium one for each other streams value; in the
             * quick run every dtype at the (smaller) large count. */
            for (int dtype = 0; dtype < PMC_FTAR_DTYPE_COUNT; ++dtype) {
                const int pick = (a * 3 + (int)streams) % PMC_FTAR_DTYPE_COUNT;
                if (!g_quick && dtype != pick) continue;
                const size_t count = g_quick || streams == (uint32_t)(a % 3 + 1) ? big : 100003;
                const run_cfg c = {.count = count, .dtype = dtype, .op = (dtype + a) % 3,
                                   .integrity = (dtype + (int)streams) % 2, .chunk_bytes = dtype % 2 ? 1024 : 65536,
                                   .pattern = dtype + a};
                run_one(&m, ms, &c, bufs);
                ++runs;
            }
            /* The sequence numbers moved in step on both ends. */
            for (uint32_t i = 0; i < n; ++i)
                for (uint32_t s = 0; s < streams; ++s)
                    CHECK(m.send[i][s].seq == m.recv[(i + 1) % n][s].seq, "seq of %u/%u: %llu vs %llu", i, s,
                          (unsigned long long)m.send[i][s].seq, (unsigned long long)m.recv[(i + 1) % n][s].seq);
            mesh_close(&m);
        }
        free_bufs(bufs, n);
    }
    /* Loopback TCP as well. */
    {
        const uint32_t n = 3;
        void **bufs = alloc_bufs(n, big * 8);
        mesh m;
        if (mesh_open(&m, n, 2, 1) == 0) {
            const run_cfg cs[] = {
                {.count = 7, .dtype = PMC_FTAR_FLOAT32, .op = PMC_FTAR_SUM, .integrity = 1, .chunk_bytes = 1024},
                {.count = big, .dtype = PMC_FTAR_FLOAT32, .op = PMC_FTAR_SUM, .integrity = 0, .chunk_bytes = 1024},
                {.count = big, .dtype = PMC_FTAR_BFLOAT16, .op = PMC_FTAR_MAX, .integrity = 1,
                 .chunk_bytes = 262144, .pattern = 1},
            };
            for (size_t k = 0; k < sizeof(cs) / sizeof(cs[0]); ++k) run_one(&m, ms, &cs[k], bufs);
            runs += 3;
            mesh_close(&m);
        }
        free_bufs(bufs, n);
    }
    free_scratch(ms, MAXN);
    printf("matrix: %d allreduces\n", runs);
}

/* ---- Failures --------------------------------------------------------------- */

typedef struct hangup_arg {
    int fd_read;            /* reads a little from here first */
    int fds[2 * MAXS];      /* then closes these */
    int nfds;
} hangup_arg;

static void *hangup_main(void *arg)
{
    hangup_arg *h = arg;
    struct pollfd p = {.fd = h->fd_read, .events = POLLIN};
    char buf[100];
    size_t got = 0;
    while (got < sizeof(buf) && poll(&p, 1, 5000) > 0) {
        const ssize_t r = read(h->fd_read, buf, sizeof(buf) - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    for (int k = 0; k < h->nfds; ++k) close(h->fds[k]);
    return NULL;
}

/* Member 1 of 2 reads a few bytes and closes its connections: member 0 gets
 * PEER_LOST, not a hang. */
static void test_peer_closes(int tcp)
{
    mesh m;
    if (mesh_open(&m, 2, 2, tcp) != 0) return;
    const size_t count = 200000;
    float *in = calloc(count, 4), *out = calloc(count, 4);
    member p;
    memset(&p, 0, sizeof(p));
    member_setup(&p, &m, 0, 1, 4096, 0);
    p.a.deadline_ms = pmc_ftar_now_ms() + 10000;
    p.in = in;
    p.out = out;
    p.count = count;
    p.contribute = 1;
    hangup_arg h = {.fd_read = m.recv[1][0].fd, .nfds = 4,
                    .fds = {m.send[1][0].fd, m.send[1][1].fd, m.recv[1][0].fd, m.recv[1][1].fd}};
    pthread_t th;
    pthread_create(&th, NULL, hangup_main, &h);
    member_main(&p);
    pthread_join(th, NULL);
    CHECK(p.rc == PMC_RING_PEER_LOST, "peer closes (tcp=%d): %s", tcp, pmc_ring_strerror(p.rc));
    CHECK(p.secs < 5, "peer closes: took %.2f s", p.secs);
    for (uint32_t s = 0; s < 2; ++s) {
        close(m.send[0][s].fd);
        close(m.recv[0][s].fd);
    }
    free(p.scratch);
    free(in);
    free(out);
}

/* A member hangs up at its RS fault point: all members end with PEER_LOST. */
static void test_fault_hangup(void)
{
    const uint32_t n = 4;
    mesh m;
    if (mesh_open(&m, n, 2, 0) != 0) return;
    const size_t count = 300000;
    void **bufs = alloc_bufs(n, count * 4);
    member ms[MAXN];
    memset(ms, 0, sizeof(ms));
    for (uint32_t p = 0; p < n; ++p) {
        member_setup(&ms[p], &m, p, 1, 1024, 1);
        ms[p].a.deadline_ms = pmc_ftar_now_ms() + 10000;
        ms[p].in = bufs[2 * p];
        ms[p].out = bufs[2 * p + 1];
        memset(bufs[2 * p], 0, count * 4);
        ms[p].count = count;
        ms[p].contribute = 1;
    }
    ms[2].fault_shutdown = 1;
    run_members(ms, n);
    for (uint32_t p = 0; p < n; ++p) {
        CHECK(ms[p].rc == PMC_RING_PEER_LOST, "fault hang-up, member %u: %s", p, pmc_ring_strerror(ms[p].rc));
        CHECK(ms[p].secs < 5, "fault hang-up, member %u: took %.2f s", p, ms[p].secs);
    }
    CHECK(ms[2].fault_calls[0] == 1, "fault point RS called %d times", ms[2].fault_calls[0]);
    free_scratch(ms, n);
    free_bufs(bufs, n);
    mesh_close(&m);
}

typedef struct poke_arg {
    int fd;
    double delay;
} poke_arg;

static void *poke_main(void *arg)
{
    poke_arg *k = arg;
    t_sleep(k->delay);
    const char c = 1;
    ssize_t w = write(k->fd, &c, 1);
    (void)w;
    return NULL;
}

/* Member 1 stays silent: the abort descriptor ends member 0 (readable before
 * the call, or becoming readable during it); else the deadline. */
static void test_abort_and_timeout(void)
{
    mesh m;
    if (mesh_open(&m, 2, 1, 0) != 0) return;
    const size_t count = 50000;
    float *in = calloc(count, 4), *out = calloc(count, 4);
    member p;
    memset(&p, 0, sizeof(p));
    for (int mode = 0; mode < 3; ++mode) {
        int pfd[2];
        CHECK(pipe(pfd) == 0, "pipe");
        member_setup(&p, &m, 0, (uint64_t)mode, 1024, 0);
        p.in = in;
        p.out = out;
        p.count = count;
        p.contribute = 1;
        p.shutdown_on_error = 0;
        pthread_t th;
        poke_arg k = {.fd = pfd[1], .delay = 0.05};
        if (mode == 0) {
            p.a.abort_fd = pfd[0];
            CHECK(write(pfd[1], "x", 1) == 1, "poke");
        } else if (mode == 1) {
            p.a.abort_fd = pfd[0];
            pthread_create(&th, NULL, poke_main, &k);
        } else {
            p.a.abort_fd = pfd[0]; /* never readable */
            p.a.deadline_ms = pmc_ftar_now_ms() + 100;
        }
        member_main(&p);
        if (mode == 1) pthread_join(th, NULL);
        const int want = mode == 2 ? PMC_RING_TIMEOUT : PMC_RING_ABORTED;
        CHECK(p.rc == want, "mode %d: %s", mode, pmc_ring_strerror(p.rc));
        CHECK(p.secs < 2, "mode %d: took %.2f s", mode, p.secs);
        if (mode == 2) CHECK(p.secs >= 0.09, "timeout after %.3f s", p.secs);
        close(pfd[0]);
        close(pfd[1]);
        /* The half-sent operation leaves bytes in the connection: a fresh one. */
        mesh_close(&m);
        if (mesh_open(&m, 2, 1, 0) != 0) break;
    }
    mesh_close(&m);
    free(p.scratch);
    free(in);
    free(out);
}

/* A relay between member 0's stream 0 and member 1's flips one byte (at a
 * stream offset) and keeps a copy of the first frame. */
typedef struct relay_arg {
    int from, to;
    size_t flip_at;         /* SIZE_MAX: none */
    unsigned char first[128];
    size_t first_len;
} relay_arg;

static void *relay_main(void *arg)
{
    relay_arg *r = arg;
    unsigned char buf[8192];
    size_t pos = 0;
    for (;;) {
        const ssize_t got = read(r->from, buf, sizeof(buf));
        if (got <= 0) break;
        for (ssize_t k = 0; k < got; ++k) {
            if (pos + (size_t)k < sizeof(r->first)) r->first[pos + (size_t)k] = buf[k];
            if (pos + (size_t)k == r->flip_at) buf[k] ^= 0x10;
        }
        pos += (size_t)got;
        r->first_len = pos < sizeof(r->first) ? pos : sizeof(r->first);
        size_t sent = 0;
        while (sent < (size_t)got) {
            const ssize_t w = send(r->to, buf + sent, (size_t)got - sent, MSG_NOSIGNAL);
            if (w <= 0) goto out;
            sent += (size_t)w;
        }
    }
out:
    shutdown(r->to, SHUT_RDWR);
    shutdown(r->from, SHUT_RDWR);
    return NULL;
}

static void test_corruption(void)
{
    /* flip offset, integrity of member 0 (sender), of member 1 (receiver) */
    const struct {
        size_t flip;
        int mac0, mac1;
        const char *what;
    } cases[] = {
        {40 + 3, 1, 1, "count payload under MAC"},
        {80 + 40 + 10, 1, 1, "data payload under MAC"},
        {80 + 40 + 4096 + 5, 1, 1, "MAC bytes"},
        {33, 0, 0, "sequence number"},
        {0, 0, 0, "magic"},
        {13, 0, 0, "sender"},
        {SIZE_MAX, 0, 1, "MAC missing"},
        {SIZE_MAX, 1, 0, "MAC not expected"},
    };
    const size_t count = 20000;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ++ci) {
        mesh m;
        if (mesh_open(&m, 2, 1, 0) != 0) return;
        /* Reroute member 0's stream 0 through the relay. */
        int a[2], b[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, a) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, b) == 0, "pairs");
        close(m.send[0][0].fd);
        close(m.recv[1][0].fd);
        set_nonblocking(a[0]);
        set_nonblocking(b[1]);
        m.send[0][0].fd = a[0];
        m.recv[1][0].fd = b[1];
        relay_arg r = {.from = a[1], .to = b[0], .flip_at = cases[ci].flip};
        pthread_t th;
        pthread_create(&th, NULL, relay_main, &r);
        void **bufs = alloc_bufs(2, count * 4);
        member ms[2];
        memset(ms, 0, sizeof(ms));
        for (uint32_t p = 0; p < 2; ++p) {
            member_setup(&ms[p], &m, p, 5, 4096, p == 0 ? cases[ci].mac0 : cases[ci].mac1);
            ms[p].a.deadline_ms = pmc_ftar_now_ms() + 10000;
            memset(bufs[2 * p], 0, count * 4);
            ms[p].in = bufs[2 * p];
            ms[p].out = bufs[2 * p + 1];
            ms[p].count = count;
            ms[p].contribute = 1;
        }
        run_members(ms, 2);
        pthread_join(th, NULL);
        /* A corrupted frame is member 1's to find. With mismatched
         * integrity settings both directions are wrong: whoever reads a
         * header first finds it, the other may see the hang-up first. */
        const int mismatch = cases[ci].mac0 != cases[ci].mac1;
        CHECK(ms[1].rc == PMC_RING_BAD_FRAME || (mismatch && ms[0].rc == PMC_RING_BAD_FRAME), "%s: %s, %s",
              cases[ci].what, pmc_ring_strerror(ms[0].rc), pmc_ring_strerror(ms[1].rc));
        for (int p = 0; p < 2; ++p)
            CHECK(ms[p].rc == PMC_RING_PEER_LOST || ms[p].rc == PMC_RING_BAD_FRAME, "%s: member %d: %s",
                  cases[ci].what, p, pmc_ring_strerror(ms[p].rc));
        /* The first frame as sent is a well-formed FTAR frame (the count item). */
        if (cases[ci].flip >= 128 && cases[ci].mac0 && r.first_len >= 80) {
            pmc_ftar_header h;
            size_t fb;
            const int rc = pmc_ftar_frame_decode(r.first, 80, 64, m.send[0][0].key, 32, 1, &h, &fb);
            CHECK(rc == PMC_FTAR_OK && fb == 80 && h.type == PMC_FTAR_DATA && h.length == 8 && h.sender == 0 &&
                      h.epoch == 7 && h.step == 5 && h.seq == 0,
                  "first frame decodes: %s (len %u seq %llu)", pmc_ftar_strerror(rc), h.length,
                  (unsigned long long)h.seq);
            CHECK(r.first[40] == 1, "count payload %u", r.first[40]);
        }
        free_scratch(ms, 2);
        free_bufs(bufs, 2);
        close(a[1]);
        close(b[0]);
        mesh_close(&m);
    }
}

static void test_bad_args(void)
{
    mesh m;
    if (mesh_open(&m, 2, 1, 0) != 0) return;
    member p;
    memset(&p, 0, sizeof(p));
    float buf[16];
    uint32_t nc;
    member_setup(&p, &m, 0, 1, 1024, 0);
    pmc_ring_args a = p.a;
    CHECK(pmc_ring_allreduce(NULL, buf, buf + 8, 8, 0, 0, 1, &nc) == PMC_RING_BAD_ARG, "NULL args");
    a.n = 1;
    CHECK(pmc_ring_allreduce(&a, buf, buf + 8, 8, 0, 0, 1, &nc) == PMC_RING_BAD_ARG, "n = 1");
    a = p.a;
    a.index = 2;
    CHECK(pmc_ring_allreduce(&a, buf, buf + 8, 8, 0, 0, 1, &nc) == PMC_RING_BAD_ARG, "index");
    a = p.a;
    a.streams = 0;
    CHECK(pmc_ring_allreduce(&a, buf, buf + 8, 8, 0, 0, 1, &nc) == PMC_RING_BAD_ARG, "streams");
    a = p.a;
    a.chunk_bytes = 1023;
    CHECK(pmc_ring_allreduce(&a, buf, buf + 8, 8, 0, 0, 1, &nc) == PMC_RING_BAD_ARG, "chunk");
    a = p.a;
    CHECK(pmc_ring_allreduce(&a, buf, buf + 8, 8, PMC_FTAR_DTYPE_COUNT, 0, 1, &nc) == PMC_RING_BAD_ARG, "dtype");
    CHECK(pmc_ring_allreduce(&a, buf, buf + 8, 8, 0, PMC_FTAR_OP_COUNT, 1, &nc) == PMC_RING_BAD_ARG, "op");
    CHECK(pmc_ring_allreduce(&a, NULL, buf + 8, 8, 0, 0, 1, &nc) == PMC_RING_BAD_ARG, "NULL in");
    CHECK(pmc_ring_allreduce(&a, buf, buf + 4, 8, 0, 0, 1, &nc) == PMC_RING_BAD_ARG, "overlap");
    CHECK(pmc_ring_allreduce(&a, buf, buf, 8, 0, 0, 1, &nc) == PMC_RING_BAD_ARG, "in place");
    a.scratch = NULL;
    CHECK(pmc_ring_allreduce(&a, buf, buf + 8, 8, 0, 0, 1, &nc) == PMC_RING_BAD_ARG, "scratch");
    CHECK(strcmp(pmc_ring_strerror(PMC_RING_BAD_ARG), "invalid ring argument") == 0, "strerror");
    free(p.scratch);
    mesh_close(&m);
}

/* ---- 16-bit conversions ------------------------------------------------ */

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint16_t narrow1(float f, int dtype)
{
    uint16_t h;
    pmc_ftar_narrow(&h, &f, 1, dtype);
    return h;
}

static float widen1(uint16_t h, int dtype)
{
    float f;
    pmc_ftar_widen(&f, &h, 1, dtype);
    return f;
}

/* The nearest f16 by search over all finite f16 values (ties to even): an
 * independent reference for the bit-level rounding. */
static uint16_t f16_reference(float f, const float *pos_values)
{
    if (isnan(f)) return 0x7e00;
    const uint16_t sign = signbit(f) ? 0x8000 : 0;
    const double x = fabs((double)f);
    /* 65520 and beyond round to inf (the next step would be 65536). */
    if (x >= 65520.0) return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7bff; /* largest value <= x is in [lo, hi] */
    while (lo < hi) {
        const uint32_t mid = (lo + hi + 1) / 2;
        if ((double)pos_values[mid] <= x) lo = mid;
        else hi = mid - 1;
    }
    if ((double)pos_values[lo] == x || lo == 0x7bff) return (uint16_t)(sign | lo);
    const double dlo = x - (double)pos_values[lo], dhi = (double)pos_values[lo + 1] - x;
    const uint32_t pick = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
    return (uint16_t)(sign | pick);
}

static void test_conversions(void)
{
    const int BF = PMC_FTAR_BFLOAT16, H = PMC_FTAR_FLOAT16;
    const struct {
        uint32_t f;
        int dtype;
        uint16_t want;
    } known[] = {
        {0x3f800000, BF, 0x3f80},             /* 1 */
        {0x3f808000, BF, 0x3f80},             /* 1 + half an ulp: tie to even (down) */
        {0x3f818000, BF, 0x3f82},             /* 1 + 1.5 ulp: tie to even (up) */
        {0x3f808001, BF, 0x3f81},             /* above the tie */
        {0xbf80ffff, BF, 0xbf81},
        {0x7f7fffff, BF, 0x7f80},             /* FLT_MAX overflows to inf */
        {0x7f7f7fff, BF, 0x7f7f},
        {0x7f800000, BF, 0x7f80},
        {0xff800000, BF, 0xff80},
        {0x7f800001, BF, 0x7fc0},             /* NaN with a low payload stays NaN */
        {0xffc00000, BF, 0xffc0},
        {0x80000000, BF, 0x8000},
        {0x00008000, BF, 0x0000},             /* subnormal tie to even */
        {0x00018000, BF, 0x0002},
        {0x007fffff, BF, 0x0080},             /* largest subnormal rounds to smallest normal */
        {0x3f800000, H, 0x3c00},
        {0x3f801000, H, 0x3c00},              /* 1 + 2^-11: tie to even */
        {0x3f803000, H, 0x3c02},              /* 1 + 3 * 2^-11 */
        {0x3dcccccd, H, 0x2e66},              /* 0.1 */
        {0x477fe000, H, 0x7bff},              /* 65504 */
        {0x477fefff, H, 0x7bff},              /* just below 65520 */
        {0x477ff000, H, 0x7c00},              /* 65520: inf */
        {0x49742400, H, 0x7c00},              /* 1e6 */
        {0x7f800000, H, 0x7c00},
        {0xff800000, H, 0xfc00},
        {0x7fc00000, H, 0x7e00},
        {0x7f800001, H, 0x7e00},
        {0x33800000, H, 0x0001},              /* 2^-24 */
        {0x33000000, H, 0x0000},              /* 2^-25: tie to even (zero) */
        {0x33000001, H, 0x0001},
        {0x33c00000, H, 0x0002},              /* 3 * 2^-25: tie to even (2) */
        {0x38800000, H, 0x0400},              /* 2^-14 */
        {0x387fe000, H, 0x0400},              /* 2^-14 - 2^-25: tie, up to the normal */
        {0x387fa000, H, 0x03fe},
        {0xb3800000, H, 0x8001},
        {0x80000000, H, 0x8000},
        {0x2f800000, H, 0x0000},              /* far below: zero */
    };
    for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); ++k) {
        const uint16_t got = narrow1(bits_f(known[k].f), known[k].dtype);
        CHECK(got == known[k].want, "narrow %08x (dtype %d): %04x, want %04x", known[k].f, known[k].dtype, got,
              known[k].want);
    }
    const struct {
        uint16_t h;
        int dtype;
        uint32_t want;
    } wide[] = {
        {0x3c00, H, 0x3f800000}, {0x0001, H, 0x33800000}, {0x03ff, H, 0x387fc000}, {0x0400, H, 0x38800000},
        {0x7bff, H, 0x477fe000}, {0x7c00, H, 0x7f800000}, {0xfc00, H, 0xff800000}, {0x8000, H, 0x80000000},
        {0x3555, H, 0x3eaaa000}, {0x8001, H, 0xb3800000}, {0x3f80, BF, 0x3f800000}, {0x0001, BF, 0x00010000},
        {0xff80, BF, 0xff800000},
    };
    for (size_t k = 0; k < sizeof(wide) / sizeof(wide[0]); ++k) {
        const uint32_t got = f_bits(widen1(wide[k].h, wide[k].dtype));
        CHECK(got == wide[k].want, "widen %04x (dtype %d): %08x, want %08x", wide[k].h, wide[k].dtype, got,
              wide[k].want);
    }
    CHECK(isnan(widen1(0x7e00, H)) && isnan(widen1(0x7c01, H)) && isnan(widen1(0xffc1, BF)), "NaN widens to NaN");
    /* Every 16-bit value survives the round trip (NaNs stay NaNs). */
    static uint16_t all[65536], back[65536];
    static float wide_all[65536];
    for (int dtype = BF; dtype <= H; ++dtype) {
        for (uint32_t k = 0; k < 65536; ++k) all[k] = (uint16_t)k;
        pmc_ftar_widen(wide_all, all, 65536, dtype);
        pmc_ftar_narrow(back, wide_all, 65536, dtype);
        int bad = 0;
        for (uint32_t k = 0; k < 65536; ++k) {
            const int nan = isnan(wide_all[k]);
            if (nan ? (back[k] & 0x7fff) <= (dtype == H ? 0x7c00 : 0x7f80) : back[k] != k) ++bad;
        }
        CHECK(bad == 0, "dtype %d: %d values fail the round trip", dtype, bad);
    }
    /* f16 narrowing of random floats against the search reference, and
     * bf16 against the same search over a simpler rule (nearest by
     * truncation of the exact value, in double). */
    static float pos_values[0x7c00];
    for (uint32_t k = 0; k < 0x7c00; ++k) pos_values[k] = widen1((uint16_t)k, H);
    const size_t nrand = g_quick ? 20000 : 1000000;
    int bad = 0;
    for (size_t k = 0; k < nrand; ++k) {
        uint32_t u = (uint32_t)t_mix(k + 12345);
        /* Bias toward the f16 range, where the interesting cases are. */
        if (k % 2 == 0) u = (u & 0x80000000u) | (0x30000000u + (u % 0x18000000u));
        const float f = bits_f(u);
        const uint16_t got = narrow1(f, H), want = f16_reference(f, pos_values);
        if (isnan(f) ? (got & 0x7c00) != 0x7c00 || (got & 0x3ff) == 0 : got != want) {
            if (bad++ < 5) CHECK(0, "f16 narrow %08x: %04x, want %04x", u, got, want);
        }
        /* bf16: the two neighbours are the truncation and the next value up. */
        if (!isnan(f) && !isinf(f)) {
            const uint32_t t = u & 0xffff0000u, rem = u & 0xffffu;
            uint32_t w = t >> 16;
            if (rem > 0x8000u || (rem == 0x8000u && (w & 1))) ++w;
            const uint16_t gb = narrow1(f, BF);
            if (gb != (uint16_t)w) {
                if (bad++ < 5) CHECK(0, "bf16 narrow %08x: %04x, want %04x", u, gb, (unsigned)w);
            }
        }
    }
}

/* ---- Throughput (PMC_RING_BENCH) ---------------------------------------- */

static void bench(void)
{
    const char *ns = getenv("PMC_RING_BENCH_N"), *mbs = getenv("PMC_RING_BENCH_MB");
    const uint32_t n = ns ? (uint32_t)atoi(ns) : 2;
    const size_t mb = mbs ? (size_t)atoi(mbs) : 64, count = mb << 18;
    if (n < 2 || n > MAXN) return;
    void **bufs = alloc_bufs(n, count * 4);
    for (uint32_t k = 0; k < 2 * n; ++k) memset(bufs[k], 0, count * 4);
    member ms[MAXN];
    memset(ms, 0, sizeof(ms));
    for (uint32_t streams = 1; streams <= 2; ++streams) {
        mesh m;
        if (mesh_open(&m, n, streams, 1) != 0) return;
        for (int integ = 0; integ < 2; ++integ) {
            double best = 1e9;
            for (int rep = 0; rep < 4; ++rep) {
                for (uint32_t p = 0; p < n; ++p) {
                    member_setup(&ms[p], &m, p, g_op_no, PMC_FTAR_DEFAULT_CHUNK_BYTES, integ);
                    ms[p].a.fault = NULL;
                    ms[p].in = bufs[2 * p];
                    ms[p].out = bufs[2 * p + 1];
                    ms[p].count = count;
                    ms[p].contribute = 1;
                }
                ++g_op_no;
                const double t0 = t_now();
                run_members(ms, n);
                const double dt = t_now() - t0;
                for (uint32_t p = 0; p < n; ++p) CHECK(ms[p].rc == PMC_RING_OK, "%s", pmc_ring_strerror(ms[p].rc));
                if (rep > 0 && dt < best) best = dt; /* the first warms the buffers and scratch */
            }
            printf("bench: N=%u %zu MiB float32 streams=%u integrity=%d: %.1f ms, algbw %.2f GB/s\n", n, mb,
                   streams, integ, best * 1e3, (double)(count * 4) / best / 1e9);
        }
        mesh_close(&m);
    }
    free_scratch(ms, n);
    free_bufs(bufs, n);
}

int main(void)
{
    const char *q = getenv("PMC_TEST_QUICK");
    g_quick = q != NULL && q[0] != '\0' && strcmp(q, "0") != 0;
    if (getenv("PMC_RING_BENCH") != NULL) {
        bench();
        return t_failures ? 1 : 0;
    }
    const double t0 = t_now();
    double t = t0;
#define TIMED(call)                                                             \
    do {                                                                        \
        call;                                                                   \
        printf("%-28s %6.2f s\n", #call, t_now() - t);                         \
        t = t_now();                                                            \
    } while (0)
    TIMED(test_conversions());
    TIMED(test_bad_args());
    TIMED(test_matrix());
    TIMED(test_peer_closes(0));
    TIMED(test_peer_closes(1));
    TIMED(test_fault_hangup());
    TIMED(test_abort_and_timeout());
    TIMED(test_corruption());
    printf("test_ftar_ring: %d failures (%.1f s)\n", t_failures, t_now() - t0);
    return t_failures ? 1 : 0;
}
