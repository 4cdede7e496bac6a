/* The copy rate of each way the core could move a large block, on this
 * machine: glibc's memcpy, the kernel's copy (process_vm_readv, what single
 * copy between ranks uses; here from the process itself) and a copy with
 * non-temporal (streaming) AVX2 stores, which skip reading the destination
 * into the cache before writing it, and the core's own pmc_bulk_copy (SSE2
 * streaming stores at its default threshold, PMC_DEFAULT_STREAM_MIN). Run two at once to see them
 * share the memory as two ranks do:
 *
 *   cc -O2 -Inative/src/node -Inative/include -o /tmp/copy_engines_probe perf/copy_engines_probe.c native/src/node/bulk_copy.c
 *   /tmp/copy_engines_probe 16 & /tmp/copy_engines_probe 16; wait
 *
 * Arguments: MiB per copy (default 16), repetitions (default 10, the best
 * is printed). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bulk_copy.h"
#include "pymcoll.h"

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* dst and src 32-byte aligned, n a multiple of 128. */
__attribute__((target("avx2"))) static void copy_streaming(void *dst, const void *src, size_t n)
{
    __m256i *out = dst;
    const __m256i *in = src;
    for (size_t i = 0; i < n / sizeof(__m256i); i += 4) {
        const __m256i a = _mm256_load_si256(in + i), b = _mm256_load_si256(in + i + 1);
        const __m256i c = _mm256_load_si256(in + i + 2), d = _mm256_load_si256(in + i + 3);
        _mm256_stream_si256(out + i, a);
        _mm256_stream_si256(out + i + 1, b);
        _mm256_stream_si256(out + i + 2, c);
        _mm256_stream_si256(out + i + 3, d);
    }
    _mm_sfence(); /* streaming stores are weakly ordered: make them visible before reporting */
}

static int copy_kernel(void *dst, const void *src, size_t n)
{
    struct iovec local = {dst, n}, remote = {(void *)src, n};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)n ? 0 : -1;
}

int main(int argc, char **argv)
{
    const size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 16) << 20;
    const int reps = argc > 2 ? atoi(argv[2]) : 10;
    if (n == 0 || n % 128 != 0 || reps < 1) {
        fprintf(stderr, "usage: %s [MiB per copy, >= 1] [repetitions, >= 1]\n", argv[0]);
        return 2;
    }
    if (!__builtin_cpu_supports("avx2")) {
        fprintf(stderr, "this CPU has no AVX2: the streaming copy cannot run\n");
        return 2;
    }
    unsigned char *src = aligned_alloc(4096, n), *dst = aligned_alloc(4096, n);
    if (src == NULL || dst == NULL) {
        fprintf(stderr, "out of memory for 2 x %zu MiB\n", n >> 20);
        return 1;
    }
    memset(src, 1, n);
    memset(dst, 2, n);
    static const char *const names[] = {"memcpy", "kernel (process_vm_readv)", "streaming stores (AVX2)",
                                        "pmc_bulk_copy (the core's)"};
    for (int way = 0; way < 4; ++way) {
        double best = 1e30;
        for (int r = 0; r < reps; ++r) {
            const double t0 = seconds();
            if (way == 0) memcpy(dst, src, n);
            else if (way == 1 && copy_kernel(dst, src, n) != 0) {
                perror("process_vm_readv");
                return 1;
            } else if (way == 2) copy_streaming(dst, src, n);
            else if (way == 3) pmc_bulk_copy(dst, src, n, PMC_DEFAULT_STREAM_MIN);
            const double t = seconds() - t0;
            if (t < best) best = t;
        }
        if (memcmp(dst, src, n) != 0) {
            fprintf(stderr, "%s: the copy differs from its source\n", names[way]);
            return 1;
        }
        memset(dst, 2, n);
        printf("pid %d  %4zu MiB  %-27s %6.2f GB/s copied (best of %d)\n", (int)getpid(), n >> 20, names[way],
               (double)n / best / 1e9, reps);
    }
    free(src);
    free(dst);
    return 0;
}
