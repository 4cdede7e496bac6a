/* Node algorithms among N forked processes (N = 1..4) sharing one segment,
 * set up the way the core does it (local rank 0 creates, the others attach,
 * every rank registers its pid), and the failure paths of pmc_node_wait.
 * No MPI calls.
 *
 * A small data area and chunk make every collective of a few KiB wrap
 * around the cells many times, so pipelining and cell reuse are exercised;
 * every byte of every result is checked against data that changes with
 * each call.
 *
 * Usage: test_node_algos [--quick]   (--quick: fewer iterations, for valgrind)
 * Exit status: 0 when every check passed. */
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "coll/node_algos.h"
#include "comm.h"
#include "pymcoll.h"
#include "testutil.h"

#define MAXN 8
#define MSGLEN 768
#define GUARD 64
#define GUARD_BYTE 0xee

/* Bookkeeping shared by the processes of a group, outside the segment so
 * that it cannot disturb what is tested. */
typedef struct ctl {
    _Atomic uint64_t ready;     /* ranks registered and mapped */
    _Atomic uint64_t arrive;    /* barrier arrivals (full barriers) */
    _Atomic uint64_t arrive_in; /* arrivals at fan-in only barriers */
    _Atomic uint64_t token;     /* value rank 0 publishes before a fan-out */
    _Atomic int release;        /* frees the ranks that play "never posts" */
    _Atomic int done[MAXN];     /* rank finished its part */
    int rc[MAXN];
    double elapsed[MAXN];
    uint64_t step[MAXN];
    char msg[MAXN][MSGLEN];
} ctl_t;

static ctl_t *g_ctl;
/* The node algorithms run inside an op of a communicator, as in the core:
 * the node context lives in g_comm, every call gets a fresh op. Odd
 * iterations poll (the non-blocking path Test and the progress thread
 * take), even ones block. */
static pmc_comm g_comm;
static pmc_op g_op;
static int g_poll;

static pmc_op *fresh_op(void)
{
    memset(&g_op, 0, sizeof(g_op));
    g_op.c = &g_comm;
    g_op.blocking = !g_poll;
    g_op.mreq = MPI_REQUEST_NULL;
    return &g_op;
}
#define NODE_RUN0(rc, fn)                                     \
    do {                                                      \
        fresh_op();                                           \
        do (rc) = fn(&g_op, &g_op.f[0]);                      \
        while ((rc) == PMC_PENDING);                          \
    } while (0)
#define NODE_RUN(rc, fn, ...)                                 \
    do {                                                      \
        fresh_op();                                           \
        do (rc) = fn(&g_op, &g_op.f[0], __VA_ARGS__);         \
        while ((rc) == PMC_PENDING);                          \
    } while (0)
static char g_dir[PMC_SEG_PATH_MAX];
static int g_quick;

struct group;
typedef int (*rank_fn)(pmc_node *n, const struct group *g);

typedef struct group {
    const char *name;
    int n;               /* local ranks */
    uint64_t data_bytes; /* data area asked for */
    uint64_t chunk;      /* pipeline chunk */
    double timeout;      /* per wait */
    int iters;
    uint64_t start_step; /* step and flags at start (to cross 2^64) */
    int clean;           /* 1: the segment must end with no abort */
    rank_fn fn;
} group_t;

/* ---------------------------------------------------------------- helpers */

/* Polls *v >= target; 0 when reached, -1 after `limit` seconds. */
static int wait_counter(_Atomic uint64_t *v, uint64_t target, double limit)
{
    const double end = t_now() + limit;
    while (atomic_load(v) < target) {
        if (t_now() > end) return -1;
        t_sleep(1e-4);
    }
    return 0;
}

static int wait_flag(_Atomic int *v, double limit)
{
    const double end = t_now() + limit;
    while (!atomic_load(v)) {
        if (t_now() > end) return -1;
        t_sleep(1e-3);
    }
    return 0;
}

/* The allgather cell as gather_node_cico.c sizes it; used only to put
 * block sizes on the cell and region edges, results are checked anyway. */
