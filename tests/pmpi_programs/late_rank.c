/* A collective that fails in the core (one rank arrives after the others'
 * deadline, PYMCOLL_TIMEOUT=1) returns an error through the communicator's
 * error handler, and the job goes on: a new communicator works. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int x = rank;
    MPI_Bcast(&x, 1, MPI_INT, 0, comm); /* the core's state exists: the next wait is the core's */
    if (rank == size - 1) {
        /* The full 3 s: the others' timeout sends SIGUSR1 (a trace dump), which ends a sleep early,
         * and a rank arriving right after the deadline is not clearly late. */
        unsigned left = 3;
        while (left > 0) left = sleep(left);
    }
    int y = 0;
    const int rc = MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, comm);
    printf("rank %d late allreduce %s\n", rank, rc == MPI_SUCCESS ? "succeeded" : "failed");
    fflush(stdout);
    MPI_Comm_free(&comm);
    /* A fresh communicator runs in the core again. */
    MPI_Comm again;
    MPI_Comm_dup(MPI_COMM_WORLD, &again);
    int sum = 0, one = 1;
    const int rc2 = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, again);
    printf("rank %d after: rc %d sum %d\n", rank, rc2, sum);
    MPI_Comm_free(&again);
    MPI_Finalize();
    return rc2 == MPI_SUCCESS && sum == size ? 0 : 1;
}
