/* The MPI the core calls.
 *
 * Built into the preload library (PMC_CALL_PMPI), the core sits below the
 * MPI_* entry points that library defines: its own MPI_Allreduce (and every
 * other MPI call, so that a tool stacked on the same MPI sees the
 * application's calls only) must go to the profiling entry points, never
 * back into the interposed ones. The list names every MPI function the
 * core calls; the preload library's test checks that no MPI_* symbol is
 * left undefined in it.
 */
#ifndef PMC_MPI_SYMBOLS_H
#define PMC_MPI_SYMBOLS_H

#include <mpi.h>

#ifdef PMC_CALL_PMPI
#define MPI_Allgather PMPI_Allgather
#define MPI_Allreduce PMPI_Allreduce
#define MPI_Bcast PMPI_Bcast
#define MPI_Cancel PMPI_Cancel
#define MPI_Comm_dup PMPI_Comm_dup
#define MPI_Comm_free PMPI_Comm_free
#define MPI_Comm_rank PMPI_Comm_rank
#define MPI_Comm_set_errhandler PMPI_Comm_set_errhandler
#define MPI_Comm_size PMPI_Comm_size
#define MPI_Comm_split PMPI_Comm_split
#define MPI_Comm_split_type PMPI_Comm_split_type
#define MPI_Error_string PMPI_Error_string
#define MPI_Finalized PMPI_Finalized
#define MPI_Iallgather PMPI_Iallgather
#define MPI_Iallgatherv PMPI_Iallgatherv
#define MPI_Iallreduce PMPI_Iallreduce
#define MPI_Ialltoall PMPI_Ialltoall
#define MPI_Ialltoallv PMPI_Ialltoallv
#define MPI_Ibarrier PMPI_Ibarrier
#define MPI_Ibcast PMPI_Ibcast
#define MPI_Igather PMPI_Igather
#define MPI_Igatherv PMPI_Igatherv
#define MPI_Irecv PMPI_Irecv
#define MPI_Iscatter PMPI_Iscatter
#define MPI_Iscatterv PMPI_Iscatterv
#define MPI_Isend PMPI_Isend
#define MPI_Pack PMPI_Pack
#define MPI_Query_thread PMPI_Query_thread
#define MPI_Request_free PMPI_Request_free
#define MPI_Testall PMPI_Testall
#define MPI_Unpack PMPI_Unpack
#define MPI_Wait PMPI_Wait
#define MPI_Wtime PMPI_Wtime
#if MPI_VERSION >= 4
#define MPI_Iallgather_c PMPI_Iallgather_c
#define MPI_Iallgatherv_c PMPI_Iallgatherv_c
#define MPI_Ialltoall_c PMPI_Ialltoall_c
#define MPI_Ialltoallv_c PMPI_Ialltoallv_c
#define MPI_Ibcast_c PMPI_Ibcast_c
#define MPI_Igather_c PMPI_Igather_c
#define MPI_Igatherv_c PMPI_Igatherv_c
#define MPI_Irecv_c PMPI_Irecv_c
#define MPI_Iscatter_c PMPI_Iscatter_c
#define MPI_Iscatterv_c PMPI_Iscatterv_c
#define MPI_Isend_c PMPI_Isend_c
#define MPI_Pack_c PMPI_Pack_c
#define MPI_Unpack_c PMPI_Unpack_c
#endif
#endif

#endif
