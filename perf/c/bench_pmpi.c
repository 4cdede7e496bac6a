/* C-level comparison of the preload library with the MPI it sits on.
 *
 * Run under LD_PRELOAD of libpymcoll_pmpi.so: MPI_X runs in pymcoll's core,
 * PMPI_X in the MPI library, in the same process launch. For every
 * collective and size the two alternate in blocks (warm-up, then A B A B
 * ...); a block's time per call is the slowest rank's. Before every call the
 * send buffer gets a new value (one byte per 4 KiB page). The result of one
 * call per implementation and size is checked in full (`wrong` counts
 * wrong elements). Without the preload both sides are the MPI library: the
 * ratios then show the measurement's own noise.
 *
 * One JSON object per line on stdout:
 *   {"coll": "allreduce", "bytes": 8, "count": 2, "impl": "pymcoll"|"mpi",
 *    "median_us": ..., "min_us": ..., "max_us": ..., "avg_us": ..., "iters": ..., "blocks": ..., "wrong": 0}
 * Usage: bench_pmpi [colls (comma list, or all)] [min_bytes] [max_bytes] [blocks] [block_ms]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*coll_fn)(void *ctx, int pmpi);

typedef struct bench {
    int rank, size;
    size_t bytes;   /* per rank (the nccl-tests "size" is computed by the driver) */
    int count;      /* float elements per rank */
    float *send, *recv;
    int stamp;
} bench;

enum { NCOLLS = 10 };
static const char *const names[NCOLLS] = {"barrier", "bcast", "allreduce", "reduce", "allgather", "alltoall",
                                          "gather", "scatter", "reduce_scatter_block", "scan"};

/* One call of collective k on b's buffers: through MPI_X (pmpi = 0) or PMPI_X. */
static int call(int k, bench *b, int pmpi)
{
    MPI_Comm w = MPI_COMM_WORLD;
    const int n = b->count;
    switch (k) {
    case 0: return pmpi ? PMPI_Barrier(w) : MPI_Barrier(w);
    case 1: return pmpi ? PMPI_Bcast(b->send, n, MPI_FLOAT, 0, w) : MPI_Bcast(b->send, n, MPI_FLOAT, 0, w);
    case 2:
        return pmpi ? PMPI_Allreduce(b->send, b->recv, n, MPI_FLOAT, MPI_SUM, w)
                    : MPI_Allreduce(b->send, b->recv, n, MPI_FLOAT, MPI_SUM, w);
    case 3:
        return pmpi ? PMPI_Reduce(b->send, b->recv, n, MPI_FLOAT, MPI_SUM, 0, w)
                    : MPI_Reduce(b->send, b->recv, n, MPI_FLOAT, MPI_SUM, 0, w);
    case 4:
        return pmpi ? PMPI_Allgather(b->send, n, MPI_FLOAT, b->recv, n, MPI_FLOAT, w)
                    : MPI_Allgather(b->send, n, MPI_FLOAT, b->recv, n, MPI_FLOAT, w);
    case 5: {
        const int per = n / b->size;
        return pmpi ? PMPI_Alltoall(b->send, per, MPI_FLOAT, b->recv, per, MPI_FLOAT, w)
                    : MPI_Alltoall(b->send, per, MPI_FLOAT, b->recv, per, MPI_FLOAT, w);
    }
    case 6:
        return pmpi ? PMPI_Gather(b->send, n, MPI_FLOAT, b->recv, n, MPI_FLOAT, 0, w)
                    : MPI_Gather(b->send, n, MPI_FLOAT, b->recv, n, MPI_FLOAT, 0, w);
    case 7:
        return pmpi ? PMPI_Scatter(b->send, n, MPI_FLOAT, b->recv, n, MPI_FLOAT, 0, w)
                    : MPI_Scatter(b->send, n, MPI_FLOAT, b->recv, n, MPI_FLOAT, 0, w);
    case 8: {
        const int per = n / b->size;
        return pmpi ? PMPI_Reduce_scatter_block(b->send, b->recv, per, MPI_FLOAT, MPI_SUM, w)
                    : MPI_Reduce_scatter_block(b->send, b->recv, per, MPI_FLOAT, MPI_SUM, w);
    }
    default:
        return pmpi ? PMPI_Scan(b->send, b->recv, n, MPI_FLOAT, MPI_SUM, w)
                    : MPI_Scan(b->send, b->recv, n, MPI_FLOAT, MPI_SUM, w);
    }
}

/* Elements of the send buffer collective k reads (Scatter: the root's n x size). */
static size_t send_elems(int k, const bench *b) { return k == 7 ? (size_t)b->count * b->size : (size_t)b->count; }

/* The value of element i that rank r sends, in round `stamp`: small integers, so float sums are exact. */
static float value(int r, size_t i, int stamp) { return (float)((r * 7 + (int)(i % 61) + stamp) % 97); }

static void fill(int k, bench *b)
{
    const size_t n = send_elems(k, b);
    for (size_t i = 0; i < n; ++i) b->send[i] = value(b->rank, i, b->stamp);
}

/* One new value per page before every timed call. */
static void stamp(int k, bench *b)
{
    ++b->stamp;
    const size_t n = send_elems(k, b), step = 4096 / sizeof(float);
    for (size_t i = 0; i < n; i += step) b->send[i] = value(b->rank, i, b->stamp);
}

