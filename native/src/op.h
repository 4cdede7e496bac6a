/* Collective operations as resumable state machines.
 *
 * Every collective, blocking or not, runs as an op: a struct holding its
 * arguments and the resume points of the algorithms it is running. An
 * algorithm is a function written as a coroutine (protothread style): a
 * switch on the frame's resume point, where each wait either blocks (a
 * blocking call or Wait) or returns PMC_PENDING (Test, Start, the progress
 * thread) and resumes at the same place on the next call. So one algorithm
 * serves the blocking call, the I-call and the persistent start alike.
 *
 * Ops of one communicator run strictly in the order they were started
 * (all ranks start them in the same order); the head of the queue is the
 * only one that moves. Algorithm state that must survive a PENDING return
 * lives in the frame, never in C locals.
 */
#ifndef PMC_OP_H
#define PMC_OP_H

#include "mpi_symbols.h"
#include <stdint.h>

#include "pymcoll.h"

/* Returned by a step that must wait for peers (never seen by users). */
#define PMC_PENDING (-1)

/* Blocking calls per collective and size class that try the copy paths in
 * turn (coll/path_trials.c). */
#define PMC_TRIAL_CALLS PMC_TRIAL_CALLS_PER_CLASS
/* Nesting depth of algorithms: entry, composition, node algorithm, helper. */
#define PMC_FRAMES 6

typedef struct pmc_frame {
    int pc;          /* resume point (0: not started) */
    int j;           /* peer / rank index */
    uint64_t k;      /* chunk / round index */
    uint64_t n;      /* chunks / rounds */
    uint64_t base;   /* step before the algorithm began */
    uint64_t lstep;  /* step where the data-area layout began */
    uint64_t aux;    /* algorithm specific */
    void *p;         /* algorithm specific buffer */
    int peers[4];    /* ranks a wait names (a wait's peer list must outlive a PENDING return) */
} pmc_frame;

struct pmc_comm;

struct pmc_request {
    struct pmc_comm *c;
    pmc_args a;            /* arguments (v arrays point into `arrays` for requests) */
    uint64_t *arrays;      /* owned copies of the v arrays */
    int persistent;
    int blocking;          /* waits block (1) or return PMC_PENDING (0) */
    int active;            /* started and not yet completed */
    int orphan;            /* freed by the user while active: free on completion */
    int status;            /* of the last completed run */
    uint64_t seq;          /* collective number on its communicator */
    struct pmc_trace_record *trace; /* its record in the communicator's trace ring */
    pmc_frame f[PMC_FRAMES];
    MPI_Request mreq;      /* MPI step in flight (MPI_REQUEST_NULL: none) */
    double wait_start;     /* non-blocking waits: when this wait began (0: not yet) */
    uint32_t polls;
    int64_t agree[10];     /* PYMCOLL_CHECK exchange */
    /* Path trial (coll/path_trials.c): only blocking calls time their path. */
    int trial_ok;          /* a blocking call or a persistent request's Start: may be a trial */
    int trial_path;        /* PMC_PATH_* this call tries (-1: not a trial) */
    int trial_class;       /* its size class */
    double trial_x[PMC_TRIAL_CALLS]; /* the agreement's exchange: when every trial ended */
    int64_t *agree_v;      /* its per-pair counts part (v forms; NULL otherwise) */
    struct pmc_request *next;             /* in the communicator's queue */
    struct pmc_request *reg_prev, *reg_next; /* every request of the communicator */
    char *errmsg;          /* message of a failed run (allocated on failure) */
};
typedef struct pmc_request pmc_op;

/* Coroutine helpers. A function using them takes `pmc_frame *f` and returns
 * PMC_OK when finished (its frame reset for the next use), PMC_PENDING to be
 * called again later, or an error status. */
#define PMC_CO_BEGIN(f) switch ((f)->pc) { case 0:
#define PMC_CO_END(f) } (f)->pc = 0; return PMC_OK
/* Evaluate `expr` (a wait or a nested coroutine) until it stops being PENDING. */
#define PMC_AWAIT(f, expr)                                   \
    do {                                                     \
        (f)->pc = __LINE__;                                  \
        __attribute__((fallthrough));                        \
        case __LINE__: {                                     \
            int co_rc_ = (expr);                             \
            if (co_rc_ != PMC_OK) {                          \
                if (co_rc_ != PMC_PENDING) (f)->pc = 0;      \
                return co_rc_;                               \
            }                                                \
        }                                                    \
    } while (0)

/* Flag waits and MPI steps of an op: block or poll by op->blocking. */
int pmc_op_wait(pmc_op *op, int kind, const int *peers, int npeers, uint64_t target);
/* pmc_op_wait for acknowledgements, first against the least acknowledgement of
 * the other local ranks last read (no flag read when it covers target: a flag
 * another core writes on every call costs a cache miss to look at); a wait on
 * every other rank refreshes that value. */
int pmc_op_wait_acked(pmc_op *op, const int *peers, int npeers, uint64_t target);
/* Completes op->mreq (started by the caller). */
int pmc_op_mpi(pmc_op *op, const char *call);
/* Completes count MPI requests: blocks or polls by op->blocking, with the
 * deadline of a flag wait (PYMCOLL_TIMEOUT), yielding when oversubscribed. */
int pmc_op_mpi_all(pmc_op *op, int count, MPI_Request *reqs, const char *call);

/* The collective's top-level algorithm: picks the path and runs it. */
typedef int (*pmc_coll_fn)(pmc_op *op);
/* Argument check, before any data moves (may fill defaults into op->a). */
typedef int (*pmc_check_fn)(struct pmc_comm *c, pmc_args *a);

typedef struct pmc_coll_entry {
    const char *name;
    pmc_check_fn check;
    pmc_coll_fn run;
} pmc_coll_entry;

/* The table, indexed by PMC_COLL_*. */
const pmc_coll_entry *pmc_coll_table(int coll);

#endif