static void allgather_geometry(const pmc_node *n, uint64_t *region, uint64_t *cell)
{
    *region = (n->seg.data_bytes / (uint64_t)n->local_size) & ~(uint64_t)63;
    *cell = (*region / 2) & ~(uint64_t)63;
    if (*cell > ((uint64_t)1 << 20)) *cell = (uint64_t)1 << 20;
}

static void record(const pmc_node *n, int rc, double elapsed)
{
    const int me = n->local_rank;
    g_ctl->rc[me] = rc;
    g_ctl->elapsed[me] = elapsed;
    snprintf(g_ctl->msg[me], MSGLEN, "%s", n->errmsg);
    atomic_store(&g_ctl->done[me], 1);
}

/* ------------------------------------------------------- one collective */

/* Full barrier (flags, or fan-in + fan-out) checked with a counter: after
 * the k-th barrier every rank has arrived k times, and nobody can have
 * arrived a (k+2)-th time since that needs this rank. */
static int do_barrier(pmc_node *n, uint64_t *k, int fan)
{
    const uint64_t N = (uint64_t)n->local_size;
    atomic_fetch_add(&g_ctl->arrive, 1);
    ++*k;
    ++n->coll_seq;
    int rc;
    if (!fan) {
        n->coll = "barrier_node_flags";
        NODE_RUN0(rc, pmc_barrier_node_flags);
    } else {
        n->coll = "barrier_node_fanin";
        NODE_RUN0(rc, pmc_barrier_node_fanin);
        CHECK_RC(rc, PMC_OK, n->errmsg);
        if (rc != PMC_OK) return rc;
        /* Fan-in alone: local rank 0 has seen everyone arrive. */
        if (n->local_rank == 0) {
            uint64_t c = atomic_load(&g_ctl->arrive);
            CHECK(c >= N * *k, "fan-in #%" PRIu64 " released rank 0 at count %" PRIu64, *k, c);
        }
        n->coll = "barrier_node_fanout";
        NODE_RUN0(rc, pmc_barrier_node_fanout);
    }
    CHECK_RC(rc, PMC_OK, n->errmsg);
    if (rc != PMC_OK) return rc;
    uint64_t c = atomic_load(&g_ctl->arrive);
    CHECK(c >= N * *k && c <= N * *k + N - 1, "%s barrier #%" PRIu64 ": count %" PRIu64
          " outside [%" PRIu64 ", %" PRIu64 "]", fan ? "fan" : "flags", *k, c, N * *k, N * *k + N - 1);
    return PMC_OK;
}

static int do_bcast(pmc_node *n, uint64_t it, uint64_t bytes, int root)
{
    const uint64_t seed = t_seed(it, bytes, (uint64_t)root, 0xbc);
    const unsigned char junk = (unsigned char)(0x5a ^ (it * 13));
    unsigned char *buf = malloc(bytes + GUARD);
    CHECK(buf != NULL, "malloc of %" PRIu64 " bytes", bytes + GUARD);
    if (buf == NULL) return PMC_ERR_NOMEM;
    if (n->local_rank == root) t_fill(buf, bytes, seed);
    else memset(buf, junk, bytes);
    memset(buf + bytes, GUARD_BYTE, GUARD);
    n->coll = "bcast_node_cico";
    ++n->coll_seq;
    int rc;
    NODE_RUN(rc, pmc_bcast_node_cico, buf, bytes, root);
    CHECK_RC(rc, PMC_OK, n->errmsg);
    if (rc == PMC_OK) {
        int64_t bad = t_verify(buf, bytes, seed);
        CHECK(bad < 0, "bcast #%" PRIu64 " of %" PRIu64 " bytes from %d: byte %" PRId64
              " is %#x, expected %#x", n->coll_seq, bytes, root, bad, bad < 0 ? 0 : buf[bad],
              bad < 0 ? 0 : t_byte(seed, (uint64_t)bad));
        CHECK(t_verify_const(buf + bytes, GUARD, GUARD_BYTE) < 0,
              "bcast of %" PRIu64 " bytes wrote past the buffer", bytes);
    }
    free(buf);
    return rc;
}

