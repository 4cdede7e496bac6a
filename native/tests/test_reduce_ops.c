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

int main(void)
{
    check_known_values();
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
