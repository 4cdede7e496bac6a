/* Reduction kernels for every element type and predefined op (the
 * half-precision types in reduce_half.c). */
#include "reduce_ops.h"

#include <complex.h>
#include <stdbool.h>
#include <string.h>

#include "pymcoll.h"

int pmc_dtype_size(int dtype)
{
    switch (dtype) {
    case PMC_DT_INT8: case PMC_DT_UINT8: case PMC_DT_BOOL: return 1;
    case PMC_DT_INT16: case PMC_DT_UINT16: case PMC_DT_FLOAT16: case PMC_DT_BFLOAT16: return 2;
    case PMC_DT_INT32: case PMC_DT_UINT32: case PMC_DT_FLOAT32: return 4;
    case PMC_DT_INT64: case PMC_DT_UINT64: case PMC_DT_FLOAT64: case PMC_DT_COMPLEX64: return 8;
    case PMC_DT_COMPLEX128: return 16;
    case PMC_DT_LONGDOUBLE: return (int)sizeof(long double);
    case PMC_DT_CLONGDOUBLE: return (int)sizeof(long double complex);
    default: return 0;
    }
}

int pmc_op_valid(int dtype, int op)
{
    if (pmc_dtype_size(dtype) == 0 || op < 0 || op >= PMC_OP_COUNT) return 0;
    const int is_int = dtype <= PMC_DT_UINT64;
    const int is_float = dtype >= PMC_DT_FLOAT16 && dtype <= PMC_DT_LONGDOUBLE;
    const int is_complex = dtype >= PMC_DT_COMPLEX64 && dtype <= PMC_DT_CLONGDOUBLE;
    switch (op) {
    case PMC_OP_SUM: case PMC_OP_PROD: return is_int || is_float || is_complex;
    case PMC_OP_MIN: case PMC_OP_MAX: return is_int || is_float;
    case PMC_OP_LAND: case PMC_OP_LOR: case PMC_OP_LXOR: return is_int || dtype == PMC_DT_BOOL;
    default: return is_int; /* bitwise */
    }
}

/* --- kernels --------------------------------------------------------- */

/* The kernels read lhs and rhs and write out: out either is lhs (the
 * accumulating form) or overlaps neither input. Inlined into both public
 * forms, so each vectorizes for its own aliasing. */
#define ARITH_LOOP(T, EXPR)                                \
    do {                                                   \
        T *o_ = (T *)out;                                  \
        const T *a_ = (const T *)lhs;                      \
        const T *b_ = (const T *)rhs;                      \
        for (uint64_t i = 0; i < n; ++i) {                 \
            T x = a_[i], y = b_[i];                        \
            o_[i] = (T)(EXPR);                             \
        }                                                  \
    } while (0)

/* Integers: arithmetic in 64-bit unsigned, truncated to the type, so that
 * overflow wraps as MPI libraries do instead of being undefined. */
#define INT_OPS(T, U)                                                                  \
    switch (op) {                                                                      \
    case PMC_OP_SUM: ARITH_LOOP(T, (U)((uint64_t)(U)x + (uint64_t)(U)y)); break;      \
    case PMC_OP_PROD: ARITH_LOOP(T, (U)((uint64_t)(U)x * (uint64_t)(U)y)); break;     \
    case PMC_OP_MIN: ARITH_LOOP(T, y < x ? y : x); break;                              \
    case PMC_OP_MAX: ARITH_LOOP(T, y > x ? y : x); break;                              \
    case PMC_OP_LAND: ARITH_LOOP(T, (x != 0) && (y != 0)); break;                      \
    case PMC_OP_LOR: ARITH_LOOP(T, (x != 0) || (y != 0)); break;                       \
    case PMC_OP_LXOR: ARITH_LOOP(T, (x != 0) != (y != 0)); break;                      \
    case PMC_OP_BAND: ARITH_LOOP(T, (U)x & (U)y); break;                               \
    case PMC_OP_BOR: ARITH_LOOP(T, (U)x | (U)y); break;                                \
    case PMC_OP_BXOR: ARITH_LOOP(T, (U)x ^ (U)y); break;                               \
    default: break;                                                                    \
    }

#define FLOAT_OPS(T)                                                                   \
    switch (op) {                                                                      \
    case PMC_OP_SUM: ARITH_LOOP(T, x + y); break;                                      \
    case PMC_OP_PROD: ARITH_LOOP(T, x * y); break;                                     \
    case PMC_OP_MIN: ARITH_LOOP(T, y < x ? y : x); break;                              \
    case PMC_OP_MAX: ARITH_LOOP(T, y > x ? y : x); break;                              \
    default: break;                                                                    \
    }

#define COMPLEX_OPS(T)                                                                 \
    switch (op) {                                                                      \
    case PMC_OP_SUM: ARITH_LOOP(T, x + y); break;                                      \
    case PMC_OP_PROD: ARITH_LOOP(T, x * y); break;                                     \
    default: break;                                                                    \
    }

