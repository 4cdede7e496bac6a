/* Reductions without a segment: every rank's input is gathered through the
 * wrapped communicator (to the root for Reduce, to all otherwise) and each
 * receiver combines what it needs in rank order: the same bits on every
 * rank, and every element type works, bfloat16 included. */
#include <string.h>

#include "../reduce/reduce_ops.h"
#include "hier.h"

void pmc_combine_blocks(void *out, const unsigned char *blocks, int nblocks, uint64_t count, int dtype, int rop)
{
    const uint64_t bytes = count * (uint64_t)pmc_dtype_size(dtype);
    if (out != blocks) memmove(out, blocks, bytes);
    for (int b = 1; b < nblocks; ++b) pmc_reduce_into(out, blocks + (uint64_t)b * bytes, count, dtype, rop);
}

/* Elements each rank contributes. */
static uint64_t input_count(const pmc_op *op)
{
    const pmc_args *a = &op->a;
    if (a->coll == PMC_COLL_REDUCE_SCATTER_BLOCK) return a->count * (uint64_t)op->c->size;
    if (a->coll == PMC_COLL_REDUCE_SCATTER) {
        uint64_t t = 0;
        for (int i = 0; i < op->c->size; ++i) t += a->recvcounts[i];
        return t;
    }
    return a->count;
}

/* Combines, in rank order, elements [lo, lo + len) of ranks first..last-1. */
static void combine_range(void *out, const unsigned char *all, uint64_t per_rank, int first, int last, uint64_t lo,
                          uint64_t len, int dtype, int rop)
{
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    memcpy(out, all + ((uint64_t)first * per_rank + lo) * esize, len * esize);
    for (int r = first + 1; r < last; ++r) pmc_reduce_into(out, all + ((uint64_t)r * per_rank + lo) * esize, len, dtype, rop);
}

static int inputs_start(pmc_op *op, const void *send, void *all, uint64_t bytes)
{
    pmc_comm *c = op->c;
    pmc_mpi_count n;
    int rc = pmc_mpi_count_of(c, bytes, &n);
    if (rc != PMC_OK) return rc;
    const int to_root = op->a.coll == PMC_COLL_REDUCE;
    int mrc;
#if MPI_VERSION >= 4
    mrc = to_root ? MPI_Igather_c(send, n, MPI_BYTE, all, n, MPI_BYTE, op->a.root, c->comm, &op->mreq)
                  : MPI_Iallgather_c(send, n, MPI_BYTE, all, n, MPI_BYTE, c->comm, &op->mreq);
#else
    mrc = to_root ? MPI_Igather(send, n, MPI_BYTE, all, n, MPI_BYTE, op->a.root, c->comm, &op->mreq)
                  : MPI_Iallgather(send, n, MPI_BYTE, all, n, MPI_BYTE, c->comm, &op->mreq);
#endif
    return mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(c, mrc, to_root ? "MPI_Igather" : "MPI_Iallgather");
}

int pmc_reduce_inputs_start(pmc_op *op, pmc_frame *f, const void *send, uint64_t bytes, int receives, uint64_t extra)
{
    pmc_comm *c = op->c;
    f->p = NULL;
    if (receives) {
        f->p = pmc_scratch(c, (size_t)(bytes * (uint64_t)c->size + extra));
        if (f->p == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", c->node_ctx.coll);
    }
    return inputs_start(op, send, f->p, bytes);
}

int pmc_reduce_mpi_gather(pmc_op *op, pmc_frame *f, const void *send, void *recv)
{
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    const uint64_t count = input_count(op);
    const uint64_t bytes = count * (uint64_t)pmc_dtype_size(a->dtype);
    const int receives = a->coll != PMC_COLL_REDUCE || c->rank == a->root;
    PMC_CO_BEGIN(f);
    {
        int rc = pmc_reduce_inputs_start(op, f, send, bytes, receives, 0);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Iallgather"));
    if (receives) {
        const unsigned char *all = f->p;
        switch (a->coll) {
        case PMC_COLL_SCAN: combine_range(recv, all, count, 0, c->rank + 1, 0, count, a->dtype, a->op); break;
        case PMC_COLL_EXSCAN:
            if (c->rank > 0) combine_range(recv, all, count, 0, c->rank, 0, count, a->dtype, a->op);
            break;
        case PMC_COLL_REDUCE_SCATTER_BLOCK:
            combine_range(recv, all, count, 0, c->size, (uint64_t)c->rank * a->count, a->count, a->dtype, a->op);
            break;
        case PMC_COLL_REDUCE_SCATTER: {
            uint64_t lo = 0;
            for (int i = 0; i < c->rank; ++i) lo += a->recvcounts[i];
            if (a->recvcounts[c->rank] > 0)
                combine_range(recv, all, count, 0, c->size, lo, a->recvcounts[c->rank], a->dtype, a->op);
            break;
        }
        default: pmc_combine_blocks(recv, all, c->size, count, a->dtype, a->op);
        }
    }
    PMC_CO_END(f);
}
