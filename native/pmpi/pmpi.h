/* The preload library: MPI_* collectives of an unmodified application run
 * in the pymcoll core.
 *
 * libpymcoll_pmpi.so defines the MPI_X (and, with MPI 4, MPI_X_c) entry of
 * every collective the core implements. Whether a call runs in the core or
 * goes on to PMPI_X depends only on what MPI makes every rank agree on: the
 * kind of communicator, the op, the reduction's datatype and the
 * collective itself. How a rank lays out its data (a derived datatype, a
 * negative displacement) never decides: such data is packed into, and
 * unpacked from, a contiguous staging buffer on that rank alone.
 *
 * Per-communicator state (the core's communicator) is made on the first
 * collective the core serves, kept as an MPI attribute, and released at
 * MPI_Comm_free, MPI_Comm_disconnect and MPI_Finalize.
 */
#ifndef PMPI_PMPI_H
#define PMPI_PMPI_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "pymcoll.h"

#if MPI_VERSION >= 4
#define PMPI_HAS_LARGE 1 /* the MPI has the large-count MPI_X_c functions */
#else
#define PMPI_HAS_LARGE 0
#endif

/* Where a call went: the core, or the MPI library and why. */
enum {
    PMPI_ROUTE_CORE = 0,
    PMPI_ROUTE_INTERCOMM,   /* an intercommunicator */
    PMPI_ROUTE_USER_OP,     /* an op made with MPI_Op_create, MINLOC or MAXLOC */
    PMPI_ROUTE_TYPE,        /* a reduction's datatype or op/type pair the core has no kernel for */
    PMPI_ROUTE_UNAVAILABLE, /* the core's communicator could not be made (see the note printed) */
    PMPI_ROUTE_ARG,         /* erroneous arguments: MPI reports the error as it would without us */
    PMPI_ROUTE_COUNT
};

/* Entries counted for the verbose report: MPI_X and MPI_X_c of each collective. */
#define PMPI_ENTRIES (2 * PMC_COLL_COUNT)

/* One communicator's state, the value of its attribute. */
typedef struct pmpi_comm {
    struct pmpi_comm *prev, *next; /* the context's list of live states */
    MPI_Comm comm;                 /* the application's communicator */
    pmc_comm *core;                /* NULL: every call passes through, for `route` */
    int route;                     /* PMPI_ROUTE_* of calls when core is NULL */
    int rank, size;
    uint64_t *v;                   /* 4 x size counts/displacements in the core's units */
    unsigned char *stage[2];       /* send and receive staging buffers (packed data) */
    size_t stage_bytes[2];
} pmpi_comm;

/* Everything the library keeps between calls (its only mutable global). */
typedef struct pmpi_context {
    atomic_int ready;          /* 1 once set up (keyval made, environment read) */
    pthread_mutex_t lock;      /* guards setup and the list of states */
    int keyval;                /* attribute key of the per-communicator state */
    pmc_config cfg;            /* the core's options from the environment */
    char shm_dir[4096];
    pmc_trace_config trace;    /* PYMCOLL_TRACE, PYMCOLL_TRACE_RING, PYMCOLL_TRACE_SIGNALS */
    char trace_dir[3000];
    int verbose;               /* PYMCOLL_PMPI_VERBOSE */
    pmpi_comm *states;         /* live states, released at MPI_Finalize */
    _Atomic uint64_t calls[PMPI_ENTRIES][PMPI_ROUTE_COUNT];
} pmpi_context;

extern pmpi_context pmpi_ctx;

/* --- pmpi_config.c ------------------------------------------------------ */
/* Fills cfg (and the context's shm_dir, verbose) from the PYMCOLL_*
 * environment and the PYMCOLL_TUNING file. On a bad value writes a message
 * naming the variable and the fix into err and returns nonzero. */
int pmpi_config_read(pmpi_context *ctx, char *err, size_t errlen);

/* --- pmpi_state.c ------------------------------------------------------- */
/* The state serving `comm`, or NULL with *route saying why the call must
 * pass through. Collective on the first call that the core would serve. */
pmpi_comm *pmpi_state(MPI_Comm comm, int *route);
/* Where a call goes: s when the core serves it, else NULL (bad: the
 * arguments are erroneous and MPI must report them). Counts the call. */
pmpi_comm *pmpi_settle(pmpi_comm *s, int route, int bad, int coll, int large);
/* Counts one call of collective `coll` (large: the MPI_X_c entry). */
void pmpi_count(int coll, int large, int route);
/* Returns the MPI status of a core call: success, or the core's message on
 * stderr and the communicator's error handler called. */
