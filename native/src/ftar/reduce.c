/* FTAR's reduction kernels and the 16-bit conversions.
 *
 * The loops are plain element-wise loops over restrict pointers with
 * branch-free bodies, so that the compiler vectorises them. Integer sums run
 * in the unsigned type of the same width: they wrap, with no undefined
 * behaviour. Float MAX and MIN propagate a NaN from either side, so that an
 * overflow on any replica stays visible in the result. The 16-bit
 * conversions are written on the bits (no _Float16) and assume the default
 * floating-point environment (round to nearest even, no flush to zero). */
#include <string.h>

#include "ring.h"

size_t pmc_ftar_dtype_size(int dtype)
{
    switch (dtype) {
    case PMC_FTAR_FLOAT32: return 4;
    case PMC_FTAR_FLOAT64: return 8;
    case PMC_FTAR_BFLOAT16: return 2;
    case PMC_FTAR_FLOAT16: return 2;
    case PMC_FTAR_INT32: return 4;
    case PMC_FTAR_INT64: return 8;
    default: return 0;
    }
}

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* ---- 16-bit conversions ------------------------------------------------ */

static inline float bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f)
{
    const uint32_t u = f2u(f);
    /* Round to nearest even on the 16 bits dropped; the carry may run into
     * the exponent, which makes the largest finite values round to inf. */
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    /* A NaN keeps its sign and top payload, with the quiet bit set so that
     * the truncated payload can never read as infinity. */
    const uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* All ones where cond holds: selections by mask keep the conversion loops
 * free of branches, which the vectoriser needs. */
static inline uint32_t mask_if(int cond) { return 0u - (uint32_t)cond; }

static inline uint32_t pick(uint32_t m, uint32_t yes, uint32_t no) { return (yes & m) | (no & ~m); }

static inline float f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t mag = h & 0x7fffu;
    /* Normal numbers: the exponent moves from bias 15 to bias 127; inf and
     * NaN move twice as far, so that all-ones stays all-ones. */
    const uint32_t bits = (mag << 13) + 0x38000000u + (mask_if(mag >= 0x7c00u) & 0x38000000u);
    /* Subnormals and zero: mantissa * 2^-24, computed exactly as
     * 2^-14 * (1 + m/1024) - 2^-14. */
    const uint32_t sub = f2u(u2f(bits + 0x00800000u) - u2f(0x38800000u));
    return u2f(pick(mask_if(mag < 0x0400u), sub, bits) | sign);
}

