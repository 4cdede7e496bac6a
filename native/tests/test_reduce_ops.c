/* Reduction kernels: the one-pass forms (pmc_reduce_to, pmc_reduce_strided)
 * give exactly what a copy of the first input and pmc_reduce_into of each
 * further one give, for every element type and valid op, at lengths that
 * leave every vector tail, with misaligned buffers; nothing outside the
 * result is written. One independent check pins pmc_reduce_into itself. */
#include <complex.h>

#include "pymcoll.h"
#include "reduce/reduce_ops.h"
#include "testutil.h"

enum { MAX_N = 1031, MAX_K = 5, GUARD = 64 };

/* Element i of a test input: a small integer, so every op stays exact and
 * no NaN appears (whose payload two correct kernels may set differently). */
static void put(unsigned char *buf, int dtype, uint64_t i, int v)
{
    const int size = pmc_dtype_size(dtype);
    unsigned char *at = buf + i * (uint64_t)size;
    switch (dtype) {
    case PMC_DT_INT8: case PMC_DT_UINT8: { int8_t x = (int8_t)v; memcpy(at, &x, 1); break; }
    case PMC_DT_INT16: case PMC_DT_UINT16: { int16_t x = (int16_t)v; memcpy(at, &x, 2); break; }
    case PMC_DT_INT32: case PMC_DT_UINT32: { int32_t x = v; memcpy(at, &x, 4); break; }
    case PMC_DT_INT64: case PMC_DT_UINT64: { int64_t x = v; memcpy(at, &x, 8); break; }
    case PMC_DT_FLOAT16: { /* small integers: sign, exponent and mantissa by hand */
        uint16_t h = 0;
        if (v != 0) {
            const unsigned a = (unsigned)(v < 0 ? -v : v);
            int e = 0;
            while ((a >> (e + 1)) != 0) ++e;
            h = (uint16_t)((v < 0 ? 0x8000u : 0u) | (unsigned)((e + 15) << 10) | ((a << (10 - e)) & 0x3ffu));
        }
        memcpy(at, &h, 2);
        break;
    }
    case PMC_DT_BFLOAT16: { float f = (float)v; uint32_t b; memcpy(&b, &f, 4); uint16_t h = (uint16_t)(b >> 16); memcpy(at, &h, 2); break; }
    case PMC_DT_FLOAT32: { float x = (float)v; memcpy(at, &x, 4); break; }
    case PMC_DT_FLOAT64: { double x = v; memcpy(at, &x, 8); break; }
    case PMC_DT_LONGDOUBLE: { long double x = v; memset(at, 0, (size_t)size); memcpy(at, &x, sizeof(x)); break; }
    case PMC_DT_COMPLEX64: { float complex x = (float)v + (float)(v % 2) * I; memcpy(at, &x, sizeof(x)); break; }
    case PMC_DT_COMPLEX128: { double complex x = v + (v % 2) * I; memcpy(at, &x, sizeof(x)); break; }
    case PMC_DT_CLONGDOUBLE: {
        long double complex x = (long double)v + (long double)(v % 2) * I;
        memset(at, 0, (size_t)size);
        memcpy(at, &x, sizeof(x));
        break;
    }
    case PMC_DT_BOOL: { unsigned char x = (unsigned char)(v & 1); memcpy(at, &x, 1); break; }
    default: break;
    }
}

/* Element i of two results equal: by value for the long double types
 * (whose padding bytes the kernels need not write alike), else bytewise. */
static int same(const unsigned char *x, const unsigned char *y, int dtype, uint64_t i)
{
    const uint64_t size = (uint64_t)pmc_dtype_size(dtype);
    if (dtype == PMC_DT_LONGDOUBLE) {
        long double a, b;
        memcpy(&a, x + i * size, sizeof(a));
        memcpy(&b, y + i * size, sizeof(b));
        return a == b;
    }
    if (dtype == PMC_DT_CLONGDOUBLE) {
        long double complex a, b;
        memcpy(&a, x + i * size, sizeof(a));
        memcpy(&b, y + i * size, sizeof(b));
        return a == b;
    }
    return memcmp(x + i * size, y + i * size, size) == 0;
}

/* Frees four buffers, any of which may be NULL. */
static void free_four(void *a, void *b, void *c, void *d)
{
    free(a);
    free(b);
    free(c);
    free(d);
}

/* k inputs of n elements (input j at j * stride), shifted by `shift`
 * elements from an allocation's start and the result by the other of 0 and
 * 1 (each vector loop then meets other alignments); the one-pass result
 * against copy + reduce_into. */