static void bool_ops(unsigned char *out, const unsigned char *lhs, const unsigned char *rhs, uint64_t n, int op)
{
    for (uint64_t i = 0; i < n; ++i) {
        const bool x = lhs[i] != 0, y = rhs[i] != 0;
        out[i] = (unsigned char)(op == PMC_OP_LAND ? (x && y) : op == PMC_OP_LOR ? (x || y) : (x != y));
    }
}

#if defined(__GNUC__)
#define PMC_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define PMC_ALWAYS_INLINE inline
#endif

static PMC_ALWAYS_INLINE void combine(void *out, const void *lhs, const void *rhs, uint64_t n, int dtype, int op)
{
    switch (dtype) {
    case PMC_DT_INT8: INT_OPS(int8_t, uint8_t); break;
    case PMC_DT_INT16: INT_OPS(int16_t, uint16_t); break;
    case PMC_DT_INT32: INT_OPS(int32_t, uint32_t); break;
    case PMC_DT_INT64: INT_OPS(int64_t, uint64_t); break;
    case PMC_DT_UINT8: INT_OPS(uint8_t, uint8_t); break;
    case PMC_DT_UINT16: INT_OPS(uint16_t, uint16_t); break;
    case PMC_DT_UINT32: INT_OPS(uint32_t, uint32_t); break;
    case PMC_DT_UINT64: INT_OPS(uint64_t, uint64_t); break;
    case PMC_DT_FLOAT16: pmc_reduce_half(out, lhs, rhs, n, op, 0); break;
    case PMC_DT_BFLOAT16: pmc_reduce_half(out, lhs, rhs, n, op, 1); break;
    case PMC_DT_FLOAT32: FLOAT_OPS(float); break;
    case PMC_DT_FLOAT64: FLOAT_OPS(double); break;
    case PMC_DT_LONGDOUBLE: FLOAT_OPS(long double); break;
    case PMC_DT_COMPLEX64: COMPLEX_OPS(float complex); break;
    case PMC_DT_COMPLEX128: COMPLEX_OPS(double complex); break;
    case PMC_DT_CLONGDOUBLE: COMPLEX_OPS(long double complex); break;
    case PMC_DT_BOOL: bool_ops(out, lhs, rhs, n, op); break;
    default: break;
    }
}

/* The alignment the kernels' typed loads and stores assume for an element. */
static uintptr_t element_align(int dtype)
{
    switch (dtype) {
    case PMC_DT_COMPLEX64: return _Alignof(float);
    case PMC_DT_COMPLEX128: return _Alignof(double);
    case PMC_DT_LONGDOUBLE: return _Alignof(long double);
    case PMC_DT_CLONGDOUBLE: return _Alignof(long double complex);
    default: return pmc_dtype_size(dtype) > 0 ? (uintptr_t)pmc_dtype_size(dtype) : 1;
    }
}

/* A user may pass buffers that are not aligned for their elements (a numpy
 * view at an odd byte offset): those are combined through aligned stack
 * blocks, since the typed kernels may not touch them in place. */
static void combine_unaligned(void *out, const void *lhs, const void *rhs, uint64_t n, int dtype, int op)
{
    _Alignas(64) unsigned char a[2048], b[2048];
    const uint64_t es = (uint64_t)pmc_dtype_size(dtype), per = sizeof(a) / es;
    for (uint64_t i = 0; i < n; i += per) {
        const uint64_t m = n - i < per ? n - i : per;
        memcpy(a, (const unsigned char *)lhs + i * es, m * es);
        memcpy(b, (const unsigned char *)rhs + i * es, m * es);
        combine(a, a, b, m, dtype, op);
        memcpy((unsigned char *)out + i * es, a, m * es);
    }
}

void pmc_reduce_to(void *out, const void *lhs, const void *rhs, uint64_t n, int dtype, int op)
{
    const uintptr_t mask = element_align(dtype) - 1;
    if ((((uintptr_t)out | (uintptr_t)lhs | (uintptr_t)rhs) & mask) != 0 && n > 0)
        combine_unaligned(out, lhs, rhs, n, dtype, op);
    else
        combine(out, lhs, rhs, n, dtype, op);
}

void pmc_reduce_into(void *acc, const void *in, uint64_t n, int dtype, int op)
{
    pmc_reduce_to(acc, acc, in, n, dtype, op);
}

void pmc_reduce_strided(void *out, const void *first, uint64_t stride, int k, int own, const void *own_at, uint64_t n,
                        int dtype, int op)
{
#define INPUT(i) ((i) == own ? (const unsigned char *)own_at : (const unsigned char *)first + (uint64_t)(i) * stride)
    if (k < 2) {
        if (k == 1) memcpy(out, INPUT(0), n * (uint64_t)pmc_dtype_size(dtype));
        return;
    }
    pmc_reduce_to(out, INPUT(0), INPUT(1), n, dtype, op);
    for (int i = 2; i < k; ++i) pmc_reduce_into(out, INPUT(i), n, dtype, op);
#undef INPUT
}
