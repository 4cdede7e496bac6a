/* Allgather across nodes: gather each node's blocks at its leader, exchange
 * node blocks among leaders (Allgatherv: nodes may differ in size), then
 * broadcast the whole result inside each node. When nodes do not hold
 * consecutive ranks the leaders work in node order and reorder at the end. */
#include <string.h>

#include "hier.h"
#include "node_algos.h"

static int leaders_exchange(pmc_comm *c, unsigned char *buf, uint64_t block, const int *first)
{
    /* Arrays allocated with the communicator: no allocation per call. */
    pmc_mpi_count *counts = c->node_counts;
    pmc_mpi_displ *displs = c->node_displs;
    for (int k = 0; k < c->nnodes; ++k) {
        pmc_mpi_count cnt = 0, d = 0;
        int rc = pmc_mpi_count_of(c, (uint64_t)c->node_count[k] * block, &cnt);
        if (rc == PMC_OK) rc = pmc_mpi_count_of(c, (uint64_t)first[k] * block, &d);
        if (rc != PMC_OK) return rc;
        counts[k] = cnt;
        displs[k] = (pmc_mpi_displ)d;
    }
#if MPI_VERSION >= 4
    int mrc = MPI_Allgatherv_c(MPI_IN_PLACE, 0, MPI_BYTE, buf, counts, displs, MPI_BYTE, c->lanecomm);
#else
    int mrc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, buf, counts, displs, MPI_BYTE, c->lanecomm);
#endif
    return mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(c, mrc, "MPI_Allgatherv");
}

int pmc_allgather_hier(pmc_comm *c, const void *send, void *recv, uint64_t block)
{
    pmc_node *n = &c->node_ctx;
    unsigned char *out = recv;
    const uint64_t total = (uint64_t)c->size * block;
    int rc;
    if (c->consecutive) {
        unsigned char *node_base = out + (uint64_t)c->node_first[c->node] * block;
        rc = pmc_allgather_node_cico(n, send, node_base, block, 0);
        if (rc == PMC_OK && n->local_rank == 0) rc = leaders_exchange(c, out, block, c->node_first);
    } else {
        unsigned char *tmp = NULL;
        if (n->local_rank == 0) {
            tmp = pmc_scratch(c, (size_t)total);
            if (tmp == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "Allgather: out of memory for %llu bytes",
                                             (unsigned long long)total);
        }
        unsigned char *node_base = tmp ? tmp + (uint64_t)c->member_start[c->node] * block : NULL;
        rc = pmc_allgather_node_cico(n, send, node_base, block, 0);
        if (rc == PMC_OK && n->local_rank == 0) {
            rc = leaders_exchange(c, tmp, block, c->member_start);
            for (int i = 0; rc == PMC_OK && i < c->size; ++i)
                memcpy(out + (uint64_t)c->members[i] * block, tmp + (uint64_t)i * block, block);
        }
    }
    if (rc != PMC_OK) return rc;
    return pmc_bcast_node_cico(n, recv, total, 0);
}
