/* Bcast across nodes: inside the root's node from the root, among leaders
 * from the root's node, then inside every other node from its leader. */
#include "hier.h"
#include "node_algos.h"

int pmc_bcast_hier(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root)
{
    pmc_comm *c = op->c;
    const int root_node = c->node_of[root];
    const int root_local = c->local_of[root];
    PMC_CO_BEGIN(f);
    if (c->node == root_node && root_local != 0) PMC_AWAIT(f, pmc_bcast_node_cico(op, f + 1, buf, bytes, root_local));
    if (c->node_ctx.local_rank == 0) {
        pmc_mpi_count cnt;
        int rc = pmc_mpi_count_of(c, bytes, &cnt);
#if MPI_VERSION >= 4
        int mrc = rc == PMC_OK ? MPI_Ibcast_c(buf, cnt, MPI_BYTE, root_node, c->lanecomm, &op->mreq) : MPI_SUCCESS;
#else
        int mrc = rc == PMC_OK ? MPI_Ibcast(buf, cnt, MPI_BYTE, root_node, c->lanecomm, &op->mreq) : MPI_SUCCESS;
#endif
        if (rc == PMC_OK && mrc != MPI_SUCCESS) rc = pmc_mpi_fail(c, mrc, "MPI_Ibcast");
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
        PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Ibcast"));
    }
    if (c->node != root_node || root_local == 0) PMC_AWAIT(f, pmc_bcast_node_cico(op, f + 1, buf, bytes, 0));
    PMC_CO_END(f);
}
