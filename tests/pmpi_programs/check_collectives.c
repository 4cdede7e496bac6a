/* Every collective the pymcoll core implements, called through MPI_* as an
 * unmodified application calls them, with results checked against values
 * computed locally. Run with and without the preload library: the printed
 * digest of every received buffer must be the same.
 *
 * Covers: all roots, MPI_IN_PLACE, sizes on both sides of the core's copy
 * thresholds, derived datatypes on one side only (the type signature still
 * matches), v forms with uneven counts and displacements out of order,
 * reductions over the predefined ops and types, sub-communicators, and
 * calls the library must pass to MPI (a user-defined op, MINLOC on
 * MPI_2INT, an intercommunicator).
 */
#include <complex.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct checker {
    int rank, failures, checks;
    uint64_t digest;
} checker;

static checker ck = {0, 0, 0, UINT64_C(1469598103934665603)};

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        ++ck.checks;                                                            \
        if (!(cond) && ck.failures++ < 20) {                                    \
            fprintf(stderr, "rank %d: %s:%d: ", ck.rank, __func__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

static void mix(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; ++i) {
        ck.digest ^= b[i];
        ck.digest *= UINT64_C(1099511628211);
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* The value rank r contributes at index i. */
static int val(int r, int i) { return (r * 131 + i * 7) % 1000 - 300; }

static const int sizes[] = {1, 7, 600, 5000, 70000}; /* ints: 4 B .. 280 KB */
#define NSIZES ((int)(sizeof(sizes) / sizeof(sizes[0])))

static void check_bcast(MPI_Comm comm, int rank, int size)
{
    for (int s = 0; s < NSIZES; ++s) {
        const int n = sizes[s];
        int *buf = xmalloc((size_t)n * 2 * sizeof(int));
        for (int root = 0; root < size; root += (n > 600 ? size - 1 : 1)) {
            for (int i = 0; i < n; ++i) buf[i] = rank == root ? val(root, i) : -1;
            MPI_Bcast(buf, n, MPI_INT, root, comm);
            int bad = 0;
            for (int i = 0; i < n; ++i) bad += buf[i] != val(root, i);
            CHECK(!bad, "Bcast n=%d root=%d: %d wrong", n, root, bad);
            mix(buf, (size_t)n * sizeof(int));
            if (root + (n > 600 ? size - 1 : 1) <= root) break;
        }
        /* The root describes its data as a strided vector, the others as contiguous ints. */
        MPI_Datatype vec;
        MPI_Type_vector(n, 1, 2, MPI_INT, &vec);
        MPI_Type_commit(&vec);
        const int root = size - 1;
        for (int i = 0; i < 2 * n; ++i) buf[i] = rank == root ? (i % 2 ? -7 : val(root, i / 2)) : -1;
        if (rank == root) MPI_Bcast(buf, 1, vec, root, comm);
        else MPI_Bcast(buf, n, MPI_INT, root, comm);
        int bad = 0;
        for (int i = 0; i < n; ++i) bad += (rank == root ? buf[2 * i] : buf[i]) != val(root, i);
        CHECK(!bad, "Bcast vector n=%d: %d wrong", n, bad);
        MPI_Type_free(&vec);
        free(buf);
    }
}

static void check_gather_scatter(MPI_Comm comm, int rank, int size)
{
    for (int s = 0; s < NSIZES - 1; ++s) {
        const int n = sizes[s];
        int *mine = xmalloc((size_t)n * sizeof(int));
        int *all = xmalloc((size_t)n * (size_t)size * sizeof(int));
        for (int root = 0; root < size; ++root) {
            for (int inplace = 0; inplace < 2; ++inplace) {
                for (int i = 0; i < n; ++i) mine[i] = val(rank, i);
                for (int i = 0; i < n * size; ++i) all[i] = -1;
                const int use_in_place = inplace && rank == root;
                if (use_in_place) memcpy(all + (size_t)n * (size_t)root, mine, (size_t)n * sizeof(int));
                MPI_Gather(use_in_place ? MPI_IN_PLACE : mine, n, MPI_INT, all, n, MPI_INT, root, comm);
                if (rank == root) {
                    int bad = 0;
                    for (int r = 0; r < size; ++r)
                        for (int i = 0; i < n; ++i) bad += all[(size_t)r * n + i] != val(r, i);
                    CHECK(!bad, "Gather n=%d root=%d in_place=%d: %d wrong", n, root, inplace, bad);
                    mix(all, (size_t)n * size * sizeof(int));
                }
                /* Scatter the root's blocks back: rank r gets val(r + 1, i). */
                if (rank == root)
                    for (int r = 0; r < size; ++r)
                        for (int i = 0; i < n; ++i) all[(size_t)r * n + i] = val(r + 1, i);
                for (int i = 0; i < n; ++i) mine[i] = -1;
                MPI_Scatter(all, n, MPI_INT, use_in_place ? MPI_IN_PLACE : mine, n, MPI_INT, root, comm);
                if (!use_in_place) {
                    int bad = 0;
                    for (int i = 0; i < n; ++i) bad += mine[i] != val(rank + 1, i);
                    CHECK(!bad, "Scatter n=%d root=%d: %d wrong", n, root, bad);
                    mix(mine, (size_t)n * sizeof(int));
                }
            }
            if (n > 600 && root == 0) root = size - 2 > 0 ? size - 2 : root; /* large: roots 0 and last */
        }
        free(mine);
        free(all);
    }
}

/* Uneven counts, displacements in reverse rank order with gaps. */
static void vlayout(int size, int base, int *counts, int *displs)
{
    int at = 0;
    for (int r = size - 1; r >= 0; --r) {
        counts[r] = base + (r % 3) * (base / 2 + 1) - (r == 1 ? base : 0);
        if (counts[r] < 0) counts[r] = 0;
        displs[r] = at + 3;
        at = displs[r] + counts[r];
    }
}

static int vextent(int size, const int *counts, const int *displs)
{
    int hi = 0;
    for (int r = 0; r < size; ++r)
        if (displs[r] + counts[r] > hi) hi = displs[r] + counts[r];
    return hi;
}

static void check_vforms(MPI_Comm comm, int rank, int size)
{
    int *counts = xmalloc((size_t)size * sizeof(int)), *displs = xmalloc((size_t)size * sizeof(int));
    int *scounts = xmalloc((size_t)size * sizeof(int)), *sdispls = xmalloc((size_t)size * sizeof(int));
    for (int s = 0; s < NSIZES - 1; ++s) {
        vlayout(size, sizes[s], counts, displs);
        const int ext = vextent(size, counts, displs);
        int *all = xmalloc((size_t)ext * sizeof(int));
        int *mine = xmalloc((size_t)(counts[rank] + 1) * sizeof(int));
        for (int inplace = 0; inplace < 2; ++inplace) {
            const int root = (s + inplace) % size;
            const int use_in_place = inplace && rank == root;
            for (int i = 0; i < counts[rank]; ++i) mine[i] = val(rank, i);
            for (int i = 0; i < ext; ++i) all[i] = -9;
            if (use_in_place) memcpy(all + displs[rank], mine, (size_t)counts[rank] * sizeof(int));
            MPI_Gatherv(use_in_place ? MPI_IN_PLACE : mine, counts[rank], MPI_INT, all, counts, displs, MPI_INT,
                        root, comm);
            if (rank == root) {
                int bad = 0;
                for (int r = 0; r < size; ++r)
                    for (int i = 0; i < counts[r]; ++i) bad += all[displs[r] + i] != val(r, i);
                bad += all[0] != -9; /* gaps untouched */
                CHECK(!bad, "Gatherv base=%d root=%d in_place=%d: %d wrong", sizes[s], root, inplace, bad);
                mix(all, (size_t)ext * sizeof(int));
            }
            for (int i = 0; i < counts[rank]; ++i) mine[i] = -1;
            MPI_Scatterv(all, counts, displs, MPI_INT, use_in_place ? MPI_IN_PLACE : mine, counts[rank], MPI_INT,
                         root, comm);
            if (!use_in_place) {
                int bad = 0;
                for (int i = 0; i < counts[rank]; ++i) bad += mine[i] != val(rank, i);
                CHECK(!bad, "Scatterv base=%d root=%d: %d wrong", sizes[s], root, bad);
                mix(mine, (size_t)counts[rank] * sizeof(int));
            }
            for (int i = 0; i < ext; ++i) all[i] = -9;
            for (int i = 0; i < counts[rank]; ++i) mine[i] = val(rank, i);
            if (inplace) memcpy(all + displs[rank], mine, (size_t)counts[rank] * sizeof(int));
            MPI_Allgatherv(inplace ? MPI_IN_PLACE : mine, counts[rank], MPI_INT, all, counts, displs, MPI_INT, comm);
            int bad = 0;
            for (int r = 0; r < size; ++r)
                for (int i = 0; i < counts[r]; ++i) bad += all[displs[r] + i] != val(r, i);
            CHECK(!bad, "Allgatherv base=%d in_place=%d: %d wrong", sizes[s], inplace, bad);
            mix(all, (size_t)ext * sizeof(int));
        }
        /* Alltoallv: rank r sends (r + d) % 4 + base/8 ints to rank d. */
        const int unit = sizes[s] / 8 + 1;
        int stot = 0, rtot = 0;
        for (int d = 0; d < size; ++d) {
            scounts[d] = (rank + d) % 4 * unit;
            counts[d] = (d + rank) % 4 * unit; /* what d sends me */
        }
        for (int d = size - 1; d >= 0; --d) {
            sdispls[d] = stot;
            stot += scounts[d];
        }
        for (int d = 0; d < size; ++d) {
            displs[d] = rtot + 1;
            rtot = displs[d] + counts[d];
        }
        int *sb = xmalloc((size_t)stot * sizeof(int)), *rb = xmalloc((size_t)(rtot + 1) * sizeof(int));
        for (int inplace = 0; inplace < 2; ++inplace) {
            for (int d = 0; d < size; ++d)
                for (int i = 0; i < scounts[d]; ++i) sb[sdispls[d] + i] = val(rank * size + d, i);
            for (int i = 0; i <= rtot; ++i) rb[i] = -5;
            if (inplace) {
                /* In place the receive layout carries the data out. */
                for (int d = 0; d < size; ++d)
                    for (int i = 0; i < counts[d]; ++i) rb[displs[d] + i] = val(rank * size + d, i);
                MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, rb, counts, displs, MPI_INT, comm);
            } else {
                MPI_Alltoallv(sb, scounts, sdispls, MPI_INT, rb, counts, displs, MPI_INT, comm);
            }
            int bad = 0;
            for (int d = 0; d < size; ++d)
                for (int i = 0; i < counts[d]; ++i) bad += rb[displs[d] + i] != val(d * size + rank, i);
            CHECK(!bad, "Alltoallv unit=%d in_place=%d: %d wrong", unit, inplace, bad);
            mix(rb, (size_t)(rtot + 1) * sizeof(int));
            if (inplace) break;
            /* In place needs symmetric counts: make them so for the second round. */
            for (int d = 0; d < size; ++d) scounts[d] = counts[d];
            stot = 0;
            for (int d = size - 1; d >= 0; --d) {
                sdispls[d] = stot;
                stot += scounts[d];
            }
            free(sb);
            sb = xmalloc((size_t)stot * sizeof(int) + 4);
        }
        free(sb);
        free(rb);
        free(all);
        free(mine);
    }
    free(counts);
    free(displs);
    free(scounts);
    free(sdispls);
}

static void check_allgather_alltoall(MPI_Comm comm, int rank, int size)
{
    for (int s = 0; s < NSIZES - 1; ++s) {
        const int n = sizes[s];
        int *mine = xmalloc((size_t)n * (size_t)size * sizeof(int));
        int *all = xmalloc((size_t)n * (size_t)size * sizeof(int));
        for (int inplace = 0; inplace < 2; ++inplace) {
            for (int i = 0; i < n * size; ++i) all[i] = -1;
            for (int i = 0; i < n; ++i) mine[i] = val(rank, i);
            if (inplace) memcpy(all + (size_t)n * rank, mine, (size_t)n * sizeof(int));
            MPI_Allgather(inplace ? MPI_IN_PLACE : mine, n, MPI_INT, all, n, MPI_INT, comm);
            int bad = 0;
            for (int r = 0; r < size; ++r)
                for (int i = 0; i < n; ++i) bad += all[(size_t)r * n + i] != val(r, i);
            CHECK(!bad, "Allgather n=%d in_place=%d: %d wrong", n, inplace, bad);
            mix(all, (size_t)n * size * sizeof(int));
            /* Alltoall: block d of rank r is val(r * size + d, i). */
            for (int d = 0; d < size; ++d)
                for (int i = 0; i < n; ++i) (inplace ? all : mine)[(size_t)d * n + i] = val(rank * size + d, i);
            MPI_Alltoall(inplace ? MPI_IN_PLACE : mine, n, MPI_INT, all, n, MPI_INT, comm);
            bad = 0;
            for (int r = 0; r < size; ++r)
                for (int i = 0; i < n; ++i) bad += all[(size_t)r * n + i] != val(r * size + rank, i);
            CHECK(!bad, "Alltoall n=%d in_place=%d: %d wrong", n, inplace, bad);
            mix(all, (size_t)n * size * sizeof(int));
        }
        /* Allgather received as a resized type with holes: each int then a gap. */
        MPI_Datatype gapped;
        MPI_Type_create_resized(MPI_INT, 0, 2 * (MPI_Aint)sizeof(int), &gapped);
        MPI_Type_commit(&gapped);
        int *wide = xmalloc((size_t)n * (size_t)size * 2 * sizeof(int));
        for (int i = 0; i < 2 * n * size; ++i) wide[i] = -3;
        for (int i = 0; i < n; ++i) mine[i] = val(rank, i);
        MPI_Allgather(mine, n, MPI_INT, wide, n, gapped, comm);
        int bad = 0;
        for (int r = 0; r < size; ++r)
            for (int i = 0; i < n; ++i) bad += wide[2 * ((size_t)r * n + i)] != val(r, i) || wide[2 * ((size_t)r * n + i) + 1] != -3;
        CHECK(!bad, "Allgather into a resized type n=%d: %d wrong", n, bad);
        mix(wide, (size_t)n * size * 2 * sizeof(int));
        MPI_Type_free(&gapped);
        free(wide);
        free(mine);
        free(all);
    }
}

/* Reductions: integer-valued inputs, so float sums are exact in any order. */
static void check_reductions(MPI_Comm comm, int rank, int size)
{
    for (int s = 0; s < NSIZES; ++s) {
        const int n = sizes[s];
        double *dx = xmalloc((size_t)n * sizeof(double)), *dy = xmalloc((size_t)n * sizeof(double));
        long long *lx = xmalloc((size_t)n * sizeof(long long)), *ly = xmalloc((size_t)n * sizeof(long long));
        for (int inplace = 0; inplace < 2; ++inplace) {
            for (int i = 0; i < n; ++i) dx[i] = val(rank, i);
            if (inplace) memcpy(dy, dx, (size_t)n * sizeof(double));
            MPI_Allreduce(inplace ? MPI_IN_PLACE : dx, dy, n, MPI_DOUBLE, MPI_SUM, comm);
            int bad = 0;
            for (int i = 0; i < n; ++i) {
                double want = 0;
                for (int r = 0; r < size; ++r) want += val(r, i);
                bad += dy[i] != want;
            }
            CHECK(!bad, "Allreduce double SUM n=%d in_place=%d: %d wrong", n, inplace, bad);
            mix(dy, (size_t)n * sizeof(double));
            for (int i = 0; i < n; ++i) lx[i] = (long long)val(rank, i) << 20;
            if (inplace) memcpy(ly, lx, (size_t)n * sizeof(long long));
            MPI_Allreduce(inplace ? MPI_IN_PLACE : lx, ly, n, MPI_LONG_LONG, MPI_MAX, comm);
            bad = 0;
            for (int i = 0; i < n; ++i) {
                long long want = (long long)val(0, i) << 20;
                for (int r = 1; r < size; ++r)
                    if (((long long)val(r, i) << 20) > want) want = (long long)val(r, i) << 20;
                bad += ly[i] != want;
            }
            CHECK(!bad, "Allreduce long long MAX n=%d: %d wrong", n, bad);
            mix(ly, (size_t)n * sizeof(long long));
            for (int root = 0; root < size; root += (n > 600 ? size : 1)) {
                for (int i = 0; i < n; ++i) dx[i] = val(rank, i);
                for (int i = 0; i < n; ++i) dy[i] = rank == root && inplace ? dx[i] : -1;
                const int ip = inplace && rank == root;
                MPI_Reduce(ip ? MPI_IN_PLACE : dx, dy, n, MPI_DOUBLE, MPI_MIN, root, comm);
                if (rank == root) {
                    bad = 0;
                    for (int i = 0; i < n; ++i) {
                        double want = val(0, i);
                        for (int r = 1; r < size; ++r) want = val(r, i) < want ? val(r, i) : want;
                        bad += dy[i] != want;
                    }
                    CHECK(!bad, "Reduce double MIN n=%d root=%d in_place=%d: %d wrong", n, root, inplace, bad);
                    mix(dy, (size_t)n * sizeof(double));
                }
            }
        }
        free(dx);
        free(dy);
        free(lx);
        free(ly);
    }
    /* Every predefined op on the types it is defined for (small vectors). */
    enum { N = 33 };
    unsigned char ub[N], ubr[N];
    bool bb[N], bbr[N];
    float fb[N], fbr[N];
    double complex cb[N], cbr[N];
    int ib[N];
    for (int i = 0; i < N; ++i) {
        ub[i] = (unsigned char)(val(rank, i) & 0xff);
        bb[i] = (val(rank, i) & 4) != 0;
        fb[i] = (float)(val(rank, i) % 3 + 2);
        cb[i] = val(rank, i) + 2.0 * I * (rank + 1);
        ib[i] = val(rank, i) % 5 + 1;
    }
    const MPI_Op bitwise[] = {MPI_BAND, MPI_BOR, MPI_BXOR};
    for (int k = 0; k < 3; ++k) {
        MPI_Allreduce(ub, ubr, N, MPI_UNSIGNED_CHAR, bitwise[k], comm);
        int bad = 0;
        for (int i = 0; i < N; ++i) {
            unsigned want = (unsigned)(val(0, i) & 0xff);
            for (int r = 1; r < size; ++r) {
                const unsigned v = (unsigned)(val(r, i) & 0xff);
                want = k == 0 ? (want & v) : k == 1 ? (want | v) : (want ^ v);
            }
            bad += ubr[i] != (unsigned char)want;
        }
        CHECK(!bad, "Allreduce unsigned char bitwise op %d: %d wrong", k, bad);
        mix(ubr, sizeof(ubr));
    }
    const MPI_Op logical[] = {MPI_LAND, MPI_LOR, MPI_LXOR};
    for (int k = 0; k < 3; ++k) {
        MPI_Allreduce(bb, bbr, N, MPI_C_BOOL, logical[k], comm);
        int bad = 0;
        for (int i = 0; i < N; ++i) {
            bool want = (val(0, i) & 4) != 0;
            for (int r = 1; r < size; ++r) {
                const bool v = (val(r, i) & 4) != 0;
                want = k == 0 ? (want && v) : k == 1 ? (want || v) : (want != v);
            }
            bad += bbr[i] != want;
        }
        CHECK(!bad, "Allreduce bool logical op %d: %d wrong", k, bad);
        mix(bbr, sizeof(bbr));
    }
    MPI_Allreduce(fb, fbr, N, MPI_FLOAT, MPI_PROD, comm);
    MPI_Allreduce(cb, cbr, N, MPI_C_DOUBLE_COMPLEX, MPI_SUM, comm);
    MPI_Allreduce(MPI_IN_PLACE, ib, N, MPI_INT, MPI_PROD, comm);
    int bad = 0;
    for (int i = 0; i < N; ++i) {
        float fw = 1;
        double complex cw = 0;
        int iw = 1;
        for (int r = 0; r < size; ++r) {
            fw *= (float)(val(r, i) % 3 + 2);
            cw += val(r, i) + 2.0 * I * (r + 1);
            iw *= val(r, i) % 5 + 1;
        }
        bad += fbr[i] != fw || cbr[i] != cw || ib[i] != iw;
    }
    CHECK(!bad, "Allreduce float PROD / complex SUM / int PROD in place: %d wrong", bad);
    mix(fbr, sizeof(fbr));
    mix(cbr, sizeof(cbr));
    mix(ib, sizeof(ib));
}

static void check_reduce_scatter_scan(MPI_Comm comm, int rank, int size)
{
    for (int s = 0; s < NSIZES - 1; ++s) {
        const int n = sizes[s];
        int *counts = xmalloc((size_t)size * sizeof(int));
        int total = 0;
        for (int r = 0; r < size; ++r) total += counts[r] = n + (r % 2) * 3 - (r == size - 1 ? n : 0);
        const int big = n * size > total ? n * size : total;
        int *in = xmalloc((size_t)big * sizeof(int)), *out = xmalloc((size_t)big * sizeof(int));
        for (int inplace = 0; inplace < 2; ++inplace) {
            for (int i = 0; i < n * size; ++i) in[i] = val(rank, i);
            MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : in, inplace ? in : out, n, MPI_INT, MPI_SUM, comm);
            const int *got = inplace ? in : out;
            int bad = 0;
            for (int i = 0; i < n; ++i) {
                int want = 0;
                for (int r = 0; r < size; ++r) want += val(r, rank * n + i);
                bad += got[i] != want;
            }
            CHECK(!bad, "Reduce_scatter_block n=%d in_place=%d: %d wrong", n, inplace, bad);
            mix(got, (size_t)n * sizeof(int));
            for (int i = 0; i < total; ++i) in[i] = val(rank, i);
            MPI_Reduce_scatter(inplace ? MPI_IN_PLACE : in, inplace ? in : out, counts, MPI_INT, MPI_SUM, comm);
            int off = 0;
            for (int r = 0; r < rank; ++r) off += counts[r];
            bad = 0;
            for (int i = 0; i < counts[rank]; ++i) {
                int want = 0;
                for (int r = 0; r < size; ++r) want += val(r, off + i);
                bad += got[i] != want;
            }
            CHECK(!bad, "Reduce_scatter n=%d in_place=%d: %d wrong", n, inplace, bad);
            mix(got, (size_t)counts[rank] * sizeof(int));
            for (int i = 0; i < n; ++i) in[i] = val(rank, i);
            MPI_Scan(inplace ? MPI_IN_PLACE : in, inplace ? in : out, n, MPI_INT, MPI_SUM, comm);
            bad = 0;
            for (int i = 0; i < n; ++i) {
                int want = 0;
                for (int r = 0; r <= rank; ++r) want += val(r, i);
                bad += got[i] != want;
            }
            CHECK(!bad, "Scan n=%d in_place=%d: %d wrong", n, inplace, bad);
            mix(got, (size_t)n * sizeof(int));
            for (int i = 0; i < n; ++i) in[i] = val(rank, i);
            MPI_Exscan(inplace ? MPI_IN_PLACE : in, inplace ? in : out, n, MPI_INT, MPI_MAX, comm);
            if (rank > 0) { /* rank 0's result is undefined */
                bad = 0;
                for (int i = 0; i < n; ++i) {
                    int want = val(0, i);
                    for (int r = 1; r < rank; ++r) want = val(r, i) > want ? val(r, i) : want;
                    bad += got[i] != want;
                }
                CHECK(!bad, "Exscan n=%d in_place=%d: %d wrong", n, inplace, bad);
                mix(got, (size_t)n * sizeof(int));
            }
        }
        free(counts);
        free(in);
        free(out);
    }
}

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    for (int i = 0; i < *len; ++i) ((int *)inout)[i] += ((int *)in)[i];
}

