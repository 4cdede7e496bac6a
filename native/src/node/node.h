/* Per-communicator view of the node: the segment, this rank's place in it,
 * the step counter that orders flag traffic, and the wait policy.
 *
 * Protocol: every collective advances `step` identically on all local ranks.
 * A rank that published data for step s stores seq = s; a rank that finished
 * reading everything up to step s stores ack = s. Flags only grow, so a wait
 * is "flag >= target". Before overwriting shared data a writer waits until
 * its readers' acks reach the step of that data's last use.
 */
#ifndef PMC_NODE_NODE_H
#define PMC_NODE_NODE_H

#include <stdint.h>

#include "segment.h"

#ifndef PMC_PENDING
#define PMC_PENDING (-1)
#endif

/* Flags a wait can watch: the seq or ack line of each peer, or the peers'
 * inline line of the target step's slot. */
enum { PMC_FLAG_SEQ = 0, PMC_FLAG_ACK = 1, PMC_FLAG_LINE = 2 };

/* How a collective lays out the data area. Consecutive collectives with the
 * same layout index cells by step number, so a writer waits only for the
 * readers of the cell's previous use, not for the whole previous collective. */
enum {
    PMC_LAYOUT_NONE = 0, PMC_LAYOUT_CELLS, PMC_LAYOUT_REGIONS, PMC_LAYOUT_REDUCE, PMC_LAYOUT_PAIRS,
    PMC_LAYOUT_SLICES,
    /* The broadcast's ring of page-sized cells (messages of a few pages). */
    PMC_LAYOUT_PAGE_CELLS,
    /* The lane algorithms' node buffer: the whole area, one use per call. */
    PMC_LAYOUT_NODEBUF,
    /* The lanes' tree's node buffers for messages that fit a slot: a ring
     * of pmc_ring_cells() slots, so ranks run calls ahead of each other. */
    PMC_LAYOUT_NODERING,
    /* + root: the root writes every sub-region, so a new root starts a new
     * layout (its writes' cells are tracked by the writer only). */
    PMC_LAYOUT_SCATTER
};

/* Collectives whose chunk counts not every rank knows advance the step
 * counter by this: beyond any chunk count, so all ranks agree on the next
 * step without telling each other their sizes. */
#define PMC_STEP_STRIDE (UINT64_C(1) << 40)
/* Cells a writer tracks (pmc_cell_rot rings have at most this many). */
#define PMC_MAX_CELLS 64

/* What a rank is waiting for right now (read by trace dumps, possibly
 * from a signal handler): a flag of some peers, or an MPI completion. */
#define PMC_WAIT_PEERS 8
enum { PMC_WAIT_NONE = 0, PMC_WAIT_FLAG, PMC_WAIT_MPI };
typedef struct pmc_wait_info {
    _Atomic int what;         /* PMC_WAIT_*; written last when a wait begins */
    int kind;                 /* PMC_FLAG_* */
    int npeers;               /* peers kept below (the first PMC_WAIT_PEERS) */
    int peers[PMC_WAIT_PEERS]; /* local ranks */
    const pmc_flag *flags;    /* peer i's flag is flags[peers[i] * stride] */
    size_t stride;
    uint64_t target;
    uint64_t since_ns;        /* CLOCK_MONOTONIC */
    const char *call;         /* MPI waits: the call */
    const char *coll;
    uint64_t seq;
} pmc_wait_info;

typedef struct pmc_node {
    pmc_segment seg;
    int local_rank, local_size;
    uint64_t step;          /* last step completed by this rank */
    double timeout;         /* seconds per wait, 0 = none */
    int yield_now;          /* more local ranks than CPUs: never spin */
    int wait_sleep;         /* PYMCOLL_WAIT=sleep: neither spin nor yield, sleep (the CPU is someone else's) */
    uint64_t stream_min;    /* PYMCOLL_STREAM_MIN: bulk copies from this size on use streaming stores */
    uint64_t movsb_min;     /* cell stores from this size on are string moves (pmc_cell_store) */
    int *others;            /* local ranks other than this one */
    uint64_t chunk;         /* pipeline chunk in bytes */
    int layout;             /* current PMC_LAYOUT_* of the data area */
    uint64_t layout_step;   /* step at which the current layout began */
    /* Step whose acknowledgement lets this rank write cell c of its own
     * region(s) again (the algorithms that index cells with pmc_cell_rot):
     * its last write there, or the layout's start, to which a switch resets
     * every cell (everything before a switch must be read first). */
    uint64_t cell_last[PMC_MAX_CELLS];
    uint64_t ring_next;     /* calls of the current layout that took a ring slot (PMC_LAYOUT_NODERING) */
    /* Every other local rank's acknowledgement was at least this when last
     * read (once others_acked_read is set): flags only grow, so a writer
     * that needs no more reads no flag (a flag another core writes on every
     * call costs a cache miss). Unset until the first read and at every
     * change of layout, so that steps may start anywhere, 2^64 included. */
    uint64_t others_acked;
    uint64_t others_acked_at; /* this rank's step when others_acked was read */
    int others_acked_read;
    pmc_wait_info wait;     /* the wait in progress, for trace dumps */
    int signal_peers;       /* on a timeout, SIGUSR1 the local ranks that did not arrive */
    /* Context for error messages. */
    const char *coll;
    uint64_t coll_seq;
    char *errmsg;
    size_t errlen;
} pmc_node;

static inline uint64_t pmc_flag_load(const pmc_flag *f)
{
    return atomic_load_explicit(&((pmc_flag *)f)->v, memory_order_acquire);
}

static inline void pmc_node_post(pmc_node *n, int kind, uint64_t value)
{
    pmc_flag *f = (kind == PMC_FLAG_SEQ ? n->seg.seq : n->seg.ack) + n->local_rank;
    atomic_store_explicit(&f->v, value, memory_order_release);
}