static void check(int dtype, int op, uint64_t n, int k, unsigned shift)
{
    const uint64_t size = (uint64_t)pmc_dtype_size(dtype), bytes = n * size;
    const uint64_t stride = bytes + 3 * size; /* inputs apart, not packed */
    unsigned char *in = malloc((size_t)(stride * MAX_K + size)), *want = malloc((size_t)(bytes + size)),
                  *got = malloc((size_t)(bytes + 2 * GUARD + size));
    if (in == NULL || want == NULL || got == NULL) {
        CHECK(0, "out of memory");
        free(in);
        free(want);
        free(got);
        return;
    }
    unsigned char *first = in + shift * size;
    for (int j = 0; j < k; ++j)
        for (uint64_t i = 0; i < n; ++i) {
            int v = (int)((i * 7 + (uint64_t)j * 13 + (uint64_t)op) % 7) - 3;
            if (dtype >= PMC_DT_UINT8 && dtype <= PMC_DT_UINT64) v += 3;
            if (op == PMC_OP_PROD && v == 0) v = 1; /* products stay small and nonzero */
            if (op == PMC_OP_PROD) v = v < 0 ? -1 : (v > 1 ? 2 : 1);
            put(first + (uint64_t)j * stride, dtype, i, v);
        }
    memcpy(want, first, (size_t)bytes);
    for (int j = 1; j < k; ++j) pmc_reduce_into(want, first + (uint64_t)j * stride, n, dtype, op);

    unsigned char *out = got + GUARD + (shift ? 0 : size);
    for (int form = 0; form < 2; ++form) {
        if (form == 0 && k != 2) continue;
        memset(got, 0xA5, (size_t)(bytes + 2 * GUARD + size));
        if (form == 0) pmc_reduce_to(out, first, first + stride, n, dtype, op);
        else pmc_reduce_strided(out, first, stride, k, -1, NULL, n, dtype, op);
        uint64_t bad = n;
        for (uint64_t i = 0; i < n && bad == n; ++i)
            if (!same(out, want, dtype, i)) bad = i;
        CHECK(bad == n, "%s dtype %d op %d n=%llu k=%d shift %u: element %llu differs",
              form == 0 ? "pmc_reduce_to" : "pmc_reduce_strided", dtype, op, (unsigned long long)n, k, shift,
              (unsigned long long)bad);
        CHECK(t_verify_const(got, (uint64_t)(out - got), 0xA5) < 0, "dtype %d op %d n=%llu: a byte before the "
              "result changed", dtype, op, (unsigned long long)n);
        CHECK(t_verify_const(out + bytes, GUARD, 0xA5) < 0, "dtype %d op %d n=%llu: a byte after the result changed",
              dtype, op, (unsigned long long)n);
    }
    free(in);
    free(want);
    free(got);
}

/* pmc_reduce_into itself, against sums written out by hand. */
static void check_known_values(void)
{
    int32_t a[5] = {1, -2, 3, 2147483647, 0}, b[5] = {10, 20, -30, 1, 0};
    const int32_t sum[5] = {11, 18, -27, (int32_t)INT32_MIN, 0};
    pmc_reduce_into(a, b, 5, PMC_DT_INT32, PMC_OP_SUM);
    CHECK(memcmp(a, sum, sizeof(a)) == 0, "int32 sum: %d %d %d %d %d", a[0], a[1], a[2], a[3], a[4]);
    double x[3] = {1.5, -2.0, 4.0}, y[3] = {2.0, 3.0, -1.0}, out[3];
    pmc_reduce_to(out, x, y, 3, PMC_DT_FLOAT64, PMC_OP_MAX);
    CHECK(out[0] == 2.0 && out[1] == 3.0 && out[2] == 4.0, "float64 max: %g %g %g", out[0], out[1], out[2]);
    pmc_reduce_to(out, x, y, 3, PMC_DT_FLOAT64, PMC_OP_PROD);
    CHECK(out[0] == 3.0 && out[1] == -6.0 && out[2] == -4.0, "float64 prod: %g %g %g", out[0], out[1], out[2]);
}

/* Partners of every binary16 / bfloat16 value in check_half_paths: zeros,
 * infinities, NaNs with and without payload, the smallest and largest
 * subnormals and normals, values whose sums and products round to even or
 * overflow, and a spread of ordinary ones. */
static const uint16_t half_partners[] = {
    0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7d01, 0x7c01, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x8400,
    0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x3c01, 0x1000, 0x1001, 0x5bff, 0x6400, 0x0200, 0x3555, 0xb555, 0x4248, 0xc248,
    0x2e66, 0x57d0, 0x0f0f, 0x8f0f, 0x7800, 0xf800, 0x3bff, 0x4000, 0x0002, 0xa3d7,
};
static const uint16_t bf16_partners[] = {
    0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7fa1, 0x7f81, 0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f,
    0x3f80, 0xbf80, 0x3f81, 0x4000, 0x3b80, 0x4b80, 0x3eab, 0xbeab, 0x4049, 0xc049, 0x1f0f, 0x5f0f, 0x7f00, 0xff00,
    0x3f7f, 0x0100, 0x2f12,
};