/* Calls the core does not serve: they must still be right. */
static void check_passed_through(MPI_Comm comm, int rank, int size)
{
    MPI_Op op;
    MPI_Op_create(user_sum, 1, &op);
    int x[5], y[5];
    for (int i = 0; i < 5; ++i) x[i] = val(rank, i);
    MPI_Allreduce(x, y, 5, MPI_INT, op, comm);
    int bad = 0;
    for (int i = 0; i < 5; ++i) {
        int want = 0;
        for (int r = 0; r < size; ++r) want += val(r, i);
        bad += y[i] != want;
    }
    CHECK(!bad, "Allreduce with a user-defined op: %d wrong", bad);
    mix(y, sizeof(y));
    MPI_Op_free(&op);
    struct { int v, r; } in = {val(rank, 3), rank}, out;
    MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, comm);
    int want = val(0, 3), at = 0;
    for (int r = 1; r < size; ++r)
        if (val(r, 3) < want) want = val(r, 3), at = r;
    CHECK(out.v == want && out.r == at, "MINLOC: got (%d, %d), want (%d, %d)", out.v, out.r, want, at);
    mix(&out, sizeof(out));
}

static void check_intercomm(MPI_Comm comm, int rank, int size)
{
    if (size < 2) return;
    MPI_Comm half, inter;
    const int color = rank < size / 2;
    MPI_Comm_split(comm, color, rank, &half);
    MPI_Intercomm_create(half, 0, comm, color ? size / 2 : 0, 7, &inter);
    int x = rank + 1, y = 0, want = 0;
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, inter); /* the other group's sum */
    for (int r = 0; r < size; ++r)
        if ((r < size / 2) != color) want += r + 1;
    CHECK(y == want, "Allreduce on an intercommunicator: got %d, want %d", y, want);
    mix(&y, sizeof(y));
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
}

