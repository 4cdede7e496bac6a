/* Packing of derived datatypes into contiguous bytes (MPI_Pack on
 * MPI_COMM_SELF: the layout is this rank's own business). */
#include "mpi_symbols.h"
#include <stdint.h>

#include "pymcoll.h"

int pmc_pack(uintptr_t datatype, const void *inbuf, uint64_t count, void *outbuf, uint64_t bytes)
{
    MPI_Datatype dt = (MPI_Datatype)datatype;
#if MPI_VERSION >= 4
    MPI_Count pos = 0;
    int rc = MPI_Pack_c(inbuf, (MPI_Count)count, dt, outbuf, (MPI_Count)bytes, &pos, MPI_COMM_SELF);
#else
    if (count > INT32_MAX || bytes > INT32_MAX) return PMC_ERR_ARG;
    int pos = 0;
    int rc = MPI_Pack(inbuf, (int)count, dt, outbuf, (int)bytes, &pos, MPI_COMM_SELF);
#endif
    if (rc != MPI_SUCCESS) return PMC_ERR_MPI;
    return (uint64_t)pos == bytes ? PMC_OK : PMC_ERR_ARG;
}

int pmc_unpack(uintptr_t datatype, const void *inbuf, uint64_t bytes, void *outbuf, uint64_t count)
{
    MPI_Datatype dt = (MPI_Datatype)datatype;
#if MPI_VERSION >= 4
    MPI_Count pos = 0;
    int rc = MPI_Unpack_c(inbuf, (MPI_Count)bytes, &pos, outbuf, (MPI_Count)count, dt, MPI_COMM_SELF);
#else
    if (count > INT32_MAX || bytes > INT32_MAX) return PMC_ERR_ARG;
    int pos = 0;
    int rc = MPI_Unpack(inbuf, (int)bytes, &pos, outbuf, (int)count, dt, MPI_COMM_SELF);
#endif
    if (rc != MPI_SUCCESS) return PMC_ERR_MPI;
    return (uint64_t)pos == bytes ? PMC_OK : PMC_ERR_ARG;
}
