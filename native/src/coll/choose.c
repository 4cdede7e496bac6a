/* Algorithm and data-path choice. Every input is the same on all ranks
 * that take part in the step (sizes MPI makes them agree on, the tuning
 * table checked at creation, the node's size for a step within a node), so
 * they all take the same path. */
#include "../comm.h"

int pmc_use_mpi(const pmc_comm *c, int coll)
{
    return !c->shm_active || c->algorithm[coll] == PMC_ALGO_MPI;
}

void pmc_took(pmc_comm *c, int family)
{
    if (c->trace_cur != NULL) c->trace_cur->algorithm = (uint8_t)family;
}

/* k / L^2 bytes for L local ranks, at most cap, whole pages. */
static uint64_t square_law(uint64_t k, int local_ranks, uint64_t cap)
{
    const uint64_t ranks = (uint64_t)(local_ranks > 1 ? local_ranks : 1);
    const uint64_t scaled = (k / (ranks * ranks)) & ~(uint64_t)4095;
    return scaled < cap ? scaled : cap;
}

/* Smallest block per collective that single copy carries faster than the
 * cells, measured with perf/tune_copy_paths.py at 2, 4 and 8 ranks on 2 cores
 * (perf/studies/copy_paths.md). Below it, copy-in/copy-out through cells
 * that stay in cache wins: writer and reader copy at once, and single copy
 * pays the kernel's page pinning on every call. Above it the data no longer
 * fits the cache and single copy's half of the memory traffic wins. A
 * Scatter root copies every reader's block into the cells itself, so its
 * crossover falls with the square of the readers (their number, and how
 * rarely a reader runs beside the root once ranks outnumber cores). An
 * Alltoall's cells carry L^2 blocks at once, so its crossover also falls
 * with the square of the ranks (256-512 KiB at 8), from 1 MiB up to 4
 * ranks: at 2 the cells win in the tuner's reused buffers up to 2 MiB, but
 * with freshly written ones (bench) MPICH's single copy beat them 1.3x at
 * 1 MiB blocks while ours matched it. A Gather's (and a Gatherv's)
 * senders store into the root's buffer side by side, so single copy pays
 * from 2 MiB and, once ranks outnumber cores, earlier (512 KiB at 8). A
 * Scan's rank r reads the inputs of all r ranks below it, L^2/2 reads in
 * all against the cells' chain of L: from 4 ranks the cells win at every
 * size measured (to 32 MiB; 8x at 8 MiB with 8 ranks), so 0 (never). A
 * Bcast between 2 ranks splits the copy between root and receiver, which
 * pays from 4 MiB (0.83x the cells, 0.49x at 64 MiB). */
uint64_t pmc_single_copy_min_default(int coll, int local_ranks)
{
    const uint64_t readers = local_ranks > 1 ? (uint64_t)(local_ranks - 1) : 1;
    switch (coll) {
    case PMC_COLL_BCAST: return local_ranks == 2 ? 4u << 20 : 16u << 20;
    case PMC_COLL_GATHER: case PMC_COLL_GATHERV: return square_law(32u << 20, local_ranks, 2u << 20);
    case PMC_COLL_SCATTER: case PMC_COLL_SCATTERV: return ((4u << 20) / (readers * readers)) & ~(uint64_t)4095;
    case PMC_COLL_ALLGATHER: case PMC_COLL_ALLGATHERV: return 8u << 20;
    case PMC_COLL_ALLTOALL: case PMC_COLL_ALLTOALLV: return square_law(16u << 20, local_ranks, 1u << 20);
    case PMC_COLL_REDUCE_SCATTER_BLOCK: case PMC_COLL_REDUCE_SCATTER: return 4u << 20;
    case PMC_COLL_SCAN: return local_ranks <= 2 ? 16u << 20 : local_ranks == 3 ? 32u << 20 : 0;
    case PMC_COLL_EXSCAN: return local_ranks <= 2 ? 8u << 20 : local_ranks == 3 ? 32u << 20 : 0;
    default: return 0;
    }
}

uint64_t pmc_single_copy_min(const pmc_comm *c, int coll)
{
    return c->cma_min != 0 ? c->cma_min : pmc_single_copy_min_default(coll, c->node_ctx.local_size);
}

static int choose_path(const pmc_comm *c, int coll, uint64_t payload, int can_inline, int can_cma, int may_try)
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
    if (can_cma && c->cma_ok) {
        const uint64_t least = pmc_single_copy_min(c, coll);
        const int table = least != 0 && payload >= least ? PMC_PATH_CMA : PMC_PATH_CICO;
        return may_try ? pmc_trial_path(c, coll, payload, table) : table;
    }
    return PMC_PATH_CICO;
}

int pmc_block_path(const pmc_comm *c, int coll, uint64_t bytes)
{
    const int table = choose_path(c, coll, bytes, 0, 1, 0);
    /* Verdicts exist only where the table is consulted (trials are off for a
     * forced path, a set crossover, or without single copy). */
    const int agreed = pmc_trial_verdict(c, coll, bytes);
    return agreed >= 0 ? agreed : table;
}

int pmc_node_path(const pmc_comm *c, int coll, uint64_t payload, int can_inline, int can_cma)
{
    const int path = choose_path(c, coll, payload, can_inline, can_cma, 1);
    if (c->trace_cur != NULL) c->trace_cur->paths |= (uint8_t)(1u << path);
    return path;
}
