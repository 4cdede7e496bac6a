/* The communicator context: the only mutable state of the core. */
#ifndef PMC_COMM_H
#define PMC_COMM_H

#include <mpi.h>
#include <stdint.h>

#include "node/node.h"
#include "pymcoll.h"

#define PMC_ERRMSG_LEN 768

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
    int broken;
    int check;          /* PYMCOLL_CHECK: agree on arguments before each collective */
    void *scratch;      /* grown on demand for hierarchical steps */
    void *node_counts;  /* [nnodes] MPI counts for the leaders' v-collectives */
    void *node_displs;  /* [nnodes] MPI displacements for the same */
    size_t scratch_bytes;
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

/* Common entry of every collective: checks the communicator is usable,
 * numbers the call and points error messages at it. */
int pmc_coll_enter(pmc_comm *c, const char *name);
/* Collectives, numbered for the argument agreement. */
enum { PMC_COLL_BARRIER = 1, PMC_COLL_BCAST, PMC_COLL_ALLGATHER, PMC_COLL_ALLREDUCE, PMC_COLL_REDUCE };

/* With PYMCOLL_CHECK: every rank contributes what MPI requires all ranks to
 * agree on (collective, message bytes, element type, op, root; -1 where it
 * does not apply); a disagreement fails on every rank with PMC_ERR_ARG
 * before any data moves, and the communicator stays usable. */
int pmc_coll_agree(pmc_comm *c, int kind, uint64_t bytes, int dtype, int op, int root);

/* Common exit: a failure that leaves peers out of step breaks the comm. */
int pmc_coll_leave(pmc_comm *c, int status);

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