/* pmc_reduce_half (eight elements at a time where the CPU allows) gives the
 * portable loop's bits for every value of the type against every partner,
 * each op, in both the separate and the accumulating form, at every tail
 * length; plus known values that pin the portable loop itself. */
static void check_half_paths(void)
{
    enum { N = 65536 };
    uint16_t *lhs = malloc(N * sizeof(uint16_t)), *rhs = malloc(N * sizeof(uint16_t)),
             *want = malloc(N * sizeof(uint16_t)), *got = malloc((N + 1) * sizeof(uint16_t));
    if (lhs == NULL || rhs == NULL || want == NULL || got == NULL) {
        CHECK(0, "out of memory");
        free_four(lhs, rhs, want, got);
        return;
    }
    if (!pmc_reduce_half_vector_available())
        printf("test_reduce_ops: no AVX2 and F16C here, the vector half-precision paths are not compared\n");
    const int ops[] = {PMC_OP_SUM, PMC_OP_PROD, PMC_OP_MIN, PMC_OP_MAX};
    for (int brain = 0; brain < 2; ++brain) {
        const uint16_t *partners = brain ? bf16_partners : half_partners;
        const int np = brain ? (int)(sizeof(bf16_partners) / sizeof(bf16_partners[0]))
                             : (int)(sizeof(half_partners) / sizeof(half_partners[0]));
        for (uint32_t i = 0; i < N; ++i) lhs[i] = (uint16_t)i;
        for (int o = 0; o < 4; ++o)
            for (int j = 0; j < np; ++j) {
                for (uint32_t i = 0; i < N; ++i) rhs[i] = partners[(i + (uint32_t)j) % (uint32_t)np];
                pmc_reduce_half_portable(want, lhs, rhs, N, ops[o], brain);
                /* separate output, shifted by one element so the vector loads meet another alignment */
                pmc_reduce_half(got + 1, lhs, rhs, N, ops[o], brain);
                uint32_t bad = N;
                for (uint32_t i = 0; i < N && bad == N; ++i)
                    if (got[i + 1] != want[i]) bad = i;
                CHECK(bad == N, "%s op %d: 0x%04x op 0x%04x gave 0x%04x, the portable loop 0x%04x",
                      brain ? "bfloat16" : "binary16", ops[o], bad < N ? lhs[bad] : 0, bad < N ? rhs[bad] : 0,
                      bad < N ? got[bad + 1] : 0, bad < N ? want[bad] : 0);
                /* accumulating form, on a length that leaves a tail */
                memcpy(got, lhs, N * sizeof(uint16_t));
                const uint64_t n = N - 5 - (uint64_t)j % 3;
                pmc_reduce_half(got, got, rhs, n, ops[o], brain);
                bad = N;
                for (uint32_t i = 0; i < n && bad == N; ++i)
                    if (got[i] != want[i]) bad = i;
                CHECK(bad == N, "%s op %d in place: element %u differs", brain ? "bfloat16" : "binary16", ops[o], bad);
                CHECK(got[n] == lhs[n], "%s op %d in place: the element after the %llu written changed",
                      brain ? "bfloat16" : "binary16", ops[o], (unsigned long long)n);
            }
    }
    /* binary16: 1 + 2^-11 ties to 1 (even); 1 + 3 * 2^-11 ties to 1 + 2^-9; 65504 + 16 rounds to
     * infinity; 65504 + 8 back to 65504; the smallest subnormal plus itself; 2^-14 x 2^-10 -> 2^-24;
     * max(NaN, 1) keeps the first operand's NaN, as the comparison does */
    const uint16_t a16[] = {0x3c00, 0x3c01, 0x7bff, 0x7bff, 0x0001, 0x0400, 0x7e00};
    const uint16_t b16[] = {0x1000, 0x1000, 0x4c00, 0x4800, 0x0001, 0x1400, 0x3c00};
    const int o16[] = {PMC_OP_SUM, PMC_OP_SUM, PMC_OP_SUM, PMC_OP_SUM, PMC_OP_SUM, PMC_OP_PROD, PMC_OP_MAX};
    const uint16_t r16[] = {0x3c00, 0x3c02, 0x7c00, 0x7bff, 0x0002, 0x0001, 0x7e00};
    for (int i = 0; i < 7; ++i) {
        uint16_t r;
        pmc_reduce_half_portable(&r, &a16[i], &b16[i], 1, o16[i], 0);
        CHECK(r == r16[i], "binary16 0x%04x op %d 0x%04x: 0x%04x, want 0x%04x", a16[i], o16[i], b16[i], r, r16[i]);
    }
    /* bfloat16: 1 + 2^-8 ties to 1 (even); (1 + 2^-7) + 2^-8 ties up to 1 + 2^-6; a NaN keeps its payload, quieted */
    const uint16_t a2[] = {0x3f80, 0x3f81, 0x7f81}, b2[] = {0x3b80, 0x3b80, 0x3f80}, r2[] = {0x3f80, 0x3f82, 0x7fc1};
    for (int i = 0; i < 3; ++i) {
        uint16_t r;
        pmc_reduce_half_portable(&r, &a2[i], &b2[i], 1, PMC_OP_SUM, 1);
        CHECK(r == r2[i], "bfloat16 0x%04x + 0x%04x: 0x%04x, want 0x%04x", a2[i], b2[i], r, r2[i]);
    }
    free_four(lhs, rhs, want, got);
}

