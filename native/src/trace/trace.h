/* The collective trace: every collective of a communicator appends a
 * fixed-size record to that communicator's ring, always on. The rings of a
 * process are listed in one registry so that a dump can walk them without
 * MPI, from a signal handler if need be (trace_dump.c, trace_signal.c).
 *
 * Cost per collective: two or three clock reads and one record's stores.
 * A record is written by the thread that runs the collective only (under
 * the communicator's lock); a dump reads it without locking, so a record
 * caught mid-write is recognised by its seq and left out.
 */
#ifndef PMC_TRACE_TRACE_H
#define PMC_TRACE_TRACE_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "../node/node.h"
#include "pymcoll.h"

/* status of a record whose collective has not finished */
#define PMC_TRACE_RUNNING INT32_MIN
/* dtype / op of a record where they do not apply */
#define PMC_TRACE_NONE 0xFF

enum { PMC_TRACE_BLOCKING = 0, PMC_TRACE_NONBLOCKING, PMC_TRACE_PERSISTENT };
/* Algorithm families, as the collectives' entries choose them (pmc_took):
 * self (nothing crosses ranks: one rank, or no data), mpi (the wrapped
 * communicator), node (the segment, one node), leader (one rank per node
 * between nodes), lanes (every lane between nodes). NONE: the call was
 * refused before it chose (a dump writes null). */
enum { PMC_TRACE_ALGO_SELF = 0, PMC_TRACE_ALGO_MPI, PMC_TRACE_ALGO_NODE, PMC_TRACE_ALGO_LEADER,
       PMC_TRACE_ALGO_LANES, PMC_TRACE_ALGO_NONE = 0xFF };

typedef struct pmc_trace_record {
    uint64_t seq;        /* written first (0) and last (the call's number) */
    uint64_t bytes;      /* message bytes per rank (this rank's for the v forms) */
    uint64_t count;      /* as passed: elements for reductions, bytes otherwise */
    uint64_t t_enqueue;  /* CLOCK_MONOTONIC ns: call entered */
    uint64_t t_start;    /* began running (after earlier queued calls) */
    uint64_t t_end;      /* completed (0: not yet) */
    int32_t root;        /* -1 unless rooted */
    int32_t status;      /* PMC_* or PMC_TRACE_RUNNING */
    uint8_t coll, dtype, op, algorithm;
    uint8_t paths;       /* bit PMC_PATH_*: data paths the call used */
    uint8_t mode, in_place, pad;
} pmc_trace_record;

/* A communicator's ring and what a dump says about the communicator. */
typedef struct pmc_trace_ring {
    pmc_trace_record *rec;    /* capacity records, slot seq & mask; NULL: tracing off */
    uint64_t mask;
    _Atomic uint64_t last_seq;
    char id[32];              /* the same on every member */
    int rank, size, node, nnodes, local_rank, local_size;
    int *world_ranks;         /* [size] */
    int *local_to_rank;       /* [local_size] rank of each local rank */
    const pmc_wait_info *wait;
    const int32_t *pids;      /* [local_size] from the segment; NULL without one */
    _Atomic int freed;        /* communicator freed; ring kept for the finalize dump */
    uint64_t t_freed;
} pmc_trace_ring;

/* Settings (pmc_trace_setup), process-wide. */
#define PMC_TRACE_DIR_MAX 3072
#define PMC_TRACE_MAX_RINGS 256

/* The one process-wide state of the trace: a signal handler has no other
 * way to reach the rings. */
typedef struct pmc_trace_context {
    char dir[PMC_TRACE_DIR_MAX];       /* "" = no dump files */
    uint32_t ring_records;             /* 0 = tracing off */
    int signals;                       /* dump on SIGUSR1 / fatal signals, signal peers on timeout */
    int world_rank, world_size;
    int pid;
    int cpus;                          /* online CPUs (the analyzer's oversubscription check) */
    char host[128];
    char name_tag[16];                 /* "" or ".python" (second library copy in the process) */
    _Atomic uint32_t comms_created;
    _Atomic(pmc_trace_ring *) rings[PMC_TRACE_MAX_RINGS];
    _Atomic int dumping;               /* a dump is walking the rings */
    _Atomic int handlers_installed;
    /* Records hold ticks of the CPU's counter where the kernel itself keeps
     * time with it (a third of a clock_gettime); a dump maps them to
     * CLOCK_MONOTONIC ns through the pair read at start and one it reads. */
    int use_counter;
    int process_ready;
    uint64_t counter0, ns0;
    _Atomic uint64_t last_signal_dump_ns;
    struct sigaction previous[65];     /* chained handlers, by signal number */
    void *alt_stack;                   /* the signal stack installed for a fault's dump */
} pmc_trace_context;