#if MPI_VERSION >= 4
static void check_large_count(MPI_Comm comm, int rank, int size)
{
    enum { N = 1000 };
    double x[N], y[N];
    for (int i = 0; i < N; ++i) x[i] = val(rank, i);
    MPI_Allreduce_c(x, y, (MPI_Count)N, MPI_DOUBLE, MPI_SUM, comm);
    int bad = 0;
    for (int i = 0; i < N; ++i) {
        double want = 0;
        for (int r = 0; r < size; ++r) want += val(r, i);
        bad += y[i] != want;
    }
    CHECK(!bad, "Allreduce_c: %d wrong", bad);
    mix(y, sizeof(y));
    MPI_Count *counts = xmalloc((size_t)size * sizeof(MPI_Count));
    MPI_Aint *displs = xmalloc((size_t)size * sizeof(MPI_Aint));
    for (int r = 0; r < size; ++r) {
        counts[r] = 3 + r;
        displs[r] = (MPI_Aint)(size - 1 - r) * 8;
    }
    int mine[16], *all = xmalloc((size_t)size * 8 * sizeof(int));
    for (int i = 0; i < 3 + rank; ++i) mine[i] = val(rank, i);
    MPI_Allgatherv_c(mine, 3 + rank, MPI_INT, all, counts, displs, MPI_INT, comm);
    bad = 0;
    for (int r = 0; r < size; ++r)
        for (int i = 0; i < 3 + r; ++i) bad += all[displs[r] + i] != val(r, i);
    CHECK(!bad, "Allgatherv_c: %d wrong", bad);
    for (int r = 0; r < size; ++r) mix(all + displs[r], (size_t)(3 + r) * sizeof(int));
    free(all);
    free(counts);
    free(displs);
}
#endif