static inline uint16_t f32_to_f16(float f)
{
    const uint32_t u = f2u(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    /* Normal results: rebias the exponent and round the 13 dropped bits to
     * nearest even (a carry moves into the exponent correctly). */
    const uint32_t normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
    /* Subnormal results (|f| < 2^-14): adding 0.5, whose ulp is 2^-24, makes
     * the FPU round to the f16 subnormal grid; the low bits are the result
     * (0x400 when it rounds up to the smallest normal, which is right). */
    const uint32_t subnormal = f2u(u2f(a) + 0.5f) - 0x3f000000u;
    uint32_t r = pick(mask_if(a < 0x38800000u), subnormal, normal);
    /* From 65520 up (halfway above the largest finite 65504) it is inf. */
    r = pick(mask_if(a >= 0x477ff000u), 0x7c00u, r);
    /* NaN: quiet, with the top of the payload. */
    r = pick(mask_if(a > 0x7f800000u), 0x7e00u | ((a >> 13) & 0x3ffu), r);
    return (uint16_t)(r | sign);
}

void pmc_ftar_widen(float *out, const void *in, size_t n, int dtype)
{
    float *restrict o = out;
    const uint16_t *restrict x = in;
    if (dtype == PMC_FTAR_BFLOAT16) {
        for (size_t i = 0; i < n; ++i) o[i] = bf16_to_f32(x[i]);
    } else {
        for (size_t i = 0; i < n; ++i) o[i] = f16_to_f32(x[i]);
    }
}

void pmc_ftar_narrow(void *out, const float *in, size_t n, int dtype)
{
    uint16_t *restrict o = out;
    const float *restrict x = in;
    if (dtype == PMC_FTAR_BFLOAT16) {
        for (size_t i = 0; i < n; ++i) o[i] = f32_to_bf16(x[i]);
    } else {
        for (size_t i = 0; i < n; ++i) o[i] = f32_to_f16(x[i]);
    }
}

/* ---- Element operations -------------------------------------------------- */

/* The first operand is kept when it is the larger one or a NaN; else the
 * second (which is then the larger one or a NaN): NaN wins from either. */
#define FMAX(a, b) (((a) > (b)) | ((a) != (a)) ? (a) : (b))
#define FMIN(a, b) (((a) < (b)) | ((a) != (a)) ? (a) : (b))
#define IMAX(a, b) ((a) > (b) ? (a) : (b))
#define IMIN(a, b) ((a) < (b) ? (a) : (b))
#define ADD(a, b) ((a) + (b))

/* acc[i] = acc[i] op x[i] */
#define LOOP2(name, T, F)                                                       \
    static void name(void *acc_, const void *x_, size_t n)                      \
    {                                                                           \
        T *restrict acc = acc_;                                                 \
        const T *restrict x = x_;                                               \
        for (size_t i = 0; i < n; ++i) acc[i] = F(acc[i], x[i]);                \
    }

/* acc[i] = acc[i] op 0: the contribution of a member that sends zeros (it
 * still matters: MAX with 0, and -0.0 + 0.0 = +0.0). */
#define LOOP0(name, T, F)                                                       \
    static void name(void *acc_, size_t n)                                      \
    {                                                                           \
        T *restrict acc = acc_;                                                 \
        for (size_t i = 0; i < n; ++i) acc[i] = F(acc[i], (T)0);                \
    }

/* acc[i] = acc[i] op widen(x[i]) for the 16-bit types: no widened copy. */
#define LOOPW(name, CONV, F)                                                    \
    static void name(void *acc_, const void *x_, size_t n)                      \
    {                                                                           \
        float *restrict acc = acc_;                                             \
        const uint16_t *restrict x = x_;                                        \
        for (size_t i = 0; i < n; ++i) {                                        \
            const float v = CONV(x[i]);                                         \
            acc[i] = F(acc[i], v);                                              \
        }                                                                       \
    }

LOOP2(sum_f32, float, ADD)
LOOP2(max_f32, float, FMAX)
LOOP2(min_f32, float, FMIN)
LOOP2(sum_f64, double, ADD)
LOOP2(max_f64, double, FMAX)
LOOP2(min_f64, double, FMIN)
LOOP2(sum_i32, uint32_t, ADD)
LOOP2(max_i32, int32_t, IMAX)
LOOP2(min_i32, int32_t, IMIN)
LOOP2(sum_i64, uint64_t, ADD)
LOOP2(max_i64, int64_t, IMAX)
LOOP2(min_i64, int64_t, IMIN)

LOOP0(sum0_f32, float, ADD)
LOOP0(max0_f32, float, FMAX)
LOOP0(min0_f32, float, FMIN)
LOOP0(sum0_f64, double, ADD)
LOOP0(max0_f64, double, FMAX)
LOOP0(min0_f64, double, FMIN)
LOOP0(max0_i32, int32_t, IMAX)
LOOP0(min0_i32, int32_t, IMIN)
LOOP0(max0_i64, int64_t, IMAX)
LOOP0(min0_i64, int64_t, IMIN)

LOOPW(sumw_bf16, bf16_to_f32, ADD)
LOOPW(maxw_bf16, bf16_to_f32, FMAX)
LOOPW(minw_bf16, bf16_to_f32, FMIN)
LOOPW(sumw_f16, f16_to_f32, ADD)
LOOPW(maxw_f16, f16_to_f32, FMAX)
LOOPW(minw_f16, f16_to_f32, FMIN)

typedef void (*loop2_fn)(void *, const void *, size_t);
typedef void (*loop0_fn)(void *, size_t);

static void nothing0(void *acc, size_t n)
{
    (void)acc;
    (void)n;
}

/* Indexed [accumulation dtype][op]; the 16-bit types use the float32 row. */
static const loop2_fn loops2[PMC_FTAR_DTYPE_COUNT][PMC_FTAR_OP_COUNT] = {
    [PMC_FTAR_FLOAT32] = {sum_f32, max_f32, min_f32}, [PMC_FTAR_FLOAT64] = {sum_f64, max_f64, min_f64},
    [PMC_FTAR_BFLOAT16] = {sum_f32, max_f32, min_f32}, [PMC_FTAR_FLOAT16] = {sum_f32, max_f32, min_f32},
    [PMC_FTAR_INT32] = {sum_i32, max_i32, min_i32},   [PMC_FTAR_INT64] = {sum_i64, max_i64, min_i64},
};

/* Adding an integer zero changes nothing. */
static const loop0_fn loops0[PMC_FTAR_DTYPE_COUNT][PMC_FTAR_OP_COUNT] = {
    [PMC_FTAR_FLOAT32] = {sum0_f32, max0_f32, min0_f32}, [PMC_FTAR_FLOAT64] = {sum0_f64, max0_f64, min0_f64},
    [PMC_FTAR_BFLOAT16] = {sum0_f32, max0_f32, min0_f32}, [PMC_FTAR_FLOAT16] = {sum0_f32, max0_f32, min0_f32},
    [PMC_FTAR_INT32] = {nothing0, max0_i32, min0_i32},   [PMC_FTAR_INT64] = {nothing0, max0_i64, min0_i64},
};

static const loop2_fn loopsw[2][PMC_FTAR_OP_COUNT] = {
    {sumw_bf16, maxw_bf16, minw_bf16},
    {sumw_f16, maxw_f16, minw_f16},
};

static int valid(int dtype, int op)
{
    return dtype >= 0 && dtype < PMC_FTAR_DTYPE_COUNT && op >= 0 && op < PMC_FTAR_OP_COUNT;
}

void pmc_ftar_reduce(void *acc, const void *x, size_t n, int dtype, int op)
{
    if (n == 0 || !valid(dtype, op)) return;
    loops2[dtype][op](acc, x, n);
}

void pmc_ftar_reduce_own(void *acc, const void *own, size_t n, int dtype, int op)
{
    if (n == 0 || !valid(dtype, op)) return;
    if (own == NULL)
        loops0[dtype][op](acc, n);
    else if (dtype == PMC_FTAR_BFLOAT16 || dtype == PMC_FTAR_FLOAT16)
        loopsw[dtype == PMC_FTAR_FLOAT16][op](acc, own, n);
    else
        loops2[dtype][op](acc, own, n);
}