/* Allgather (root < 0) or gather to root, in place or not. A gather's
 * non-root ranks sometimes pass no receive buffer: it is documented as
 * ignored there. */
static int do_allgather(pmc_node *n, uint64_t it, uint64_t block, int root, int inplace)
{
    const int N = n->local_size, me = n->local_rank;
    const int reads = root < 0 || me == root;
    const uint64_t total = (uint64_t)N * block;
    const unsigned char junk = (unsigned char)(0xa5 ^ (it * 7));
    const int no_recv = !reads && !inplace && ((it + block) & 1);
    uint64_t seeds[MAXN];
    for (int j = 0; j < N; ++j) seeds[j] = t_seed(it, block, (uint64_t)j, 0xa0u + (uint64_t)(root + 1));

    unsigned char *recv = no_recv ? NULL : malloc(total + GUARD);
    unsigned char *sendbuf = inplace ? NULL : malloc(block + GUARD);
    if ((!no_recv && recv == NULL) || (!inplace && sendbuf == NULL)) {
        CHECK(0, "malloc of %" PRIu64 " bytes", total + GUARD);
        free(recv);
        free(sendbuf);
        return PMC_ERR_NOMEM;
    }
    if (recv != NULL) {
        memset(recv, junk, total);
        memset(recv + total, GUARD_BYTE, GUARD);
    }
    const unsigned char *send;
    if (inplace) {
        t_fill(recv + (uint64_t)me * block, block, seeds[me]);
        send = recv + (uint64_t)me * block;
    } else {
        t_fill(sendbuf, block, seeds[me]);
        memset(sendbuf + block, GUARD_BYTE, GUARD);
        send = sendbuf;
    }
    n->coll = root < 0 ? "allgather_node_cico" : "gather_node_cico";
    ++n->coll_seq;
    int rc;
    NODE_RUN(rc, pmc_gather_node_cico, send, recv, block, NULL, NULL, root, 1);
    CHECK_RC(rc, PMC_OK, n->errmsg);
    if (rc == PMC_OK) {
        for (int j = 0; j < N && recv != NULL; ++j) {
            const unsigned char *b = recv + (uint64_t)j * block;
            int64_t bad;
            if (reads || (inplace && j == me)) bad = t_verify(b, block, seeds[j]);
            else bad = t_verify_const(b, block, junk); /* must stay untouched */
            CHECK(bad < 0, "%s #%" PRIu64 " block=%" PRIu64 " root=%d inplace=%d: block %d byte %"
                  PRId64 " wrong", n->coll, n->coll_seq, block, root, inplace, j, bad);
        }
        if (recv != NULL)
            CHECK(t_verify_const(recv + total, GUARD, GUARD_BYTE) < 0, "%s wrote past recv", n->coll);
        if (!inplace) {
            CHECK(t_verify(sendbuf, block, seeds[me]) < 0, "%s changed the send buffer", n->coll);
            CHECK(t_verify_const(sendbuf + block, GUARD, GUARD_BYTE) < 0, "guard after send changed");
        }
    }
    free(recv);
    free(sendbuf);
    return rc;
}

/* ---------------------------------------------------- rank functions */

