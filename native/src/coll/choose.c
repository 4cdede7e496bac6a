/* Algorithm and data-path choice. Every input is the same on all ranks
 * (sizes MPI makes them agree on, the tuning table checked at creation), so
 * all ranks take the same path. */
#include "../comm.h"

int pmc_use_mpi(const pmc_comm *c, int coll)
{
    return !c->shm_active || c->algorithm[coll] == PMC_ALGO_MPI;
}

void pmc_took(pmc_comm *c, int family)
{
    if (c->trace_cur != NULL) c->trace_cur->algorithm = (uint8_t)family;
}

static int choose_path(const pmc_comm *c, uint64_t payload, int can_inline, int can_cma)
{
    /* A node of one rank maps no segment; the copy algorithms handle it. */
    if (c->node_ctx.local_size == 1) return PMC_PATH_CICO;
    switch (c->copy) {
    case PMC_COPY_INLINE: return can_inline && payload <= PMC_INLINE_BYTES ? PMC_PATH_INLINE : PMC_PATH_CICO;
    case PMC_COPY_CICO: return PMC_PATH_CICO;
    case PMC_COPY_CMA:
    case PMC_COPY_DIRECT: return can_cma && c->cma_ok ? PMC_PATH_CMA : PMC_PATH_CICO;
    default: break;
    }
    if (can_inline && payload <= c->inline_max && payload <= PMC_INLINE_BYTES) return PMC_PATH_INLINE;
    if (can_cma && c->cma_ok && payload >= c->cma_min) return PMC_PATH_CMA;
    return PMC_PATH_CICO;
}

int pmc_node_path(const pmc_comm *c, uint64_t payload, int can_inline, int can_cma)
{
    const int path = choose_path(c, payload, can_inline, can_cma);
    if (c->trace_cur != NULL) c->trace_cur->paths |= (uint8_t)(1u << path);
    return path;
}