/* Wrong elements of the result of one call made after fill(). */
static long verify(int k, const bench *b)
{
    const int n = b->count, p = b->size, me = b->rank, s = b->stamp;
    long wrong = 0;
    switch (k) {
    case 1:
        for (int i = 0; i < n; ++i) wrong += b->send[i] != value(0, (size_t)i, s);
        break;
    case 2: case 3: case 9:
        if (k == 3 && me != 0) break;
        for (int i = 0; i < n; ++i) {
            float want = 0;
            for (int r = 0; r < (k == 9 ? me + 1 : p); ++r) want += value(r, (size_t)i, s);
            wrong += b->recv[i] != want;
        }
        break;
    case 4: case 6:
        if (k == 6 && me != 0) break;
        for (int r = 0; r < p; ++r)
            for (int i = 0; i < n; ++i) wrong += b->recv[(size_t)r * n + i] != value(r, (size_t)i, s);
        break;
    case 5: {
        const int per = n / p;
        for (int r = 0; r < p; ++r)
            for (int i = 0; i < per; ++i) wrong += b->recv[(size_t)r * per + i] != value(r, (size_t)me * per + i, s);
        break;
    }
    case 7:
        for (int i = 0; i < n; ++i) wrong += b->recv[i] != value(0, (size_t)me * n + i, s);
        break;
    case 8: {
        const int per = n / p;
        for (int i = 0; i < per; ++i) {
            float want = 0;
            for (int r = 0; r < p; ++r) want += value(r, (size_t)me * per + i, s);
            wrong += b->recv[i] != want;
        }
        break;
    }
    default: break;
    }
    return wrong;
}

/* Seconds per call of `iters` calls, the slowest rank's. */
static double block(int k, bench *b, int pmpi, int iters)
{
    PMPI_Barrier(MPI_COMM_WORLD);
    double total = 0;
    for (int it = 0; it < iters; ++it) {
        if (k != 0) stamp(k, b);
        const double t0 = MPI_Wtime();
        call(k, b, pmpi);
        total += MPI_Wtime() - t0;
    }
    double mine = total / iters, slowest = 0;
    PMPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void measure(int k, bench *b, int blocks, double block_s)
{
    long wrong[2] = {0, 0};
    for (int pmpi = 0; pmpi < 2; ++pmpi) {
        fill(k, b);
        call(k, b, pmpi);
        long w = verify(k, b), all = 0;
        PMPI_Allreduce(&w, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        wrong[pmpi] = all;
    }
    /* Iterations per block from a short probe of the MPI side, agreed by rank 0. */
    double probe = block(k, b, 1, 5);
    int iters = probe > 0 ? (int)(block_s / probe) : 1000;
    iters = iters < 3 ? 3 : iters > 5000 ? 5000 : iters;
    PMPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int pmpi = 0; pmpi < 2; ++pmpi) block(k, b, pmpi, iters / 5 + 1); /* warm-up */
    double *t[2];
    t[0] = malloc(sizeof(double) * (size_t)blocks);
    t[1] = malloc(sizeof(double) * (size_t)blocks);
    for (int i = 0; i < blocks; ++i)
        for (int pmpi = 0; pmpi < 2; ++pmpi) t[pmpi][i] = block(k, b, pmpi, iters);
    for (int pmpi = 0; pmpi < 2; ++pmpi) {
        double sum = 0;
        for (int i = 0; i < blocks; ++i) sum += t[pmpi][i];
        qsort(t[pmpi], (size_t)blocks, sizeof(double), cmp_double);
        const double med = blocks % 2 ? t[pmpi][blocks / 2] : 0.5 * (t[pmpi][blocks / 2 - 1] + t[pmpi][blocks / 2]);
        if (b->rank == 0)
            printf("{\"coll\": \"%s\", \"bytes\": %zu, \"count\": %d, \"impl\": \"%s\", \"median_us\": %.4f, "
                   "\"min_us\": %.4f, \"max_us\": %.4f, \"avg_us\": %.4f, \"iters\": %d, \"blocks\": %d, "
                   "\"wrong\": %ld}\n",
                   names[k], b->bytes, b->count, pmpi ? "mpi" : "pymcoll", med * 1e6, t[pmpi][0] * 1e6,
                   t[pmpi][blocks - 1] * 1e6, sum / blocks * 1e6, iters, blocks, wrong[pmpi]);
        free(t[pmpi]);
    }
    if (b->rank == 0) fflush(stdout);
}

static int wanted(const char *list, const char *name)
{
    if (strcmp(list, "all") == 0) return 1;
    const size_t len = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += len)
        if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == '\0')) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    bench b = {0};
    MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b.size);
    const char *colls = argc > 1 ? argv[1] : "all";
    const size_t min_bytes = argc > 2 ? strtoul(argv[2], NULL, 10) : 8;
    const size_t max_bytes = argc > 3 ? strtoul(argv[3], NULL, 10) : (size_t)1 << 20;
    const int blocks = argc > 4 ? atoi(argv[4]) : 10;
    const double block_s = (argc > 5 ? atof(argv[5]) : 20.0) / 1e3;
    const size_t cap = max_bytes / sizeof(float) * (size_t)b.size + 64;
    b.send = calloc(cap, sizeof(float));
    b.recv = calloc(cap, sizeof(float));
    if (b.send == NULL || b.recv == NULL || blocks < 1) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int k = 0; k < NCOLLS; ++k) {
        if (!wanted(colls, names[k])) continue;
        for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
            if (k == 0 && bytes != min_bytes) break; /* Barrier has no size */
            b.bytes = bytes;
            b.count = (int)(bytes / sizeof(float));
            /* Alltoall and Reduce_scatter_block split the message over the ranks. */
            if ((k == 5 || k == 8) && b.count % b.size) b.count += b.size - b.count % b.size;
            if (b.count == 0 && k != 0) continue;
            if (b.rank == 0) {
                fprintf(stderr, "bench_pmpi: %s %zu B\n", names[k], bytes);
                fflush(stderr);
            }
            measure(k, &b, blocks, block_s);
        }
    }
    free(b.send);
    free(b.recv);
    MPI_Finalize();
    return 0;
}
