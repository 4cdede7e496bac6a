/* Bcast across nodes: inside the root's node from the root, among leaders
 * from the root's node, then inside every other node from its leader. */
#include "hier.h"
#include "node_algos.h"

int pmc_bcast_hier(pmc_comm *c, void *buf, uint64_t bytes, int root)
{
    pmc_node *n = &c->node_ctx;
    const int root_node = c->node_of[root];
    const int root_local = c->local_of[root];
    int rc;
    if (c->node == root_node && root_local != 0) {
        rc = pmc_bcast_node_cico(n, buf, bytes, root_local);
        if (rc != PMC_OK) return rc;
    }
    if (n->local_rank == 0) {
        pmc_mpi_count cnt;
        rc = pmc_mpi_count_of(c, bytes, &cnt);
        if (rc != PMC_OK) return rc;
#if MPI_VERSION >= 4
        int mrc = MPI_Bcast_c(buf, cnt, MPI_BYTE, root_node, c->lanecomm);
#else
        int mrc = MPI_Bcast(buf, cnt, MPI_BYTE, root_node, c->lanecomm);
#endif
        if (mrc != MPI_SUCCESS) return pmc_mpi_fail(c, mrc, "MPI_Bcast");
    }
    if (c->node != root_node || root_local == 0) return pmc_bcast_node_cico(n, buf, bytes, 0);
    return PMC_OK;
}
