/* Pieces shared by the reductions: argument checks, combining gathered
 * blocks, and the path through the wrapped MPI communicator. */
#include <stdlib.h>
#include <string.h>

#include "../reduce/reduce_ops.h"
#include "hier.h"
#include "reduce_entry.h"

int pmc_reduce_check(pmc_comm *c, const char *name, const void *recvbuf, uint64_t count, int dtype, int op,
                     int needs_recv, uint64_t *bytes)
{
    const int esize = pmc_dtype_size(dtype);
    if (esize == 0) return pmc_fail(c, PMC_ERR_ARG, "%s: unknown element type code %d", name, dtype);
    if (!pmc_op_valid(dtype, op))
        return pmc_fail(c, PMC_ERR_ARG, "%s: op code %d is not defined on element type code %d "
                        "(MPI allows SUM/PROD on numbers, MIN/MAX on real numbers, logical ops on "
                        "integers and bool, bitwise ops on integers)", name, op, dtype);
    if (count > UINT64_MAX / (uint64_t)esize / (uint64_t)c->size)
        return pmc_fail(c, PMC_ERR_ARG, "%s: %llu elements overflow the message size", name,
                        (unsigned long long)count);
    if (count > 0 && needs_recv && recvbuf == NULL) return pmc_fail(c, PMC_ERR_ARG, "%s: recvbuf is NULL", name);
    *bytes = count * (uint64_t)esize;
    return PMC_OK;
}

void pmc_combine_blocks(void *out, const unsigned char *blocks, int nblocks, uint64_t count, int dtype, int op)
{
    const uint64_t bytes = count * (uint64_t)pmc_dtype_size(dtype);
    if (out != blocks) memmove(out, blocks, bytes);
    for (int b = 1; b < nblocks; ++b) pmc_reduce_into(out, blocks + (uint64_t)b * bytes, count, dtype, op);
}

int pmc_reduce_mpi_gather(pmc_comm *c, const void *send, void *recv, uint64_t count, int dtype, int op, int root)
{
    const uint64_t bytes = count * (uint64_t)pmc_dtype_size(dtype);
    const int receives = root < 0 || root == c->rank;
    unsigned char *all = NULL;
    if (receives) {
        all = pmc_scratch(c, (size_t)(bytes * (uint64_t)c->size));
        if (all == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", c->node_ctx.coll);
    }
    pmc_mpi_count n;
    int rc = pmc_mpi_count_of(c, bytes, &n);
    if (rc != PMC_OK) return rc;
    int mrc;
#if MPI_VERSION >= 4
    mrc = root < 0 ? MPI_Allgather_c(send, n, MPI_BYTE, all, n, MPI_BYTE, c->comm)
                   : MPI_Gather_c(send, n, MPI_BYTE, all, n, MPI_BYTE, root, c->comm);
#else
    mrc = root < 0 ? MPI_Allgather(send, n, MPI_BYTE, all, n, MPI_BYTE, c->comm)
                   : MPI_Gather(send, n, MPI_BYTE, all, n, MPI_BYTE, root, c->comm);
#endif
    if (mrc != MPI_SUCCESS) return pmc_mpi_fail(c, mrc, root < 0 ? "MPI_Allgather" : "MPI_Gather");
    if (receives) pmc_combine_blocks(recv, all, c->size, count, dtype, op);
    return PMC_OK;
}
