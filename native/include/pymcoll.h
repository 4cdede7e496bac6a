/* pymcoll C core: public API.
 *
 * Small and cffi-friendly: one opaque handle per communicator, plain structs,
 * integer status codes. Nothing here includes mpi.h: communicators cross the
 * boundary as the integer value of their handle (mpi4py's `comm.handle`),
 * which works for MPICH (int handles) and Open MPI (pointer handles) alike.
 */
#ifndef PYMCOLL_H
#define PYMCOLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes returned by every entry point. */
enum {
    PMC_OK = 0,
    PMC_ERR_ARG = 1,       /* bad argument (message says which) */
    PMC_ERR_NOMEM = 2,     /* allocation failed */
    PMC_ERR_MPI = 3,       /* an MPI call failed */
    PMC_ERR_SHM = 4,       /* node segment could not be created or mapped */
    PMC_ERR_TIMEOUT = 5,   /* a wait passed its deadline */
    PMC_ERR_PEER_DEAD = 6, /* a local peer process died while we waited */
    PMC_ERR_BROKEN = 7,    /* communicator unusable after an earlier failure */
    PMC_ERR_SYS = 8,       /* a system call failed */
    PMC_ERR_PEER_ABORTED = 9, /* another local rank gave up on the collective */
    PMC_ERR_MISMATCH = 10     /* the ranks disagree on a message, found while moving data */
};

/* Element types of reductions (numpy's, plus bfloat16 as torch has it). */
enum {
    PMC_DT_INT8 = 0, PMC_DT_INT16, PMC_DT_INT32, PMC_DT_INT64,
    PMC_DT_UINT8, PMC_DT_UINT16, PMC_DT_UINT32, PMC_DT_UINT64,
    PMC_DT_FLOAT16, PMC_DT_BFLOAT16, PMC_DT_FLOAT32, PMC_DT_FLOAT64, PMC_DT_LONGDOUBLE,
    PMC_DT_COMPLEX64, PMC_DT_COMPLEX128, PMC_DT_CLONGDOUBLE, PMC_DT_BOOL,
    PMC_DT_COUNT
};

/* MPI's predefined reduction operations. */
enum {
    PMC_OP_SUM = 0, PMC_OP_PROD, PMC_OP_MIN, PMC_OP_MAX, PMC_OP_LAND, PMC_OP_LOR, PMC_OP_LXOR,
    PMC_OP_BAND, PMC_OP_BOR, PMC_OP_BXOR,
    PMC_OP_COUNT
};

/* Segment modes (PYMCOLL_SHM). */
enum { PMC_SHM_AUTO = 0, PMC_SHM_OFF = 1 };

typedef struct pmc_comm pmc_comm;

/* Per-communicator options; zero-initialised means "defaults". */
typedef struct pmc_config {
    double timeout;          /* seconds per collective wait; 0 = none; <0 = default */
    int node_size;           /* virtual node size; 0 = real nodes */
    int node_cyclic;         /* virtual nodes deal ranks round-robin instead of in blocks */
    int lanes;               /* lane cap; 0 = min ranks per node */
    int shm_mode;            /* PMC_SHM_AUTO or PMC_SHM_OFF */
    uint64_t shm_bytes;      /* data area of the segment; 0 = default */
    uint64_t chunk_bytes;    /* pipeline chunk; 0 = default */
    const char *shm_dir;     /* directory for the segment file; NULL = /dev/shm */
    uint64_t heap_bytes;     /* shared heap per node for pmc_heap_alloc (0 = default; see PMC_DEFAULT_HEAP_BYTES) */
    int check;               /* 1: ranks agree on each call's arguments first (PYMCOLL_CHECK) */
    int progress_thread;     /* 1: a background thread progresses non-blocking operations */
    int wait_sleep;          /* 1: waits sleep at once instead of spinning and yielding first (PYMCOLL_WAIT=sleep) */
    int huge_off;            /* 1: never collapse a buffer exposed for single copy into transparent huge
                                pages (PYMCOLL_HUGE_PAGES=off; default: on its second exposure) */
    uint64_t stream_min;     /* smallest copy of a rank's own block, or through the shared heap, written
                                with streaming stores (x86-64); 0 = from the last-level cache and the
                                node's ranks (pmc_stream_min_default); UINT64_MAX = never
                                (PYMCOLL_STREAM_MIN) */
    uint64_t movsb_min;      /* smallest store into a copy-in cell done as a string move (x86-64 with
                                fast string moves); 0 = PMC_CELL_MOVSB_MIN where the CPU announces
                                them, else never; UINT64_MAX = never (PYMCOLL_CELL_MOVSB_MIN) */
    /* Algorithm selection (the tuning table; every rank must pass the same). */
    uint64_t inline_max;     /* largest payload per rank sent inline (capped at 48 bytes) */
    uint64_t cma_min;        /* smallest block moved by single copy (CMA / shared heap); 0 = each
                                collective's measured default (pmc_single_copy_min) */
    uint64_t flat_max;       /* largest vector every receiver reduces whole (above: slices) */
    uint64_t lanes_small_max; /* largest payload per node the lanes move by radix-(L+1) exchange */
    uint64_t lanes_bcast_tree_max; /* largest Bcast across nodes sent down the lanes' tree whole */
    uint64_t lanes_direct_min; /* Alltoall(v) across nodes: smallest mean block per rank pair sent rank to rank */
    int copy;                /* PMC_COPY_*: force a data path where it can carry the call */
    int algorithm[16];       /* per collective (index PMC_COLL_* - 1): PMC_ALGO_* */
    int fixed_paths;         /* 1: the crossover table alone chooses between the cells and single copy
                                (PYMCOLL_PATH_TRIALS=0); 0: on one node, the first blocking calls of each
                                collective and size class from 16 KiB try both and the ranks keep the faster
                                (not when cma_min or copy fixes the path) */
} pmc_config;