static void check_all(MPI_Comm comm)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Barrier(comm);
    check_bcast(comm, rank, size);
    check_gather_scatter(comm, rank, size);
    check_allgather_alltoall(comm, rank, size);
    check_vforms(comm, rank, size);
    check_reductions(comm, rank, size);
    check_reduce_scatter_scan(comm, rank, size);
    check_passed_through(comm, rank, size);
    check_intercomm(comm, rank, size);
#if MPI_VERSION >= 4
    check_large_count(comm, rank, size);
#endif
    MPI_Barrier(comm);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ck.rank = rank;
    check_all(MPI_COMM_WORLD);
    /* A communicator with the ranks in reverse order, freed and made again. */
    for (int round = 0; round < 2; ++round) {
        MPI_Comm rev;
        MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev);
        check_all(rev);
        MPI_Comm_free(&rev);
    }
    /* Every rank's digest, in rank order, from rank 0. */
    uint64_t *digests = xmalloc((size_t)size * sizeof(uint64_t));
    PMPI_Gather(&ck.digest, 1, MPI_UINT64_T, digests, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    int failures = 0, checks = 0;
    PMPI_Reduce(&ck.failures, &failures, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    PMPI_Reduce(&ck.checks, &checks, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("checks %d failures %d\n", checks, failures);
        for (int r = 0; r < size; ++r) printf("digest rank %d %016" PRIx64 "\n", r, digests[r]);
    }
    free(digests);
    MPI_Finalize();
    return failures ? 1 : 0;
}
