/* The communicator context: the only mutable state of the core. */
#ifndef PMC_COMM_H
#define PMC_COMM_H

#include "mpi_symbols.h"
#include <pthread.h>
#include <stdint.h>

#include "node/huge_pages.h"
#include "node/node.h"
#include "op.h"
#include "pymcoll.h"
#include "trace/trace.h"

#define PMC_ERRMSG_LEN 768

/* Per-launch copy-path trials (coll/path_trials.c): the first blocking calls (or persistent Starts)
 * of a collective in each size class, from 16 KiB, try the cells and
 * single copy; the ranks then agree on the faster for the rest of
 * the communicator's life. Classes are powers of two of the payload. */
/* From 16 KiB: where the kernel's copy is fast, single copy takes 0.5-0.7x the
 * cells' time from there (2 ranks, one core each, Gather, Bcast and Scatter of
 * 32-256 KiB), where it is slow the cells win up to MiBs; where ranks share
 * cores the two paths differ 2-5x, the other way round on different hosts
 * (the cells need both ends of every handoff running at once). Below 256 KiB
 * a challenger must win by more (path_trials.c), or noise would flip close
 * calls (perf/studies/copy_paths.md). A Bcast's trials start at 256 KiB where
 * ranks share cores: its cells held below that there on every host measured. */
#define PMC_TRIAL_MIN_LOG2 14
#define PMC_TRIAL_MIN_LOG2_BCAST_SHARED 18
#define PMC_TRIAL_CLASSES PMC_TRIAL_SIZE_CLASSES
typedef struct pmc_trial_class {
    uint8_t calls;      /* trial calls completed */
    int8_t chosen;      /* 0: undecided; else the agreed PMC_PATH_* + 1 */
    int8_t first;       /* the table's path (the first trial's), kept on a tie */
    uint32_t since;     /* once agreed: calls (as for trials) on the agreed path since the last check */
    uint32_t every;     /* calls between checks of the agreed path (doubling) */
    uint32_t retrials;  /* trials run again because a check found the agreed path slow */
    double end[PMC_TRIAL_CALLS]; /* when this rank finished each trial or watched call (CLOCK_MONOTONIC, s) */
    double best[2];     /* once agreed: the fastest trial per path (cells, single copy), seconds */
} pmc_trial_class;