/* Data paths within a node (PYMCOLL_COPY). */
enum { PMC_COPY_AUTO = 0, PMC_COPY_INLINE, PMC_COPY_CICO, PMC_COPY_CMA, PMC_COPY_DIRECT };
/* Algorithm choice per collective (PYMCOLL_<COLL>_ALGORITHM): the node
 * segment (with MPI between nodes: auto and shm take the lanes where the
 * collective has a lane algorithm), the wrapped MPI communicator, the
 * single-leader hierarchy (one rank per node talks between nodes) or the
 * multi-object lanes (every local rank below L talks to its lane peers). */
enum { PMC_ALGO_AUTO = 0, PMC_ALGO_SHM, PMC_ALGO_MPI, PMC_ALGO_LEADER, PMC_ALGO_LANES };

/* What a communicator looks like from one rank. */
typedef struct pmc_layout {
    int rank, size;           /* in the wrapped communicator */
    int node, nnodes;         /* this rank's node index and the node count */
    int local_rank, local_size;
    int lanes;                /* lane count L */
    int lane;                 /* this rank's lane, -1 if local_rank >= L */
    int min_local, max_local; /* smallest and largest node */
    int shm_active;           /* 1 when the node segment is in use */
    int consecutive;          /* 1 when nodes hold consecutive rank ranges */
    uint64_t segment_bytes;   /* this node's mapping, control area included (0: none) */
    uint64_t data_bytes;      /* data area of every node's segment (0: no segments) */
    uint64_t chunk_bytes;     /* pipeline chunk */
    int cma_ok;               /* single copy with process_vm_readv works on every node */
} pmc_layout;

/* Default values, also reported by `python -m pymcoll info`. */
#define PMC_DEFAULT_TIMEOUT 300.0
#define PMC_DEFAULT_SHM_BYTES (4u << 20)
#define PMC_DEFAULT_CHUNK_BYTES (64u << 10)
#define PMC_DEFAULT_INLINE_MAX 48u
#define PMC_DEFAULT_HEAP_BYTES (16u << 20)
#define PMC_DEFAULT_FLAT_MAX (4u << 10)
#define PMC_DEFAULT_STREAM_MIN 0u /* from the cache: pmc_stream_min_default (perf/studies/large_and_back_to_back.md) */
#define PMC_DEFAULT_CMA_MIN 0u /* per collective: pmc_single_copy_min_default */
#define PMC_DEFAULT_LANES_SMALL_MAX (64u << 10)
#define PMC_DEFAULT_LANES_BCAST_TREE_MAX (256u << 10) /* measured: perf/studies/lanes.md, switch points */
#define PMC_DEFAULT_LANES_DIRECT_MIN (2u << 10) /* measured: perf/studies/lanes.md, Alltoall */

#define PMC_DEFAULT_TRACE_RING 1024u /* trace records kept per communicator */

/* Fills cfg with the defaults (what zero fields mean). */
void pmc_config_defaults(pmc_config *cfg);