/* Called by every local rank at the start of a collective that uses the
 * data area with `layout`; returns the step from which that layout has been
 * in use (a switch makes it `base`: everything before must be read first). */
static inline uint64_t pmc_node_use_layout(pmc_node *n, int layout, uint64_t base)
{
    if (n->layout != layout) {
        n->layout = layout;
        n->layout_step = base;
        for (int c = 0; c < PMC_MAX_CELLS; ++c) n->cell_last[c] = base;
        n->ring_next = 0;
        /* Read the flags afresh: collectives of other layouts may have run
         * the steps 2^40 a call past it, far enough to wrap a comparison. */
        n->others_acked_read = 0;
    }
    return n->layout_step;
}

/* The inline line of `rank` for step s, and its payload bytes. */
static inline pmc_flag *pmc_inline_line(const pmc_node *n, int rank, uint64_t s)
{
    return n->seg.inl + (size_t)rank * PMC_INLINE_SLOTS + (size_t)(s % PMC_INLINE_SLOTS);
}
/* The payload starts 16 bytes into the line, so that long double and
 * complex elements are aligned for the reduction kernels. */
static inline unsigned char *pmc_inline_payload(pmc_flag *line) { return (unsigned char *)line + 16; }

/* Rollover-safe "a >= b" for step numbers. */
static inline int pmc_step_geq(uint64_t a, uint64_t b) { return (int64_t)(a - b) >= 0; }

/* Reads every other local rank's acknowledgement into others_acked (their least). */
static inline void pmc_node_read_acked(pmc_node *n)
{
    uint64_t least = n->step;
    for (int i = 0; i < n->local_size - 1; ++i) {
        const uint64_t v = pmc_flag_load(&n->seg.ack[n->others[i]]);
        if (!pmc_step_geq(v, least)) least = v;
    }
    n->others_acked = least;
    n->others_acked_at = n->step;
    n->others_acked_read = 1;
}

/* Whether every other local rank is known to have acknowledged step s (no flag read).
 * A value read 2^62 steps ago is not trusted: collectives that advance the step
 * by PMC_STEP_STRIDE without a change of layout could carry s around 2^64. */
static inline int pmc_node_known_acked(const pmc_node *n, uint64_t s)
{
    return n->others_acked_read && n->step - n->others_acked_at < (UINT64_C(1) << 62) &&
           pmc_step_geq(n->others_acked, s);
}

/* Cells the gather and pairs rings are cut into (fewer when a cell would
 * fall below 64 bytes): consecutive collectives pipeline this deep. Ranks
 * that share cores need 8, since a reader may lag several calls; otherwise
 * 2 keep small messages in cache. yield_now is agreed over the node, so
 * every rank cuts the ring alike. */
static inline uint64_t pmc_ring_cells(const pmc_node *n) { return n->yield_now ? 8 : 2; }

/* Cell of step s in a ring of ncells cells: counted from the start of the
 * layout, so the ring stays regular even where step numbers wrap. */
static inline uint64_t pmc_cell_of(uint64_t s, uint64_t ncells, uint64_t layout_step)
{
    return (s - layout_step) % ncells;
}

/* Step a writer must see acknowledged before reusing the cell of step s:
 * the cell's previous use in this layout, or the layout's start. */
static inline uint64_t pmc_cell_free_step(uint64_t s, uint64_t ncells, uint64_t layout_step)
{
    const uint64_t prev = s - ncells;
    return pmc_step_geq(prev, layout_step) ? prev : layout_step;
}

/* Cell of step s for the algorithms whose writers track each cell's last
 * write (cell_last): it turns one further per stride, so consecutive
 * collectives of a stride each start in the next cell and pipeline as
 * consecutive steps do. */
static inline uint64_t pmc_cell_rot(uint64_t s, uint64_t ncells, uint64_t layout_step)
{
    const uint64_t d = s - layout_step;
    return (d + d / PMC_STEP_STRIDE) % ncells;
}

/* Wait until the `kind` flag of every rank in peers[0..npeers) is >= target.
 * Spins, then yields, then sleeps; returns PMC_ERR_TIMEOUT past the deadline,
 * PMC_ERR_PEER_DEAD when a waited-for process is gone and PMC_ERR_PEER_ABORTED
 * when another local rank gave up; n->errmsg then says who and where. */
int pmc_node_wait(pmc_node *n, int kind, const int *peers, int npeers, uint64_t target);

/* One look at the flags without waiting: PMC_OK when all are there,
 * PMC_PENDING when not, or the failure a blocking wait would report (a dead
 * peer, an abort, the deadline counted from *since, set on the first miss).
 * *since and *polls belong to the caller's wait and are reset on success. */
int pmc_node_poll(pmc_node *n, int kind, const int *peers, int npeers, uint64_t target,
                  double *since, uint32_t *polls);

/* Tell the other local ranks that this rank gave up on the collective. */
void pmc_node_abort(pmc_node *n);

/* Around every copy to or from a peer's exposed buffer: begin marks this
 * rank busy and refuses (PMC_ERR_PEER_ABORTED, errmsg set) once any local
 * rank gave up; end clears the mark. */
int pmc_node_copy_begin(pmc_node *n);
void pmc_node_copy_end(pmc_node *n);

/* After a collective failed on this rank: tells the local ranks (the abort
 * word) and waits until none is still copying to or from an exposed buffer,
 * so that the caller's buffers see no late copies once the error returns. A
 * dead copier is not waited for; past the deadline errmsg says who is left. */
void pmc_node_settle(pmc_node *n);

/* Number of online CPUs (for the spin/yield choice). */
int pmc_online_cpus(void);

#endif