static int rank_barriers(pmc_node *n, const group_t *g)
{
    const int me = n->local_rank, N = n->local_size;
    uint64_t k = 0;
    for (int it = 0; it < g->iters; ++it) {
        g_poll = it & 1;
        int rc = do_barrier(n, &k, 0);
        if (rc == PMC_OK) rc = do_barrier(n, &k, 1);
        if (rc != PMC_OK) return rc;

        /* Fan-out alone: what rank 0 wrote before it is visible after it.
         * Rank 0 rewrites the token only after the next full barrier. */
        if (me == 0) atomic_store(&g_ctl->token, (uint64_t)it + 1);
        n->coll = "barrier_node_fanout";
        ++n->coll_seq;
        NODE_RUN0(rc, pmc_barrier_node_fanout);
        CHECK_RC(rc, PMC_OK, n->errmsg);
        if (rc != PMC_OK) return rc;
        if (me != 0)
            CHECK(atomic_load(&g_ctl->token) == (uint64_t)it + 1, "fan-out %d: token %" PRIu64, it,
                  atomic_load(&g_ctl->token));

        /* Fan-in alone: rank 0 sees every other rank's arrival. */
        if (me != 0) atomic_fetch_add(&g_ctl->arrive_in, 1);
        n->coll = "barrier_node_fanin";
        ++n->coll_seq;
        NODE_RUN0(rc, pmc_barrier_node_fanin);
        CHECK_RC(rc, PMC_OK, n->errmsg);
        if (rc != PMC_OK) return rc;
        if (me == 0) {
            uint64_t c = atomic_load(&g_ctl->arrive_in);
            CHECK(c >= (uint64_t)(N - 1) * ((uint64_t)it + 1), "fan-in %d: count %" PRIu64, it, c);
        }
    }
    return PMC_OK;
}

static int rank_bcast_sweep(pmc_node *n, const group_t *g)
{
    const uint64_t c = n->chunk, d = n->seg.data_bytes;
    const uint64_t sizes[] = {0, 1, 7, 64, c - 1, c, c + 1, d / 2 + 3, d - 1, 3 * d + 13};
    for (int it = 0; it < g->iters; ++it)
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i)
            for (int root = 0; root < n->local_size; ++root) {
                g_poll = (it + root) & 1;
                int rc = do_bcast(n, (uint64_t)it, sizes[i], root);
                if (rc != PMC_OK || t_failures > 20) return rc;
            }
    return PMC_OK;
}

static int rank_allgather_sweep(pmc_node *n, const group_t *g)
{
    uint64_t region, cell;
    allgather_geometry(n, &region, &cell);
    const uint64_t sizes[] = {0, 1, 7, 63, 64, 65, 1001, cell - 1, cell, cell + 1, region + 3,
                              2 * region + 5};
    for (int it = 0; it < g->iters; ++it)
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i)
            for (int root = -1; root < n->local_size; ++root)
                for (int inplace = 0; inplace < 2; ++inplace) {
                    g_poll = (it + root) & 1;
                    int rc = do_allgather(n, (uint64_t)it, sizes[i], root, inplace);
                    if (rc != PMC_OK || t_failures > 20) return rc;
                }
    return PMC_OK;
}

/* Every collective after every other, with sizes and roots drawn the same
 * way on all ranks: the data area changes roles (bcast cells, allgather
 * regions) between consecutive calls. */
static int rank_mixed(pmc_node *n, const group_t *g)
{
    const uint64_t c = n->chunk, d = n->seg.data_bytes;
    uint64_t region, cell;
    allgather_geometry(n, &region, &cell);
    const uint64_t bsizes[] = {0, 1, 7, 64, 100, c - 1, c, c + 1, 3 * c + 5, d - 3, 2 * d + 11};
    const uint64_t gsizes[] = {0, 1, 7, 63, 65, 513, cell - 1, cell + 1, region + 3, 2 * region + 5};
    const size_t nb = sizeof(bsizes) / sizeof(bsizes[0]), ng = sizeof(gsizes) / sizeof(gsizes[0]);
    uint64_t k = 0;
    for (int it = 0; it < g->iters; ++it) {
        const uint64_t h = t_mix((uint64_t)it * 977 + 31);
        const int root = (int)((h >> 8) % (uint64_t)n->local_size);
        const int inplace = (int)((h >> 20) & 1);
        g_poll = (int)((h >> 30) & 1);
        int rc;
        switch (h % 6) {
        case 0: rc = do_barrier(n, &k, 0); break;
        case 1: rc = do_barrier(n, &k, 1); break;
        case 2:
        case 3: rc = do_bcast(n, (uint64_t)it, bsizes[(h >> 24) % nb], root); break;
        case 4: rc = do_allgather(n, (uint64_t)it, gsizes[(h >> 24) % ng], -1, inplace); break;
        default: rc = do_allgather(n, (uint64_t)it, gsizes[(h >> 24) % ng], root, inplace); break;
        }
        if (rc != PMC_OK || t_failures > 20) return rc;
    }
    return PMC_OK;
}

