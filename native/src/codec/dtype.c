/* Element types: float32, bfloat16 and float16 to and from double, rounding
 * to nearest even as the decoder stores them. */
#include <math.h>
#include <string.h>

#include "codec_internal.h"

size_t pmc_codec_dtype_size(int dtype) {
    switch (dtype) {
    case PMC_CODEC_F32: return 4;
    case PMC_CODEC_BF16:
    case PMC_CODEC_F16: return 2;
    default: return 0;
    }
}

static float f32_of_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint32_t bits_of_f32(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static uint16_t bf16_of_f32(float f) {
    uint32_t b = bits_of_f32(f);
    if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x7FFFFFu)) return (uint16_t)((b >> 16) | 0x40); /* quiet NaN */
    b += 0x7FFFu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

static float f32_of_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1F) return f32_of_bits(sign | 0x7F800000u | (man << 13));
    if (exp == 0) {
        float v = (float)man * 0x1p-24f; /* subnormal: exact in float */
        return sign ? -v : v;
    }
    return f32_of_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Double to float16, rounding to nearest even, once (no double rounding through float). */
static uint16_t f16_of_double(double v) {
    uint16_t sign = signbit(v) ? 0x8000u : 0;
    double a = fabs(v);
    if (isnan(v)) return 0x7E00u;
    if (a >= 65520.0) return sign | 0x7C00u; /* rounds to infinity */
    if (a < 0x1p-14) {
        /* Subnormal range: units of 2^-24, nearest even (nearbyint in the default mode). */
        double units = nearbyint(a * 0x1p24);
        return sign | (uint16_t)units; /* 1024 units is the smallest normal: the bits carry over */
    }
    int e;
    double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    double scaled = nearbyint(m * 2048.0); /* 11 significant bits */
    if (scaled >= 2048.0) {
        scaled /= 2.0;
        e += 1;
    }
    unsigned exp = (unsigned)(e - 1 + 15);
    if (exp >= 31) return sign | 0x7C00u;
    return sign | (uint16_t)(exp << 10) | (uint16_t)((unsigned)scaled & 0x3FFu);
}

double pmc_codec_load(const void *row, size_t i, int dtype) {
    const uint8_t *p = row;
    if (dtype == PMC_CODEC_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    if (dtype == PMC_CODEC_BF16) return f32_of_bits((uint32_t)h << 16);
    return f32_of_f16(h);
}

double pmc_codec_round(double v, int dtype) {
    if (dtype == PMC_CODEC_F32) return (float)v;
    if (dtype == PMC_CODEC_BF16) return f32_of_bits((uint32_t)bf16_of_f32((float)v) << 16);
    return f32_of_f16(f16_of_double(v));
}

void pmc_codec_store(void *row, size_t i, int dtype, double v) {
    uint8_t *p = row;
    if (dtype == PMC_CODEC_F32) {
        float f = (float)v;
        memcpy(p + 4 * i, &f, 4);
        return;
    }
    uint16_t h = dtype == PMC_CODEC_BF16 ? bf16_of_f32((float)v) : f16_of_double(v);
    memcpy(p + 2 * i, &h, 2);
}