/* Collective over `mpi_comm` (all ranks call it). On failure *out is NULL.
 * A segment that cannot be created is not a failure: the communicator then
 * runs the wrapped MPI collectives (shm_active = 0) and pmc_comm_note()
 * explains why. */
int pmc_comm_create(uintptr_t mpi_comm, const pmc_config *cfg, pmc_comm **out);
/* The same; on failure `why` (whylen bytes, may be NULL) receives the reason
 * instead of stderr (ranks disagreeing on a tuning value, an MPI error). */
int pmc_comm_create_why(uintptr_t mpi_comm, const pmc_config *cfg, pmc_comm **out, char *why, size_t whylen);
/* Local: unmaps the segment and frees the communicators; works after errors. */
int pmc_comm_free(pmc_comm *c);
int pmc_comm_layout(const pmc_comm *c, pmc_layout *out);
/* Global rank of every rank's node index and local rank (arrays of size). */
int pmc_comm_rank_map(const pmc_comm *c, int *node_of, int *local_of);
/* Message of the last error on this communicator ("" if none). */
const char *pmc_comm_errmsg(const pmc_comm *c);
/* Informational note from creation (why the segment is not used, ...). */
const char *pmc_comm_note(const pmc_comm *c);
/* Sequence number of the last collective started on this communicator. */
uint64_t pmc_comm_seq(const pmc_comm *c);
int pmc_comm_broken(const pmc_comm *c);
/* Messages and bytes this rank has sent to other nodes on its lane (the
 * lane algorithms' point-to-point traffic; 0 on ranks past the lanes). */
int pmc_comm_lane_traffic(const pmc_comm *c, uint64_t *messages, uint64_t *bytes);
/* Buffers this rank exposed for single copy and then collapsed into
 * transparent huge pages on their second exposure (PYMCOLL_HUGE_PAGES): the
 * collapses done, the bytes they covered, and the collapses the kernel
 * refused (each range is tried once). */
int pmc_comm_huge_pages(const pmc_comm *c, uint64_t *collapses, uint64_t *bytes, uint64_t *failures);
/* Path trials of collective `coll` (PMC_COLL_*) in size class `k`: payloads
 * from *min_bytes to twice it (the last class has no upper end; classes start
 * at 16 KiB, a Bcast's at 256 KiB where the node's ranks outnumber its
 * CPUs): trial
 * calls done (of the latest round), the rounds run again because a later
 * check found the agreed path slower than the other path's trials, the
 * agreed path (-1 while undecided, else 0 for the cells or 2 for single copy), and each path's shortest period between trials in seconds
 * as the ranks agreed on it (0 until agreed). PMC_ERR_ARG for a code or class
 * out of range; *calls is 0 where trials are off. PMC_TRIAL_CALLS_PER_CLASS:
 * the blocking calls of a collective and size class that are trials (a
 * benchmark warms up with at least as many). */
enum { PMC_TRIAL_SIZE_CLASSES = 26, PMC_TRIAL_CALLS_PER_CLASS = 8 };
int pmc_comm_path_trial(const pmc_comm *c, int coll, int k, uint64_t *min_bytes, int *calls, int *retrials, int *chosen,
                        double *cells_s, double *single_copy_s);

/* Broadcasts within a node of PMC_BCAST_PAGE_CELLS_MIN to PMC_BCAST_PAGE_CELLS_MAX bytes go
 * through a ring of PMC_BCAST_PAGE_CELL-byte cells instead of chunk-sized ones (boundaries
 * the property tests draw sizes around). */
enum { PMC_BCAST_PAGE_CELL = 4096, PMC_BCAST_PAGE_CELLS_MIN = 1536, PMC_BCAST_PAGE_CELLS_MAX = 8192 };

/* Trace identifier of the communicator: the same string on every member. */
const char *pmc_comm_trace_id(const pmc_comm *c);

/* The collective trace (process-wide). Every collective appends a record
 * to its communicator's ring; dumps are JSON files DIR/rank<N>.json. */
typedef struct pmc_trace_config {
    const char *dir;          /* PYMCOLL_TRACE: where dumps go; NULL or "" = no files */
    uint32_t ring_records;    /* records per communicator created afterwards; 0 = no trace */
    int signals;              /* 1: dump on SIGUSR1 and fatal signals; SIGUSR1 the local ranks
                                 a wait timed out on */
} pmc_trace_config;
/* Applies cfg (before or between communicator creations); creates dir.
 * PMC_ERR_SYS when dir cannot be created or written, PMC_ERR_ARG when too long. */