struct pmc_comm {
    MPI_Comm comm;      /* private duplicate of the user's communicator */
    MPI_Comm nodecomm;  /* ranks of this (virtual) node */
    MPI_Comm lanecomm;  /* same local rank on every node; MPI_COMM_NULL past L */
    int rank, size;
    int node, nnodes;
    int lanes;
    int min_local, max_local;
    int consecutive;    /* node k holds ranks node_first[k] .. +node_size[k]-1 */
    int *node_of;       /* [size] node of each rank */
    int *local_of;      /* [size] local rank of each rank */
    int *node_first;    /* [nnodes] first rank of each node (consecutive layout) */
    int *node_count;    /* [nnodes] ranks of each node */
    int *members;       /* [size] ranks ordered by node, then local rank */
    int *member_start;  /* [nnodes] offset of each node in members */
    int shm_active;
    uint64_t data_bytes; /* data area per node (same on every rank, 0 without segment) */
    pmc_node node_ctx;
    uint64_t coll_seq;
    pmc_trace_ring *trace;        /* this communicator's collective trace */
    pmc_trace_record *trace_cur;  /* record of the op running now (data paths it takes) */
    int broken;
    int check;          /* PYMCOLL_CHECK: agree on arguments before each collective */
    uint64_t inline_max; /* tuning table (agreed at creation) */
    uint64_t cma_min;
    uint64_t flat_max;
    uint64_t lanes_small_max;
    uint64_t lanes_direct_min;
    uint64_t lanes_bcast_tree_max;
    int copy;
    int path_trials;    /* time both copy paths per size class (no PYMCOLL_PATH_TRIALS=0, no fixed PYMCOLL_CMA_MIN) */
    pmc_trial_class trials[PMC_COLL_COUNT][PMC_TRIAL_CLASSES];
    pmc_op *op_cur;     /* op running now (its path trial) */
    int algorithm[PMC_COLL_COUNT];
    int cma_ok;         /* process_vm_readv works between the ranks of every node */
    pmc_huge_pages huge; /* buffers exposed for single copy, collapsed into huge pages on reuse */
    pmc_heap *heap;     /* shared heap of this node (owns the segment mapping when set) */
    void *scratch;      /* grown on demand for hierarchical steps */
    void *node_counts;  /* [nnodes] MPI counts for the leaders' v-collectives */
    void *node_displs;  /* [nnodes] MPI displacements for the same */
    size_t scratch_bytes;
    void *outer;        /* second scratch, for compositions that call ones using `scratch` */
    size_t outer_bytes;
    void *lane_scratch; /* third, for the lane algorithms' own parts (around node steps using `scratch`) */
    size_t lane_scratch_bytes;
    void *vcounts;      /* [4][size] MPI counts and displacements for flat v-collectives */
    /* Lanes between nodes (coll/lanes.c). */
    int *lane_others;   /* local ranks of the lanes (0 .. L-1) other than this rank */
    int nlane_others;
    uint64_t *lcounts;  /* [local_size] byte counts per local rank for a lane step's node copy */
    uint64_t *ldispls;  /* [local_size] and their displacements */
    MPI_Request *lreq;  /* lane messages in flight (one op at a time uses them) */
    void **lreq_recv;   /* [lreq_cap] receive buffer of lreq[i]; NULL for a send */
    int nlreq, lreq_cap;
    int left_in_flight; /* MPI sends or collectives a failed op left running: the
                           buffers they may still read or write are kept at Free */
    uint64_t lane_msgs, lane_bytes; /* sent by this rank to other nodes on its lane */
    /* Started operations, run in start order (op.c). */
    pmc_op *queue_head, *queue_tail;
    pmc_op *requests;   /* every request made on this communicator (to detach them at Free) */
    pthread_mutex_t lock;      /* held while ops run or the queue changes */
    pthread_cond_t wake;       /* the progress thread sleeps on it while the queue is empty */
    pthread_t progress;
    int progress_wanted;       /* PYMCOLL_PROGRESS_THREAD */
    int progress_running;
    int progress_stop;
    uint64_t polls_passed;     /* non-blocking waits that found their flags: progress */
    char errmsg[PMC_ERRMSG_LEN];
    char note[PMC_ERRMSG_LEN];
};