/* Timeout: rank 0 waits for a live rank that never posts. The others wait
 * for release (given once rank 0 is done) and never call a collective. */
static int rank_timeout(pmc_node *n, const group_t *g)
{
    (void)g;
    if (n->local_rank != 0) {
        CHECK(wait_flag(&g_ctl->release, 30) == 0, "never released");
        return PMC_OK;
    }
    n->coll = "Barrier";
    n->coll_seq = 7;
    double t0 = t_now();
    int rc;
    NODE_RUN0(rc, pmc_barrier_node_flags);
    record(n, rc, t_now() - t0);
    CHECK(atomic_load(&n->seg.hdr->abort_rank) == 0, "abort_rank %d after the timeout",
          (int)atomic_load(&n->seg.hdr->abort_rank));
    atomic_store(&g_ctl->release, 1);
    return PMC_OK;
}

/* Timeout on the "done" flag: root 0 streams more than the data area to a
 * reader that never reads, and must stop when the cells are all in use. */
static int rank_timeout_ack(pmc_node *n, const group_t *g)
{
    (void)g;
    if (n->local_rank != 0) {
        CHECK(wait_flag(&g_ctl->release, 30) == 0, "never released");
        return PMC_OK;
    }
    const uint64_t bytes = 3 * n->seg.data_bytes;
    unsigned char *buf = calloc(1, bytes);
    CHECK(buf != NULL, "calloc");
    if (buf == NULL) return PMC_ERR_NOMEM;
    n->coll = "Bcast";
    n->coll_seq = 3;
    double t0 = t_now();
    int rc;
    NODE_RUN(rc, pmc_bcast_node_cico, buf, bytes, 0);
    record(n, rc, t_now() - t0);
    free(buf);
    atomic_store(&g_ctl->release, 1);
    return PMC_OK;
}

/* Rank 2 never posts; rank 0 times out on it and aborts; rank 1, which
 * waits with a long timeout, must stop at once with PMC_ERR_PEER_ABORTED. */
static int rank_broken(pmc_node *n, const group_t *g)
{
    (void)g;
    const int me = n->local_rank;
    if (me == 2) {
        CHECK(wait_flag(&g_ctl->release, 30) == 0, "never released");
        return PMC_OK;
    }
    n->coll = "Barrier";
    n->coll_seq = 11;
    if (me == 0) {
        /* Only rank 2 is missing when the deadline passes. */
        CHECK(wait_counter(&n->seg.seq[1].v, n->step + 1, 20) == 0, "rank 1 never posted");
        n->timeout = 0.2;
    } else {
        n->timeout = 20;
    }
    double t0 = t_now();
    int rc;
    NODE_RUN0(rc, pmc_barrier_node_flags);
    record(n, rc, t_now() - t0);
    if (me == 0) {
        /* Rank 2 leaves only after rank 1 has its answer: rank 1 must learn
         * of the abort, not of a dead peer. */
        CHECK(wait_flag(&g_ctl->done[1], 30) == 0, "rank 1 never finished");
        atomic_store(&g_ctl->release, 1);
    }
    return PMC_OK;
}

/* The rank `victim` exits without posting while the others wait. */
static int rank_dies(pmc_node *n, int victim)
{
    if (n->local_rank == victim) {
        t_sleep(0.05); /* the others are waiting by now */
        _exit(0);
    }
    n->coll = "Barrier";
    n->coll_seq = 5;
    double t0 = t_now();
    int rc;
    NODE_RUN0(rc, pmc_barrier_node_flags);
    record(n, rc, t_now() - t0);
    return PMC_OK;
}

static int rank_dies_last(pmc_node *n, const group_t *g) { return rank_dies(n, g->n - 1); }
static int rank_dies_first(pmc_node *n, const group_t *g)
{
    (void)g;
    return rank_dies(n, 0);
}