int pmpi_status(pmpi_comm *s, int coll, int large, int rc);
/* A staging buffer of at least `bytes` (which: 0 send, 1 receive); NULL if out of memory. */
unsigned char *pmpi_stage(pmpi_comm *s, int which, size_t bytes);

/* --- pmpi_datatype.c ---------------------------------------------------- */
/* What a rank needs to know of a datatype to move its data as bytes. */
typedef struct pmpi_type {
    MPI_Datatype type;
    uint64_t size;    /* bytes of data in one element */
    MPI_Aint extent;  /* stride between elements */
    int dense;        /* one element is `size` contiguous bytes at offset 0, extent == size */
} pmpi_type;

/* 0 on success; nonzero for a datatype MPI rejects (MPI then reports it). */
int pmpi_type_of(MPI_Datatype type, pmpi_type *out);
/* (pmpi_state.c) Checks common to the rooted collectives: the root in range, MPI_IN_PLACE
 * on the root only, and (unless in place) this rank's own side of `count`
 * elements of `type` (its datatype described into *t). Nonzero: erroneous. */
int pmpi_rooted_bad(const pmpi_comm *s, int root, int in_place, MPI_Count count, MPI_Datatype type, pmpi_type *t);
/* The core's element type for a reduction on `type` with `op`, or -1. */
int pmpi_reduce_dtype(MPI_Datatype type, int op);
/* The core's op for a predefined MPI op, or -1 (user-defined and others). */
int pmpi_reduce_op(MPI_Op op);
/* Packs `count` elements at buf into out (count x size bytes). */
int pmpi_pack(const pmpi_type *t, const void *buf, uint64_t count, void *out);
/* Unpacks count x size bytes at in into `count` elements at buf. */
int pmpi_unpack(const pmpi_type *t, const void *in, uint64_t count, void *buf);

/* --- pmpi_staging.c ----------------------------------------------------- */
/* The contiguous bytes of `elems` elements of t at buf, as the core reads
 * or writes them: buf itself for a dense type, else staging buffer `which`
 * (packed from buf first when `load`: inputs and in-place buffers). */
int pmpi_view(pmpi_comm *s, int which, const pmpi_type *t, const void *buf, uint64_t elems, int load, void **out);
/* Writes a staged receive view back into buf (nothing for a dense type). */
int pmpi_unview(const pmpi_type *t, const void *view, uint64_t elems, void *buf);

/* --- counts and displacements of the v forms ---------------------------- */
/* An MPI count/displacement array as the entry received it: int for MPI_X,
 * MPI_Count (counts) or MPI_Aint (displacements) for MPI_X_c. */
typedef struct pmpi_array {
    const void *p;
    int large;
    int displs;
} pmpi_array;

static inline int64_t pmpi_at(pmpi_array a, int i)
{
    if (!a.large) return ((const int *)a.p)[i];
    return a.displs ? (int64_t)((const MPI_Aint *)a.p)[i] : (int64_t)((const MPI_Count *)a.p)[i];
}

/* A v form's side (counts and displacements in elements of t) as the core
 * takes it: byte counts and byte displacements into ucounts/udispls (size
 * entries each) and the buffer they refer to: buf for a dense type with
 * displacements >= 0, else staging buffer `which` holding the blocks packed
 * one after the other (packed from buf first when `load`). */
int pmpi_vview(pmpi_comm *s, int which, const pmpi_type *t, const void *buf, pmpi_array counts, pmpi_array displs,
               int load, uint64_t *ucounts, uint64_t *udispls, void **out);
/* Writes the blocks of a staged v view back into buf. */
int pmpi_vunview(const pmpi_comm *s, const pmpi_type *t, const void *view, pmpi_array counts, pmpi_array displs,
                 const uint64_t *udispls, void *buf);
/* 1 when some count of the array is negative (an erroneous call). */
int pmpi_any_negative(const pmpi_comm *s, pmpi_array counts);

/* The pass-through of an entry: MPI_X's own PMPI_X, or PMPI_X_c for the
 * large-count entry (which exists only where the MPI has it). */
#if PMPI_HAS_LARGE
#define PMPI_PASS(large, small_call, large_call) ((large) ? (large_call) : (small_call))
#else
#define PMPI_PASS(large, small_call, large_call) ((void)(large), (small_call))
#endif

/* Name of an entry, e.g. "MPI_Allgatherv_c". */
const char *pmpi_entry_name(int coll, int large);

#endif