/* Sets errmsg (printf style) and returns status. */
int pmc_fail(pmc_comm *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Converts an MPI error code into PMC_ERR_MPI with the MPI's message. */
int pmc_mpi_fail(pmc_comm *c, int mpi_rc, const char *call);
/* Scratch buffer of at least bytes (kept for reuse). */
void *pmc_scratch(pmc_comm *c, size_t bytes);
void *pmc_scratch_outer(pmc_comm *c, size_t bytes);
void *pmc_scratch_lane(pmc_comm *c, size_t bytes);

/* Common entry of every collective start: numbers the call, records it in
 * the trace, refuses a broken communicator and points error messages at
 * the call. mode: PMC_TRACE_BLOCKING / NONBLOCKING / PERSISTENT. */
int pmc_coll_enter(pmc_comm *c, pmc_op *op, int mode);

/* With PYMCOLL_CHECK: every rank contributes what MPI requires all ranks to
 * agree on (collective, message size or a digest of the counts every rank
 * knows, element type, op, root; -1 where it does not apply). start begins
 * the exchange (op->mreq), judge fails on every rank with PMC_ERR_ARG when
 * they disagree, before any data moves; the communicator stays usable. */
int pmc_agree_start(pmc_op *op);
int pmc_agree_judge(pmc_op *op);

static inline int pmc_coll_is_reduction(int coll)
{
    return coll == PMC_COLL_ALLREDUCE || coll == PMC_COLL_REDUCE || coll == PMC_COLL_REDUCE_SCATTER_BLOCK ||
           coll == PMC_COLL_REDUCE_SCATTER || coll == PMC_COLL_SCAN || coll == PMC_COLL_EXSCAN;
}

static inline int pmc_coll_is_rooted(int coll)
{
    return coll == PMC_COLL_BCAST || coll == PMC_COLL_REDUCE || coll == PMC_COLL_GATHER ||
           coll == PMC_COLL_GATHERV || coll == PMC_COLL_SCATTER || coll == PMC_COLL_SCATTERV;
}

/* Which way a collective runs (coll/choose.c). */
enum { PMC_PATH_CICO = 0, PMC_PATH_INLINE, PMC_PATH_CMA };
/* 1 when the collective runs through the wrapped MPI communicator. */
int pmc_use_mpi(const pmc_comm *c, int coll);
/* Records the algorithm family (PMC_TRACE_ALGO_*) a collective's entry
 * chose in the running call's trace record, where the choice is made. */
void pmc_took(pmc_comm *c, int family);
/* Data path within a node for `payload` bytes per rank of the node step
 * `coll` (PMC_COLL_*: the step's own kind, e.g. Bcast for the broadcast
 * phase of a hierarchical collective); can_inline / can_cma say whether the
 * collective has such a variant for this call. */
int pmc_node_path(const pmc_comm *c, int coll, uint64_t payload, int can_inline, int can_cma);
/* Whether a block of `bytes` between two local ranks of a v form moves by
 * single copy (both ends know the count, so they choose alike); one call
 * decides many blocks and the ranks do not all know them, so no v-form call
 * is a trial: the table decides, or the verdict of trials of its class. */
int pmc_block_path(const pmc_comm *c, int coll, uint64_t bytes);
static inline int pmc_single_copy(const pmc_comm *c, int coll, uint64_t bytes)
{
    return bytes > 0 && pmc_block_path(c, coll, bytes) == PMC_PATH_CMA;
}
/* Path trials (coll/path_trials.c). pmc_trial_path: the path of this call
 * when it may be a trial or a trial has decided (`table`: the table's), else
 * `table`. pmc_trial_finish: after a trial call's algorithm, records its time
 * and, after the last trial of its class, agrees on the faster path (a
 * coroutine step of the op). */
int pmc_trial_path(const pmc_comm *c, int coll, uint64_t payload, int table);
/* The path the trials agreed on for blocks of `bytes` of collective `coll`
 * (a v form follows its fixed-size form's trials), -1 where none has. Every
 * rank holds the same verdicts between calls (each is agreed inside a
 * call, and ops run in order), so both ends of a block read the same. */
int pmc_trial_verdict(const pmc_comm *c, int coll, uint64_t bytes);
/* log2 of the smallest payload of collective `coll` that has trials on this communicator. */
int pmc_trial_min_log2(const pmc_comm *c, int coll);
int pmc_trial_finish(pmc_op *op);
/* Bytes from a buffer's start that the blocks counts[i] at displs[i]
 * (i < n, bytes) span. */
static inline uint64_t pmc_v_extent(const uint64_t *counts, const uint64_t *displs, int n)
{
    uint64_t end = 0;
    for (int i = 0; i < n; ++i)
        if (counts[i] > 0 && displs[i] + counts[i] > end) end = displs[i] + counts[i];
    return end;
}

/* Stops the progress thread and fails requests still queued (at Free). */
void pmc_ops_shutdown(pmc_comm *c);

/* Common exit: closes the op's trace record; a failure that leaves peers
 * out of step breaks the comm. */
int pmc_coll_leave(pmc_comm *c, pmc_op *op, int status);

/* Byte counts through MPI: large-count calls where the MPI has them. */
#if MPI_VERSION >= 4
typedef MPI_Count pmc_mpi_count;
typedef MPI_Aint pmc_mpi_displ; /* the _c v-collectives take MPI_Aint displacements */
#else
typedef int pmc_mpi_count;
typedef int pmc_mpi_displ;
#endif
/* Fails with PMC_ERR_ARG when bytes does not fit the MPI's count type. */
int pmc_mpi_count_of(pmc_comm *c, uint64_t bytes, pmc_mpi_count *out);

#endif