/* ---------------------------------------------------------- the group */

static int child_main(const group_t *g, int r, const pmc_segment *created, const char *path)
{
    snprintf(t_who, sizeof(t_who), "%s N=%d rank %d", g->name, g->n, r);
    t_failures = 0; /* the exit status counts this process's failures only */
    char err[MSGLEN] = "";
    pmc_segment seg;
    if (r == 0) {
        seg = *created; /* the creator keeps its mapping, as in the core */
    } else {
        int rc = pmc_segment_attach(&seg, path, g->n, err, sizeof(err));
        CHECK_RC(rc, PMC_OK, err);
        if (rc != PMC_OK) return 1;
    }
    seg.pids[r] = (int32_t)getpid();
    atomic_store(&seg.seq[r].v, g->start_step);
    atomic_store(&seg.ack[r].v, g->start_step);
    /* Everyone registered and mapped before the first wait, as the core's
     * setup guarantees with its MPI_Allreduce. */
    atomic_fetch_add(&g_ctl->ready, 1);
    CHECK(wait_counter(&g_ctl->ready, (uint64_t)g->n, 30) == 0, "group never assembled");

    pmc_node n;
    memset(&n, 0, sizeof(n));
    memset(&g_comm, 0, sizeof(g_comm));
    n.seg = seg;
    n.local_rank = r;
    n.local_size = g->n;
    n.step = g->start_step;
    n.timeout = g->timeout;
    n.yield_now = g->n > pmc_online_cpus();
    n.chunk = g->chunk;
    n.coll = "none";
    n.errmsg = err;
    n.errlen = sizeof(err);
    n.others = malloc(sizeof(int) * (size_t)g->n);
    CHECK(n.others != NULL, "malloc");
    if (n.others == NULL) return 1;
    /* Same order as the core: start at the right neighbour. */
    for (int j = 1; j < g->n; ++j) n.others[j - 1] = (r + j) % g->n;

    g_comm.node_ctx = n;
    int rc = g->fn(&g_comm.node_ctx, g);
    n = g_comm.node_ctx;
    if (g->clean) {
        CHECK_RC(rc, PMC_OK, err);
        CHECK(atomic_load(&n.seg.hdr->abort_rank) == -1, "abort_rank %d",
              (int)atomic_load(&n.seg.hdr->abort_rank));
    }
    g_ctl->step[r] = n.step;
    free(n.others);
    pmc_segment_detach(&n.seg);
    return t_failures > 100 ? 100 : t_failures;
}

/* Runs g->fn on g->n forked processes; reaps them in rank order (so a rank
 * that dies early stays a zombie while lower ranks run) under a watchdog. */
