/* Waiting on flags: spin, then yield, then sleep (only sleep when the
 * communicator's waits must leave the CPU to other threads: PYMCOLL_WAIT=sleep),
 * with a deadline, peer liveness checks and a node-wide abort word. */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "node.h"
#include "pymcoll.h"

#define SPIN_POLLS 4000           /* polls before the first yield */
#define YIELD_SECONDS 0.002       /* yield this long before sleeping */
#define SLEEP_MIN_NS 1000L        /* first sleep */
#define SLEEP_MAX_NS 500000L      /* sleeps never exceed 0.5 ms */
#define LIVENESS_SECONDS 0.01     /* how often to look for dead peers */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

int pmc_online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int a = CPU_COUNT(&set);
        if (a > 0 && (n <= 0 || a < n)) n = a;
    }
    return n > 0 ? (int)n : 1;
}

static int pid_alive(int32_t pid)
{
    if (pid <= 0) return 1; /* not registered yet: cannot tell */
    if (kill((pid_t)pid, 0) == 0) {
        /* A zombie still answers kill(); its state letter says it is gone. */
        char path[64], buf[256];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        if (f == NULL) return 1;
        size_t got = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[got] = '\0';
        const char *rp = strrchr(buf, ')');
        return !(rp != NULL && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
    }
    return errno != ESRCH;
}

void pmc_node_abort(pmc_node *n)
{
    int32_t expected = -1;
    atomic_compare_exchange_strong(&n->seg.hdr->abort_rank, &expected, n->local_rank);
}

/* A copy touches a peer's exposed buffer only while the peer is still in
 * the collective: the busy mark comes first, then the look at the abort word
 * (both sequentially consistent), so a rank that gave up either sees the mark
 * in pmc_node_settle and waits for the copy, or the copier sees its abort. */
int pmc_node_copy_begin(pmc_node *n)
{
    atomic_store_explicit(&n->seg.busy[n->local_rank].v, 1, memory_order_seq_cst);
    const int32_t aborter = atomic_load_explicit(&n->seg.hdr->abort_rank, memory_order_seq_cst);
    if (aborter < 0) return PMC_OK;
    atomic_store_explicit(&n->seg.busy[n->local_rank].v, 0, memory_order_release);
    snprintf(n->errmsg, n->errlen,
             "%s #%" PRIu64 " abandoned: local rank %d gave up on a collective (see its error), so local "
             "rank %d stopped before copying", n->coll, n->coll_seq, (int)aborter, n->local_rank);
    return PMC_ERR_PEER_ABORTED;
}

void pmc_node_copy_end(pmc_node *n)
{
    atomic_store_explicit(&n->seg.busy[n->local_rank].v, 0, memory_order_release);
}

void pmc_node_settle(pmc_node *n)
{
    if (n->seg.base == NULL || n->local_size < 2) return;
    pmc_node_abort(n); /* no copy starts after this */
    const double start = now_seconds();
    long sleep_ns = SLEEP_MIN_NS;
    for (int i = 0; i < n->local_size; ++i) {
        while (i != n->local_rank && atomic_load_explicit(&n->seg.busy[i].v, memory_order_seq_cst) != 0) {
            /* A copy in progress ends within a system call; only a stopped
             * or dead copier keeps its mark. */
            if (!pid_alive(n->seg.pids[i])) break;
            if (n->timeout > 0 && now_seconds() >= start + n->timeout) {
                const size_t used = strlen(n->errmsg);
                snprintf(n->errmsg + used, n->errlen - used,
                         "; local rank %d was still copying to or from a buffer of this collective after %.3g s "
                         "(stopped?): do not reuse its buffers before that process ends", i, n->timeout);
                return;
            }
            if (sleep_ns == SLEEP_MIN_NS) sched_yield();
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < SLEEP_MAX_NS) sleep_ns *= 2;
        }
    }
}