int pmc_trace_setup(const pmc_trace_config *cfg);
/* Writes this process's rings now (reason "finalize", "request", ...);
 * PMC_ERR_ARG without a directory, PMC_ERR_SYS when writing fails. */
int pmc_trace_dump(const char *reason);
/* The directory dumps go to ("" = none). */
const char *pmc_trace_dir(void);
/* Mean cost in ns of recording one collective (enter and end, clock reads
 * included), timed over `iterations` on a private ring. */
double pmc_trace_cost_ns(uint64_t iterations);

/* Collectives, as numbered in pmc_args.coll, traces and error messages. */
enum {
    PMC_COLL_BARRIER = 1, PMC_COLL_BCAST, PMC_COLL_ALLGATHER, PMC_COLL_ALLREDUCE, PMC_COLL_REDUCE,
    PMC_COLL_GATHER, PMC_COLL_GATHERV, PMC_COLL_SCATTER, PMC_COLL_SCATTERV, PMC_COLL_ALLGATHERV,
    PMC_COLL_ALLTOALL, PMC_COLL_ALLTOALLV, PMC_COLL_REDUCE_SCATTER_BLOCK, PMC_COLL_REDUCE_SCATTER,
    PMC_COLL_SCAN, PMC_COLL_EXSCAN,
    PMC_COLL_COUNT
};

/* One collective call. Data-moving collectives count bytes, reductions
 * count elements of `dtype`. Displacements are always bytes.
 *  Bcast:       recvbuf is the buffer, count bytes, root.
 *  Gather:      count bytes per rank; in place: the root's block is already
 *               in recvbuf.                  Gatherv: count = this rank's
 *               bytes; recvcounts/rdispls at the root.
 *  Scatter:     count bytes per rank; in place: the root keeps its block in
 *               sendbuf.                     Scatterv: sendcounts/sdispls at
 *               the root, count = this rank's bytes.
 *  Allgather:   count bytes per rank; in place: this rank's block is in
 *               recvbuf.                     Allgatherv: count = this rank's
 *               bytes (= recvcounts[rank]), recvcounts/rdispls everywhere.
 *  Alltoall:    count bytes per pair; in place: data in recvbuf.
 *  Alltoallv:   all four arrays (in place: the receive arrays only).
 *  Reduce, Allreduce, Scan, Exscan: count elements; in place: input in
 *               recvbuf (Reduce: at the root only).
 *  Reduce_scatter_block: count elements per rank.  Reduce_scatter:
 *               recvcounts in elements. In place: the whole input in recvbuf. */
typedef struct pmc_args {
    int coll;
    int in_place;
    const void *sendbuf;
    void *recvbuf;
    uint64_t count;
    int dtype, op, root;
    const uint64_t *sendcounts, *sdispls, *recvcounts, *rdispls;
} pmc_args;

typedef struct pmc_request pmc_request;

/* Blocking call of any collective. */
int pmc_run(pmc_comm *c, const pmc_args *a);
/* Checks the arguments and makes a request (arrays copied). Non-persistent
 * requests are started by the first pmc_request_start; persistent ones by
 * every start. Neither creation nor start waits for other ranks. */
int pmc_request_create(pmc_comm *c, const pmc_args *a, int persistent, pmc_request **out);
int pmc_request_start(pmc_request *r);
/* *done = 1 once the request completed; its status is returned then. */
int pmc_request_test(pmc_request *r, int *done);
int pmc_request_wait(pmc_request *r);
/* An active request completes in the background and is freed then. */
int pmc_request_free(pmc_request *r);
int pmc_request_active(const pmc_request *r);
/* Message of the request's failure ("" if none). */
const char *pmc_request_errmsg(const pmc_request *r);
/* Moves the communicator's started requests as far as they go without waiting. */
int pmc_comm_progress(pmc_comm *c);
/* A collective that runs in the wrapped MPI communicator instead of the
 * core (device buffers, user-defined ops): it takes the next call number and
 * a trace record with algorithm "mpi". begin before the MPI call (mode: 0
 * blocking, 1 non-blocking, 2 persistent start) returns the call's number
 * (0 if c is NULL); end records its completion status (PMC_OK, or
 * PMC_ERR_MPI / PMC_ERR_ARG when MPI or its caller raised). */
