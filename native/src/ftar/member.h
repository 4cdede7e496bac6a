/* A replica's member of FTAR: the struct shared by its parts. Internal.
 *   member.c          the API: begin_step, allreduce, commit, ring set-up
 *   member_control.c  the control thread: coordinator link, heartbeats, decisions
 *   member_accept.c   the acceptor thread: ring connections and state transfers
 *   fault.c           PYMCOLL_FTAR_FAULT injection (tests only)
 */
#ifndef PMC_FTAR_MEMBER_H
#define PMC_FTAR_MEMBER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "conn.h"
#include "pymcoll_ftar.h"
#include "ring.h"

enum { PMC_MEMBER_MAX = 1024, PMC_RING_QUEUE = 64, PMC_MAX_STREAMS = 16 };

/* Where a fault can be injected, and what it does. */
enum {
    PMC_FAULT_NONE = 0,
    PMC_FAULT_REDUCE_SCATTER,
    PMC_FAULT_ALLGATHER,
    PMC_FAULT_VOTE,
    PMC_FAULT_COMMIT,
    PMC_FAULT_SERVE,           /* a donor halfway through a state transfer */
    PMC_FAULT_POINT_COUNT
};
enum { PMC_FAULT_KILL = 1, PMC_FAULT_STALL, PMC_FAULT_CUT, PMC_FAULT_STOP, PMC_FAULT_ACTION_COUNT };

typedef struct pmc_fault {
    int point, action;
    uint32_t ms;               /* stall length */
    int64_t at_step;           /* -1: the first time the point is reached */
    int fired;
} pmc_fault;

int pmc_fault_parse(const char *spec, pmc_fault *f, char *msg, size_t msgcap);

typedef struct pmc_peer {
    char id[64];
    char ring_addr[PMC_FTAR_ADDR_BYTES];
    char state_addr[PMC_FTAR_ADDR_BYTES];
    int healing;
    int32_t donor;
} pmc_peer;

/* A quorum as the coordinator sent it. */
typedef struct pmc_quorum {
    uint32_t status;
    uint64_t epoch;
    int64_t step;
    uint32_t n, index, n_healing;
    pmc_peer *peers;           /* [n] */
} pmc_quorum;

/* An authenticated ring connection handed over by the acceptor. */
typedef struct pmc_ring_in {
    uint64_t epoch;
    uint32_t stream;
    char from[64];
    int fd;
    uint8_t key[32];
} pmc_ring_in;

/* A published state snapshot; transfers hold a reference. */
typedef struct pmc_snapshot {
    int refs;                  /* under state_lock */
    int64_t step;
    uint64_t epoch;            /* of the commit that made that state (0: unknown, initial) */
    size_t len, cap;
    uint8_t *data;
} pmc_snapshot;

struct pmc_ftar_member {
    /* configuration (copied) */
    char coordinator[PMC_FTAR_ADDR_BYTES];
    char id[64];
    uint8_t *token;
    size_t tokenlen;
    uint32_t streams, chunk_bytes, timeout_ms;
    int integrity, log_fd;
    pmc_fault fault;

    char msg[PMC_FTAR_MESSAGE_BYTES];

    /* listener for ring connections and state transfers */
    int listen_fd;
    char listen_addr[PMC_FTAR_ADDR_BYTES];

    /* --- under lock: the coordinator link and its mailbox --- */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_mutex_t send_lock; /* one frame at a time on the control link */
    pmc_conn ctrl;
    int connected;             /* authenticated and welcomed */
    uint64_t generation;       /* counts (re)connections */
    uint32_t heartbeat_ms, evict_ms;
    uint64_t incarnation;
    uint64_t frames_filed;     /* frames the control thread has read and filed */
    int have_quorum;
    pmc_quorum quorum;         /* the last QUORUM received */
    int have_decision;
    int decision_commit;       /* 1 COMMIT, 0 ABORT */
    uint32_t decision_status;
    uint64_t decision_epoch;
    int64_t decision_step;
    char decision_reason[PMC_FTAR_MESSAGE_BYTES];
    int have_donor;
    int32_t donor_index;
    char donor_addr[PMC_FTAR_ADDR_BYTES];
    int fenced;                /* evicted: operations return FENCED until a quorum formed after it */
    uint64_t fences;           /* FENCED notices received */
    uint64_t quorum_fences;    /* fences when the last QUORUM arrived */
    uint64_t current_epoch;    /* the epoch operations run in (aborts for others are ignored) */
    uint64_t aborted_epoch;    /* ABORT received for this epoch */
    int64_t committed_step;
    uint64_t committed_epoch;  /* (committed_step, committed_epoch) names the state this member holds */
    int64_t healing_commit_step; /* the last commit seen while catching up, and its epoch */
    uint64_t healing_commit_epoch;
    int64_t fetched_step;      /* the last snapshot fetched, and its epoch */
    uint64_t fetched_epoch;
    char join_error[PMC_FTAR_MESSAGE_BYTES]; /* why the last attempt to join failed */
    char donor_at_quorum[PMC_FTAR_ADDR_BYTES]; /* the donor named by the last adopted quorum */
    int32_t donor_index_at_quorum;
    char fetch_msg[PMC_FTAR_MESSAGE_BYTES];    /* fetch_state's own message (it runs on another thread) */
    uint64_t last_epoch;
    atomic_int stopping;        /* read by every thread, under any lock or none */

    /* --- under ring_lock: connections from the left neighbour --- */
    pthread_mutex_t ring_lock;
    pthread_cond_t ring_cond;
    pmc_ring_in ring_in[PMC_RING_QUEUE];
    int n_ring_in;

    /* --- under state_lock --- */
    pthread_mutex_t state_lock;
    pthread_cond_t state_cond;
    pmc_snapshot *snapshot;
    pmc_snapshot *spare;       /* a released snapshot's memory, for the next publish */
    int transfers;             /* serving threads alive */

    int abort_fd;              /* eventfd: the current epoch's operation must stop */
    int wake_fd;               /* eventfd: threads must look at stopping */
    pthread_t control_thread, accept_thread;
    int threads_started;

    /* --- main thread only: the epoch and its ring --- */
    uint64_t epoch;
    int64_t step;
    int healing;
    int in_quorum;             /* the last begin_step succeeded */
    uint32_t n, index;
    pmc_peer *peers;
    int ring_ready;
    pmc_ring_stream send[PMC_MAX_STREAMS], recv[PMC_MAX_STREAMS];
    uint64_t op;
    void *scratch;
    size_t scratch_bytes;
};

void *pmc_member_control_main(void *arg);
void *pmc_member_accept_main(void *arg);
/* Sends a control frame to the coordinator (any thread). */
int pmc_member_send(pmc_ftar_member *m, int type, uint64_t epoch, uint64_t step, const void *payload, uint32_t len);
void pmc_member_log(pmc_ftar_member *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pmc_member_signal(int fd);
void pmc_member_drain(int fd);
/* Runs the fault at `point` if the spec names it (and the step matches). */
void pmc_member_fault(pmc_ftar_member *m, int point, int64_t step);
void pmc_snapshot_release(pmc_ftar_member *m, pmc_snapshot *s);
/* One timed wait of at most ms on cond (spurious wake-ups are the caller's loop's business). */
void pmc_cond_wait_slice(pthread_cond_t *cond, pthread_mutex_t *lock, int ms);

#endif