extern pmc_trace_context pmc_trace_ctx;

static inline uint64_t pmc_trace_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* Timestamp of a record: counter ticks (use_counter) or monotonic ns. */
static inline uint64_t pmc_trace_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    if (pmc_trace_ctx.use_counter) return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
    if (pmc_trace_ctx.use_counter) {
        uint64_t v;
        __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
        return v;
    }
#endif
    return pmc_trace_now();
}

/* Hot path (op.c): a call entered, began running, ended. */
static inline pmc_trace_record *pmc_trace_enter(pmc_trace_ring *r, uint64_t seq, const pmc_args *a,
                                                uint64_t bytes, int reduction, int rooted, int mode,
                                                int algorithm, uint64_t now)
{
    if (r == NULL || r->rec == NULL) return NULL;
    pmc_trace_record *t = &r->rec[seq & r->mask];
    t->seq = 0;
    atomic_signal_fence(memory_order_release);
    t->bytes = bytes;
    t->count = a->count;
    t->t_enqueue = now;
    t->t_start = 0;
    t->t_end = 0;
    t->root = rooted ? a->root : -1;
    t->status = PMC_TRACE_RUNNING;
    t->coll = (uint8_t)a->coll;
    t->dtype = reduction ? (uint8_t)a->dtype : PMC_TRACE_NONE;
    t->op = reduction ? (uint8_t)a->op : PMC_TRACE_NONE;
    t->algorithm = (uint8_t)algorithm;
    t->paths = 0;
    t->mode = (uint8_t)mode;
    t->in_place = (uint8_t)(a->in_place != 0);
    /* The number last: a dump taken from a signal handler on this thread
     * sees either the whole record or seq 0. */
    atomic_signal_fence(memory_order_release);
    t->seq = seq;
    atomic_store_explicit(&r->last_seq, seq, memory_order_release);
    return t;
}

static inline void pmc_trace_end(pmc_trace_record *t, uint64_t seq, int status)
{
    if (t == NULL || t->seq != seq) return; /* overwritten by a call a full ring later */
    if (t->t_start == 0) t->t_start = t->t_enqueue;
    t->t_end = pmc_trace_ticks();
    t->status = status;
}

/* Converting record timestamps: the rate (once per dump) and one value. */
double pmc_trace_ns_per_tick(void);
uint64_t pmc_trace_to_ns(uint64_t ticks, double ns_per_tick);

/* Ring of a new communicator (collective data already known): registered
 * for dumps. Returns NULL only when out of memory. */
pmc_trace_ring *pmc_trace_ring_new(const char *id, int rank, int size, const int *world_ranks, int node,
                                   int nnodes, int local_rank, int local_size, const int *local_to_rank,
                                   const pmc_wait_info *wait, const int32_t *pids);
/* At communicator free: kept for the finalize dump when dumps go to files,
 * released otherwise. */
void pmc_trace_ring_retire(pmc_trace_ring *r);

/* This process's world rank and size, and the creation counter that names
 * communicators (called by communicator creation, MPI initialised); the
 * first call also picks the clock of the records. */
void pmc_trace_process_init(int world_rank, int world_size);
uint32_t pmc_trace_next_comm_number(void);

/* Dumps every ring: to DIR/rank<N>[.<event>].json when PYMCOLL_TRACE is set;
 * otherwise a signal's dump prints a summary on stderr. Safe in a signal
 * handler (no allocation, no stdio, no locks); `from_signal` makes it give
 * up rather than wait when another dump is running. Returns 0 on success. */
int pmc_trace_dump_now(const char *reason, int from_signal);

/* Installs the SIGUSR1 and fatal-signal handlers (once, if enabled). */
void pmc_trace_install_handlers(void);

#endif