/* Buffers off their elements' alignment (byte offsets 1 and 3, as a numpy
 * view at an odd offset gives): the same results as aligned copies, in place
 * too, past the 2 KiB blocks such buffers are combined in; nothing around
 * the result written. */
static void check_unaligned(int dtype, int op, uint64_t n)
{
    const uint64_t size = (uint64_t)pmc_dtype_size(dtype), bytes = n * size;
    unsigned char *lhs = malloc((size_t)bytes + 8), *rhs = malloc((size_t)bytes + 8),
                  *want = malloc((size_t)bytes + 8), *got = malloc((size_t)bytes + 2 * GUARD);
    if (lhs == NULL || rhs == NULL || want == NULL || got == NULL) {
        CHECK(0, "out of memory");
        free_four(lhs, rhs, want, got);
        return;
    }
    for (uint64_t i = 0; i < n; ++i) {
        put(lhs, dtype, i, op == PMC_OP_PROD ? (int)(i % 3) - 1 + (i % 3 == 1) : (int)(i % 7) - 3);
        put(rhs, dtype, i, op == PMC_OP_PROD ? 2 - (int)(i % 2) : (int)((i * 5) % 7) - 3);
    }
    pmc_reduce_to(want, lhs, rhs, n, dtype, op); /* all three from malloc: aligned */
    unsigned char *a = lhs + 1, *b = rhs + 3, *out = got + GUARD + 1;
    memmove(a, lhs, (size_t)bytes);
    memmove(b, rhs, (size_t)bytes);
    memset(got, 0xA5, (size_t)bytes + 2 * GUARD);
    pmc_reduce_to(out, a, b, n, dtype, op);
    uint64_t bad = n;
    for (uint64_t i = 0; i < n && bad == n; ++i)
        if (!same(out, want, dtype, i)) bad = i;
    CHECK(bad == n, "unaligned pmc_reduce_to dtype %d op %d n=%llu: element %llu differs", dtype, op,
          (unsigned long long)n, (unsigned long long)bad);
    CHECK(t_verify_const(got, GUARD + 1, 0xA5) < 0 && t_verify_const(out + bytes, GUARD - 1, 0xA5) < 0,
          "unaligned pmc_reduce_to dtype %d op %d n=%llu: a byte around the result changed", dtype, op,
          (unsigned long long)n);
    pmc_reduce_into(a, b, n, dtype, op);
    bad = n;
    for (uint64_t i = 0; i < n && bad == n; ++i)
        if (!same(a, want, dtype, i)) bad = i;
    CHECK(bad == n, "unaligned pmc_reduce_into dtype %d op %d n=%llu: element %llu differs", dtype, op,
          (unsigned long long)n, (unsigned long long)bad);
    free_four(lhs, rhs, want, got);
}

int main(void)
{
    check_known_values();
    check_half_paths();
    for (int dtype = 0; dtype < PMC_DT_COUNT; ++dtype)
        for (int op = 0; op < PMC_OP_COUNT; ++op)
            if (pmc_op_valid(dtype, op)) {
                check_unaligned(dtype, op, 1);
                check_unaligned(dtype, op, 37);
                check_unaligned(dtype, op, 2048 / (uint64_t)pmc_dtype_size(dtype) * 2 + 3);
            }
    const uint64_t lengths[] = {0, 1, 3, 15, 16, 17, 64, 255, MAX_N};
    const int quick = getenv("PMC_TEST_QUICK") != NULL;
    for (int dtype = 0; dtype < PMC_DT_COUNT; ++dtype)
        for (int op = 0; op < PMC_OP_COUNT; ++op) {
            if (!pmc_op_valid(dtype, op)) continue;
            for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); ++l)
                for (int k = 1; k <= MAX_K; ++k) {
                    if (quick && k != 2 && k != 4) continue;
                    check(dtype, op, lengths[l], k, 0);
                    if (!quick) check(dtype, op, lengths[l], k, 1);
                }
        }
    if (t_failures) fprintf(stderr, "test_reduce_ops: %d check(s) failed\n", t_failures);
    else printf("test_reduce_ops: all checks passed\n");
    return t_failures != 0;
}
