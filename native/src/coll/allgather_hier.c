/* Allgather across nodes: gather each node's blocks at its leader, exchange
 * node blocks among leaders (Allgatherv: nodes may differ in size), then
 * broadcast the whole result inside each node. When nodes do not hold
 * consecutive ranks the leaders work in node order and reorder at the end. */
#include <string.h>

#include "hier.h"
#include "node_algos.h"

static int leaders_exchange_start(pmc_op *op, unsigned char *buf, uint64_t block, const int *first)
{
    pmc_comm *c = op->c;
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
    int mrc = MPI_Iallgatherv_c(MPI_IN_PLACE, 0, MPI_BYTE, buf, counts, displs, MPI_BYTE, c->lanecomm, &op->mreq);
#else
    int mrc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, buf, counts, displs, MPI_BYTE, c->lanecomm, &op->mreq);
#endif
    return mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(c, mrc, "MPI_Iallgatherv");
}

int pmc_allgather_hier(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    unsigned char *out = recv;
    const uint64_t total = (uint64_t)c->size * block;
    /* f->p: where the leader assembles nodes in node order (recv itself
     * when nodes are consecutive rank ranges). */
    PMC_CO_BEGIN(f);
    f->p = out;
    if (!c->consecutive && n->local_rank == 0) {
        f->p = pmc_scratch(c, (size_t)total);
        if (f->p == NULL) {
            f->pc = 0;
            return pmc_fail(c, PMC_ERR_NOMEM, "Allgather: out of memory for %llu bytes", (unsigned long long)total);
        }
    }
    PMC_AWAIT(f, pmc_gather_node_cico(op, f + 1, send,
                                      (unsigned char *)f->p +
                                          (uint64_t)(c->consecutive ? c->node_first[c->node] : c->member_start[c->node]) * block,
                                      block, NULL, NULL, 0, 1));
    if (n->local_rank == 0) {
        {
            int rc = leaders_exchange_start(op, f->p, block, c->consecutive ? c->node_first : c->member_start);
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
        PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Iallgatherv"));
        if (!c->consecutive) {
            const unsigned char *tmp = f->p;
            for (int i = 0; i < c->size; ++i) memcpy(out + (uint64_t)c->members[i] * block, tmp + (uint64_t)i * block, block);
        }
    }
    PMC_AWAIT(f, pmc_bcast_node_cico(op, f + 1, recv, total, 0));
    PMC_CO_END(f);
}