static void run_group(const group_t *g)
{
    snprintf(t_who, sizeof(t_who), "%s N=%d", g->name, g->n);
    memset(g_ctl, 0, sizeof(*g_ctl));
    char path[PMC_SEG_PATH_MAX], err[MSGLEN] = "";
    pmc_segment seg;
    int rc = pmc_segment_create(&seg, g_dir, g->n, g->data_bytes, 0, path, sizeof(path), err, sizeof(err));
    CHECK_RC(rc, PMC_OK, err);
    if (rc != PMC_OK) return;

    pid_t pids[MAXN];
    const pid_t parent = getpid();
    fflush(NULL);
    for (int r = 0; r < g->n; ++r) {
        pids[r] = fork();
        CHECK(pids[r] >= 0, "fork: %s", strerror(errno));
        if (pids[r] == 0) {
            /* Go with the parent if it is killed (timeout 120 in the runner). */
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(99);
            exit(child_main(g, r, &seg, path));
        }
    }
    pmc_segment_detach(&seg);

    const double deadline = t_now() + (g_quick ? 100.0 : 60.0);
    for (int r = 0; r < g->n; ++r) {
        if (pids[r] <= 0) continue;
        int status = 0;
        pid_t got;
        while ((got = waitpid(pids[r], &status, WNOHANG)) == 0 && t_now() < deadline) t_sleep(1e-3);
        if (got == 0) {
            CHECK(0, "rank %d still running at the watchdog deadline; killing the group", r);
            for (int q = r; q < g->n; ++q)
                if (pids[q] > 0) kill(pids[q], SIGKILL);
            got = waitpid(pids[r], &status, 0);
        }
        CHECK(got == pids[r], "waitpid: %s", strerror(errno));
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "rank %d %s %d", r, WIFEXITED(status) ? "exited with" : "killed by signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    CHECK(unlink(path) == 0, "unlink %s: %s", path, strerror(errno));
    if (g->clean)
        for (int r = 1; r < g->n; ++r)
            CHECK(g_ctl->step[r] == g_ctl->step[0], "rank %d ended at step %" PRIu64 ", rank 0 at %" PRIu64,
                  r, g_ctl->step[r], g_ctl->step[0]);
}

/* ------------------------------------------------------ failure tests */

static void test_failures(void)
{
    group_t g = {.data_bytes = 8192, .chunk = 1024, .iters = 1, .clean = 0};
    char want[64];

    /* A live peer that never posts: PMC_ERR_TIMEOUT about when the timeout
     * says, and the message names the missing rank. */
    g.name = "timeout";
    g.n = 2;
    g.timeout = 0.2;
    g.fn = rank_timeout;
    run_group(&g);
    CHECK_RC(g_ctl->rc[0], PMC_ERR_TIMEOUT, g_ctl->msg[0]);
    CHECK(g_ctl->elapsed[0] >= 0.2 && g_ctl->elapsed[0] < 2.0, "timed out after %.3f s, timeout 0.2 s",
          g_ctl->elapsed[0]);
    CHECK(strstr(g_ctl->msg[0], "local ranks [1]") != NULL && strstr(g_ctl->msg[0], "Barrier #7") != NULL &&
              strstr(g_ctl->msg[0], "local rank 0") != NULL,
          "message does not name the call, the waiter and the missing rank: %s", g_ctl->msg[0]);

    g.name = "timeout on done";
    g.fn = rank_timeout_ack;
    run_group(&g);
    CHECK_RC(g_ctl->rc[0], PMC_ERR_TIMEOUT, g_ctl->msg[0]);
    CHECK(g_ctl->elapsed[0] >= 0.2 && g_ctl->elapsed[0] < 2.0, "timed out after %.3f s", g_ctl->elapsed[0]);
    CHECK(strstr(g_ctl->msg[0], "local ranks [1]") != NULL && strstr(g_ctl->msg[0], "done flag") != NULL,
          "message: %s", g_ctl->msg[0]);

    /* One rank aborts; a rank waiting with a long timeout is told at once. */
    g.name = "broken";
    g.n = 3;
    g.timeout = 20;
    g.fn = rank_broken;
    run_group(&g);
    CHECK_RC(g_ctl->rc[0], PMC_ERR_TIMEOUT, g_ctl->msg[0]);
    CHECK(strstr(g_ctl->msg[0], "local ranks [2]") != NULL, "message: %s", g_ctl->msg[0]);
    CHECK_RC(g_ctl->rc[1], PMC_ERR_PEER_ABORTED, g_ctl->msg[1]);
    CHECK(g_ctl->elapsed[1] < 0.2 + 2.0, "rank 1 stopped after %.3f s", g_ctl->elapsed[1]);
    CHECK(strstr(g_ctl->msg[1], "local rank 0 gave up") != NULL && strstr(g_ctl->msg[1], "Barrier #11") != NULL,
          "message: %s", g_ctl->msg[1]);

    /* A peer that exits while rank 0 waits (it stays a zombie meanwhile):
     * PMC_ERR_PEER_DEAD long before the 20 s timeout. */
    g.name = "peer dead (zombie)";
    g.n = 2;
    g.fn = rank_dies_last;
    run_group(&g);
    CHECK_RC(g_ctl->rc[0], PMC_ERR_PEER_DEAD, g_ctl->msg[0]);
    CHECK(g_ctl->elapsed[0] < 2.0, "noticed after %.3f s", g_ctl->elapsed[0]);
    CHECK(strstr(g_ctl->msg[0], "local rank 1 (pid") != NULL && strstr(g_ctl->msg[0], "died") != NULL,
          "message: %s", g_ctl->msg[0]);

    /* Rank 0 exits and is reaped at once; each survivor either sees it dead
     * or sees the other survivor's abort, and at least one sees it dead. */
    g.name = "peer dead (reaped)";
    g.n = 3;
    g.fn = rank_dies_first;
    run_group(&g);
    int dead_seen = 0;
    for (int r = 1; r < 3; ++r) {
        const int rc = g_ctl->rc[r];
        CHECK(rc == PMC_ERR_PEER_DEAD || rc == PMC_ERR_PEER_ABORTED, "rank %d: status %d: %s", r, rc, g_ctl->msg[r]);
        CHECK(g_ctl->elapsed[r] < 2.0, "rank %d noticed after %.3f s", r, g_ctl->elapsed[r]);
        if (rc == PMC_ERR_PEER_DEAD) {
            ++dead_seen;
            CHECK(strstr(g_ctl->msg[r], "local rank 0 (pid") != NULL, "message: %s", g_ctl->msg[r]);
        } else {
            snprintf(want, sizeof(want), "local rank %d gave up", 3 - r);
            CHECK(strstr(g_ctl->msg[r], want) != NULL, "message: %s", g_ctl->msg[r]);
        }
    }
    CHECK(dead_seen > 0, "nobody reported the dead rank");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0) {
            g_quick = 1;
        } else {
            fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
            return 2;
        }
    }
    g_ctl = mmap(NULL, sizeof(ctl_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_ctl == MAP_FAILED) {
        fprintf(stderr, "FAIL [main] mmap: %s\n", strerror(errno));
        return 1;
    }
    if (t_make_dir(g_dir, sizeof(g_dir)) != 0) {
        fprintf(stderr, "FAIL [main] cannot make a temporary directory: %s\n", strerror(errno));
        return 1;
    }
    const double t0 = t_now();
    const int q = g_quick ? 4 : 1;

    /* Two geometries: many small cells (64 KiB area, 4 KiB chunks), and a
     * chunk larger than half the area so the ring has only two cells. */
    const struct { uint64_t data, chunk; } geo[2] = {{64u << 10, 4u << 10}, {8u << 10, 64u << 10}};
    for (int N = 1; N <= 4; ++N) {
        for (int k = 0; k < 2; ++k) {
            group_t g = {.n = N, .data_bytes = geo[k].data, .chunk = geo[k].chunk, .timeout = 20, .clean = 1};
            g.name = "barriers";
            g.fn = rank_barriers;
            g.iters = (k == 0 ? 400 : 100) / q;
            run_group(&g);
            g.name = "bcast";
            g.fn = rank_bcast_sweep;
            g.iters = 4 / q + 1;
            run_group(&g);
            g.name = "allgather";
            g.fn = rank_allgather_sweep;
            g.iters = 4 / q + 1;
            run_group(&g);
            g.name = "mixed";
            g.fn = rank_mixed;
            g.iters = 600 / q;
            run_group(&g);
            /* Steps and flags that cross 2^64 on the way. */
            g.name = "mixed across 2^64";
            g.start_step = UINT64_MAX - 40;
            g.iters = 100 / q;
            run_group(&g);
        }
        printf("test_node_algos: N=%d done (%.1f s)\n", N, t_now() - t0);
        fflush(stdout);
    }
    test_failures();

    snprintf(t_who, sizeof(t_who), "main");
    CHECK(rmdir(g_dir) == 0, "rmdir %s: %s", g_dir, strerror(errno));
    munmap(g_ctl, sizeof(ctl_t));
    if (t_failures) fprintf(stderr, "test_node_algos: %d check(s) failed\n", t_failures);
    else printf("test_node_algos: all checks passed (%.1f s)\n", t_now() - t0);
    return t_failures != 0;
}