/* Publishes the wait for trace dumps: what is written before `what`. */
static void wait_publish(pmc_node *n, int kind, const int *peers, int npeers, uint64_t target,
                         const pmc_flag *flags, size_t stride, double start)
{
    pmc_wait_info *w = &n->wait;
    atomic_store_explicit(&w->what, PMC_WAIT_NONE, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    w->kind = kind;
    w->npeers = npeers < PMC_WAIT_PEERS ? npeers : PMC_WAIT_PEERS;
    for (int i = 0; i < w->npeers; ++i) w->peers[i] = peers[i];
    w->flags = flags;
    w->stride = stride;
    w->target = target;
    w->since_ns = (uint64_t)(start * 1e9);
    w->call = NULL;
    w->coll = n->coll;
    w->seq = n->coll_seq;
    atomic_store_explicit(&w->what, PMC_WAIT_FLAG, memory_order_release);
}

static void wait_done(pmc_node *n) { atomic_store_explicit(&n->wait.what, PMC_WAIT_NONE, memory_order_release); }

/* Asks the local ranks that did not arrive to dump their trace: one stuck
 * outside pymcoll says what it last did. */
static void signal_missing(const pmc_node *n, const pmc_flag *flags, size_t stride, const int *peers,
                           int npeers, int from, uint64_t target)
{
    for (int i = from; i < npeers; ++i) {
        if (pmc_step_geq(pmc_flag_load(&flags[(size_t)peers[i] * stride]), target)) continue;
        const int32_t pid = n->seg.pids[peers[i]];
        if (pid > 0 && pid != (int32_t)getpid()) kill((pid_t)pid, SIGUSR1);
    }
}

static const char *flag_name(int kind)
{
    return kind == PMC_FLAG_SEQ ? "data" : kind == PMC_FLAG_ACK ? "done" : "inline data";
}

/* Flag of each peer: flags[peer * stride]. */
static void flags_of(const pmc_node *n, int kind, uint64_t target, const pmc_flag **flags, size_t *stride)
{
    if (kind == PMC_FLAG_LINE) {
        *flags = n->seg.inl + (size_t)(target % PMC_INLINE_SLOTS);
        *stride = PMC_INLINE_SLOTS;
    } else {
        *flags = kind == PMC_FLAG_SEQ ? n->seg.seq : n->seg.ack;
        *stride = 1;
    }
}

/* Appends the ranks in peers[from..) whose flag is still below target. */
static void list_missing(const pmc_flag *flags, size_t stride, const int *peers, int npeers,
                         int from, uint64_t target, char *out, size_t outlen)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = from; i < npeers && used + 16 < outlen; ++i) {
        if (pmc_step_geq(pmc_flag_load(&flags[(size_t)peers[i] * stride]), target)) continue;
        int w = snprintf(out + used, outlen - used, "%s%d", used ? ", " : "", peers[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* Abort word, liveness and deadline: the checks of a wait that is taking
 * long. Returns PMC_OK to keep waiting, or the failure (errmsg set). */
static int wait_trouble(pmc_node *n, int kind, const int *peers, int npeers, int first_missing,
                        uint64_t target, double t, double start, int check_liveness)
{
    const pmc_flag *flags;
    size_t stride;
    flags_of(n, kind, target, &flags, &stride);
    int32_t aborter = atomic_load_explicit(&n->seg.hdr->abort_rank, memory_order_acquire);
    if (aborter >= 0 && aborter != n->local_rank) {
        snprintf(n->errmsg, n->errlen,
                 "%s #%" PRIu64 " abandoned: local rank %d gave up on a collective "
                 "(see its error), so local rank %d stopped waiting",
                 n->coll, n->coll_seq, (int)aborter, n->local_rank);
        return PMC_ERR_PEER_ABORTED;
    }
    if (check_liveness) {
        int peer = peers[first_missing];
        /* A peer may post its flag and exit between our look at the flag
         * and at its pid; the flags of a dead process are final, so look again. */
        if (!pid_alive(n->seg.pids[peer]) && !pmc_step_geq(pmc_flag_load(&flags[(size_t)peer * stride]), target)) {
            snprintf(n->errmsg, n->errlen,
                     "%s #%" PRIu64 ": local rank %d (pid %d) died while local rank %d "
                     "waited for its %s flag to reach step %" PRIu64,
                     n->coll, n->coll_seq, peer, (int)n->seg.pids[peer], n->local_rank,
                     flag_name(kind), target);
            pmc_node_abort(n);
            return PMC_ERR_PEER_DEAD;
        }
    }
    if (n->timeout > 0 && t >= start + n->timeout) {
        char missing[256];
        list_missing(flags, stride, peers, npeers, first_missing, target, missing, sizeof(missing));
        snprintf(n->errmsg, n->errlen,
                 "%s #%" PRIu64 " timed out after %.3g s on local rank %d: local ranks "
                 "[%s] did not arrive (their %s flag stayed below step %" PRIu64
                 "); raise PYMCOLL_TIMEOUT or timeout= if the job is just slow",
                 n->coll, n->coll_seq, n->timeout, n->local_rank, missing,
                 flag_name(kind), target);
        pmc_node_abort(n);
        if (n->signal_peers) signal_missing(n, flags, stride, peers, npeers, first_missing, target);
        return PMC_ERR_TIMEOUT;
    }
    return PMC_OK;
}

int pmc_node_poll(pmc_node *n, int kind, const int *peers, int npeers, uint64_t target,
                  double *since, uint32_t *polls)
{
    const pmc_flag *flags;
    size_t stride;
    flags_of(n, kind, target, &flags, &stride);
    int i = 0;
    while (i < npeers && pmc_step_geq(pmc_flag_load(&flags[(size_t)peers[i] * stride]), target)) ++i;
    if (i == npeers) {
        if (*since != 0.0) wait_done(n);
        *since = 0.0;
        *polls = 0;
        return PMC_OK;
    }
    /* Oversubscribed, the peer we wait for needs this CPU more than a Test
     * loop does. */
    if (n->yield_now) sched_yield();
    /* The clock and the peers' pids are looked at only every few polls:
     * a Test loop must stay cheap. */
    if ((++*polls & 15u) != 1u) return PMC_PENDING;
    const double t = now_seconds();
    if (*since == 0.0) {
        *since = t;
        wait_publish(n, kind, peers, npeers, target, flags, stride, t);
    }
    /* Peers' pids only once the wait is long: reading /proc costs more
     * than a whole small collective. */
    const int live = t - *since >= LIVENESS_SECONDS && (*polls & 255u) == 1u;
    int rc = wait_trouble(n, kind, peers, npeers, i, target, t, *since, live);
    return rc == PMC_OK ? PMC_PENDING : rc;
}

int pmc_node_wait(pmc_node *n, int kind, const int *peers, int npeers, uint64_t target)
{
    const pmc_flag *flags;
    size_t stride;
    flags_of(n, kind, target, &flags, &stride);
    int i = 0;
    /* Fast path: everything already there. */
    while (i < npeers && pmc_step_geq(pmc_flag_load(&flags[(size_t)peers[i] * stride]), target)) ++i;
    if (i == npeers) return PMC_OK;

    const double start = now_seconds();
    wait_publish(n, kind, peers, npeers, target, flags, stride, start);
    double next_liveness = start + LIVENESS_SECONDS;
    long polls = 0, sleep_ns = SLEEP_MIN_NS;
    const long spin_polls = n->yield_now || n->wait_sleep ? 0 : SPIN_POLLS;

    while (i < npeers) {
        if (pmc_step_geq(pmc_flag_load(&flags[(size_t)peers[i] * stride]), target)) {
            ++i;
            continue;
        }
        ++polls;
        if (polls < spin_polls) {
            cpu_relax();
            if ((polls & 63) != 0) continue;
        }
        double t = now_seconds();
        const int live = t >= next_liveness;
        if (live) next_liveness = t + LIVENESS_SECONDS;
        int rc = wait_trouble(n, kind, peers, npeers, i, target, t, start, live);
        if (rc != PMC_OK) return rc;
        if (polls < spin_polls) continue;
        if (!n->wait_sleep && (t - start < YIELD_SECONDS || n->yield_now)) {
            /* Oversubscribed ranks keep yielding: the peer we wait for
             * needs this CPU, and a sleep would add its whole latency. */
            if (!n->yield_now || t - start < 0.05) {
                sched_yield();
                continue;
            }
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < SLEEP_MAX_NS) sleep_ns *= 2;
    }
    wait_done(n);
    return PMC_OK;
}