uint64_t pmc_external_begin(pmc_comm *c, const pmc_args *a, int mode);
void pmc_external_end(pmc_comm *c, uint64_t seq, int status);
/* Name of a PMC_COLL_* code ("?" if unknown). */
const char *pmc_coll_name(int coll);
/* Smallest block (bytes) that collective `coll` (PMC_COLL_*) moves by single
 * copy instead of copy-in/copy-out within a node of `local_ranks` ranks,
 * when PYMCOLL_CMA_MIN is not set: measured per collective
 * (perf/studies/copy_paths.md); 0 for a code without single copy. */
uint64_t pmc_single_copy_min_default(int coll, int local_ranks);
/* Smallest own-block or shared-heap copy written with streaming stores on a
 * node of `local_ranks` ranks when PYMCOLL_STREAM_MIN is not set: the
 * last-level cache over twice the ranks, at least 1 MiB (1 MiB where sysfs
 * does not give the cache). Below it a collective's sources and destinations
 * on the node fit the cache together, and a plain copy leaves the
 * destination there for its reader: streaming stores, which go to memory,
 * ran 1.05-1.7x slower at 2 ranks up to 6 MiB on a 32 MiB cache; above it
 * they save reading lines that would be evicted unread. */
uint64_t pmc_stream_min_default(int local_ranks);
/* The same on communicator `c`: its cma_min if one was given, else the default. */
uint64_t pmc_single_copy_min(const pmc_comm *c, int coll);

/* Collectives (buffer API, bytes). */
int pmc_barrier(pmc_comm *c);
int pmc_bcast(pmc_comm *c, void *buf, uint64_t bytes, int root);
/* sendbuf == NULL means in place: this rank's block already sits in recvbuf. */
int pmc_allgather(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t block_bytes);

/* The node's shared heap: buffers every local rank can read directly
 * (collectives on them copy once, with no system call). Allocation is local
 * (no other rank takes part); each rank has an equal share of the heap. */
typedef struct pmc_heap pmc_heap;
/* The heap of c's node (NULL without a segment or with a heap of 0 bytes). */
pmc_heap *pmc_comm_heap(pmc_comm *c);
/* 64-byte aligned block of `bytes`, its pages reserved in the segment's
 * directory; PMC_ERR_NOMEM when this rank's share is exhausted, PMC_ERR_SHM
 * when the directory (a tmpfs) has no room left for the pages. */
int pmc_heap_alloc(pmc_heap *h, uint64_t bytes, void **out);
/* Returns a block; the heap outlives its communicator until its last block is freed. */
int pmc_heap_free(pmc_heap *h, void *p);
/* This rank's share, bytes in use and the largest free block. */
void pmc_heap_stats(const pmc_heap *h, uint64_t *arena, uint64_t *used, uint64_t *largest_free);

/* Bytes of one element of a PMC_DT_* type (0 for an unknown code). */
int pmc_dtype_size(int dtype);
/* 1 if MPI allows the op on the type (e.g. no MIN on complex, no SUM on bool). */
int pmc_op_valid(int dtype, int op);
/* Reductions. sendbuf == NULL means in place (the input is in recvbuf; for
 * Reduce only at the root). Results are the same bits on every rank: each
 * element is combined in rank order by exactly one rank. */
int pmc_allreduce(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op);
int pmc_reduce(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op, int root);
/* Direct calls of the other uniform collectives (bytes per rank for the
 * data-moving ones). In place: sendbuf NULL (Scatter: recvbuf NULL at the
 * root), as pmc_args describes. */
int pmc_gather(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t bytes, int root);
int pmc_scatter(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t bytes, int root);
int pmc_alltoall(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t bytes);
int pmc_reduce_scatter_block(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op);
int pmc_scan(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op);
int pmc_exscan(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op);

/* Local packing of `count` elements of an MPI datatype (its handle value)
 * into, or out of, a contiguous buffer of `bytes` (count x type size), so
 * that collectives on non-contiguous layouts move plain bytes. */
int pmc_pack(uintptr_t datatype, const void *inbuf, uint64_t count, void *outbuf, uint64_t bytes);
int pmc_unpack(uintptr_t datatype, const void *inbuf, uint64_t bytes, void *outbuf, uint64_t count);

/* Static text for a status code. */
const char *pmc_strerror(int status);
/* "MPICH 5.0.2" style identification of the MPI the core was compiled with. */
const char *pmc_mpi_build_vendor(void);
/* Whether cross-memory attach (process_vm_readv) works between two
 * processes that are not parent and child of each other the way MPI ranks
 * are: 1 yes, 0 refused (ptrace policy, seccomp), negative on probe failure. */
int pmc_cma_probe(void);

#ifdef __cplusplus
}
#endif
#endif
