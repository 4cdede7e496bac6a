/* An unmodified MPI application: 1-D heat diffusion on a rod, split over
 * the ranks. Its collectives (Bcast of the parameters, Scatterv of the
 * initial temperatures, Allreduce of the largest change and of the energy,
 * Gatherv of the final profile) run in pymcoll's core when the preload
 * library is given at launch; the halo exchange (MPI_Sendrecv) stays with
 * the MPI. Nothing in this file knows about pymcoll.
 *
 *   mpicc -O2 -o heat examples/heat_preload.c
 *   mpiexec -n 4 ./heat                                                  # plain MPI
 *   mpiexec -genv LD_PRELOAD "$(python -m pymcoll preload --path)" \
 *           -genv PYMCOLL_PMPI_VERBOSE 1 -n 4 ./heat                     # MPICH
 *   mpiexec -x LD_PRELOAD="$(python -m pymcoll preload --path)" \
 *           -x PYMCOLL_PMPI_VERBOSE=1 -n 4 ./heat                        # Open MPI
 *
 * Optional arguments: points steps (defaults 100000 2000).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct params {
    long points; /* global grid points */
    int steps;
    double alpha; /* diffusion number, stable below 0.5 */
} params;

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    params p = {100000, 2000, 0.4};
    if (rank == 0 && argc > 1) p.points = atol(argv[1]);
    if (rank == 0 && argc > 2) p.steps = atoi(argv[2]);
    MPI_Bcast(&p, (int)sizeof(p), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (p.points < size || p.steps < 1) {
        if (rank == 0) fprintf(stderr, "need at least one point per rank and one step\n");
        MPI_Finalize();
        return 2;
    }

    /* Rank r owns counts[r] points; rank 0 builds the initial profile. */
    int *counts = malloc(sizeof(int) * (size_t)size), *displs = malloc(sizeof(int) * (size_t)size);
    for (int r = 0, at = 0; r < size; ++r) {
        counts[r] = (int)(p.points / size + (r < p.points % size));
        displs[r] = at;
        at += counts[r];
    }
    const int n = counts[rank];
    double *whole = NULL;
    if (rank == 0) {
        whole = malloc(sizeof(double) * (size_t)p.points);
        for (long i = 0; i < p.points; ++i) {
            const double x = (double)i / (double)(p.points - 1);
            whole[i] = 100.0 * exp(-200.0 * (x - 0.3) * (x - 0.3)) + 40.0 * (x > 0.7 && x < 0.8);
        }
    }
    double *u = calloc((size_t)n + 2, sizeof(double)), *next = calloc((size_t)n + 2, sizeof(double));
    MPI_Scatterv(whole, counts, displs, MPI_DOUBLE, u + 1, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);

    const int left = rank > 0 ? rank - 1 : MPI_PROC_NULL, right = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
    const double t0 = MPI_Wtime();
    for (int step = 1; step <= p.steps; ++step) {
        MPI_Sendrecv(u + 1, 1, MPI_DOUBLE, left, 0, u + n + 1, 1, MPI_DOUBLE, right, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        MPI_Sendrecv(u + n, 1, MPI_DOUBLE, right, 1, u, 1, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (left == MPI_PROC_NULL) u[0] = u[1];      /* insulated ends */
        if (right == MPI_PROC_NULL) u[n + 1] = u[n];
        double change = 0.0;
        for (int i = 1; i <= n; ++i) {
            next[i] = u[i] + p.alpha * (u[i - 1] - 2.0 * u[i] + u[i + 1]);
            change = fmax(change, fabs(next[i] - u[i]));
        }
        double *swap = u;
        u = next;
        next = swap;
        if (step % 200 == 0 || step == p.steps) {
            double largest = 0.0, energy = 0.0, mine = 0.0;
            for (int i = 1; i <= n; ++i) mine += u[i];
            MPI_Allreduce(&change, &largest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            MPI_Allreduce(&mine, &energy, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            if (rank == 0) printf("step %5d  largest change %.6e  energy %.9e\n", step, largest, energy);
        }
    }
    const double mine_s = MPI_Wtime() - t0;
    double slowest = 0.0;
    MPI_Reduce(&mine_s, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    MPI_Gatherv(u + 1, n, MPI_DOUBLE, whole, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        long hottest = 0;
        for (long i = 1; i < p.points; ++i)
            if (whole[i] > whole[hottest]) hottest = i;
        printf("final: hottest point %ld at %.6f degrees; %d ranks, %.3f s\n", hottest, whole[hottest], size, slowest);
    }
    free(whole);
    free(u);
    free(next);
    free(counts);
    free(displs);
    MPI_Finalize();
    return 0;
}
