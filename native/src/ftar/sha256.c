/* SHA-256 and HMAC-SHA256, written from FIPS 180-4 and RFC 2104.
 * On x86-64 CPUs with the SHA extensions the block function runs on them
 * (several times faster: it bounds what integrity=True costs FTAR). */
#include "sha256.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PMC_SHA_NI 1
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void compress_portable(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
        const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; ++i) {
        const uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

#ifdef PMC_SHA_NI
/* The state lives in two registers as ABEF and CDGH (the instructions'
 * layout); each group of four rounds consumes four schedule words, and the
 * schedule is extended four words at a time by sha256msg1/msg2. */
__attribute__((target("sha,sse4.1,ssse3"))) static void compress_blocks_shani(uint32_t h[8], const uint8_t *p,
                                                                               size_t blocks)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i dcba = _mm_loadu_si128((const __m128i *)&h[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&h[4]);
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
    __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
    for (; blocks > 0; --blocks, p += PMC_SHA256_BLOCK) {
        const __m128i abef0 = abef, cdgh0 = cdgh;
        __m128i w[4];
        for (int i = 0; i < 16; ++i) {
            __m128i *cur = &w[i & 3];
            if (i < 4) {
                *cur = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
            } else {
                const __m128i w3 = w[(i + 1) & 3], w2 = w[(i + 2) & 3], w1 = w[(i + 3) & 3];
                __m128i x = _mm_sha256msg1_epu32(*cur, w3);
                x = _mm_add_epi32(x, _mm_alignr_epi8(w1, w2, 4));
                *cur = _mm_sha256msg2_epu32(x, w1);
            }
            __m128i msg = _mm_add_epi32(*cur, _mm_loadu_si128((const __m128i *)&K[4 * i]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, msg);
            msg = _mm_shuffle_epi32(msg, 0x0E);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, msg);
        }
        abef = _mm_add_epi32(abef, abef0);
        cdgh = _mm_add_epi32(cdgh, cdgh0);
    }
    const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(dchg, feba, 8));
}
#endif

/* Hashes whole blocks; the CPU's SHA instructions when it has them (the
 * check reads what libgcc recorded at start-up: no state of ours). */
static void compress_blocks(uint32_t h[8], const uint8_t *p, size_t blocks)
{
#ifdef PMC_SHA_NI
    if (__builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1")) {
        compress_blocks_shani(h, p, blocks);
        return;
    }
#endif
    for (; blocks > 0; --blocks, p += PMC_SHA256_BLOCK) compress_portable(h, p);
}

void pmc_sha256_init(pmc_sha256 *s)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof(iv));
    s->total = 0;
    s->used = 0;
}

void pmc_sha256_update(pmc_sha256 *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    s->total += len;
    if (s->used > 0) {
        const size_t take = len < PMC_SHA256_BLOCK - s->used ? len : PMC_SHA256_BLOCK - s->used;
        memcpy(s->block + s->used, p, take);
        s->used += take;
        p += take;
        len -= take;
        if (s->used < PMC_SHA256_BLOCK) return;
        compress_blocks(s->h, s->block, 1);
        s->used = 0;
    }
    const size_t blocks = len / PMC_SHA256_BLOCK;
    if (blocks > 0) {
        compress_blocks(s->h, p, blocks);
        p += blocks * PMC_SHA256_BLOCK;
        len -= blocks * PMC_SHA256_BLOCK;
    }
    if (len > 0) {
        memcpy(s->block, p, len);
        s->used = len;
    }
}

void pmc_sha256_final(pmc_sha256 *s, uint8_t out[PMC_SHA256_BYTES])
{
    const uint64_t bits = s->total * 8;
    uint8_t pad[PMC_SHA256_BLOCK + 8] = {0x80};
    /* 0x80, zeros up to 56 mod 64, then the length in bits, big-endian. */
    const size_t padlen = (s->used < 56 ? 56 - s->used : 120 - s->used);
    for (int i = 0; i < 8; ++i) pad[padlen + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
    pmc_sha256_update(s, pad, padlen + 8);
    for (int i = 0; i < 8; ++i) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

void pmc_hmac_init(pmc_hmac *m, const void *key, size_t keylen)
{
    uint8_t k[PMC_SHA256_BLOCK] = {0}, pad[PMC_SHA256_BLOCK];
    if (keylen > PMC_SHA256_BLOCK) {
        pmc_sha256 s;
        pmc_sha256_init(&s);
        pmc_sha256_update(&s, key, keylen);
        pmc_sha256_final(&s, k);
    } else if (keylen > 0) {
        memcpy(k, key, keylen);
    }
    for (int i = 0; i < PMC_SHA256_BLOCK; ++i) pad[i] = k[i] ^ 0x36;
    pmc_sha256_init(&m->inner);
    pmc_sha256_update(&m->inner, pad, sizeof(pad));
    for (int i = 0; i < PMC_SHA256_BLOCK; ++i) pad[i] = k[i] ^ 0x5c;
    pmc_sha256_init(&m->outer);
    pmc_sha256_update(&m->outer, pad, sizeof(pad));
}

void pmc_hmac_update(pmc_hmac *m, const void *data, size_t len) { pmc_sha256_update(&m->inner, data, len); }

void pmc_hmac_final(pmc_hmac *m, uint8_t out[PMC_SHA256_BYTES])
{
    uint8_t inner[PMC_SHA256_BYTES];
    pmc_sha256_final(&m->inner, inner);
    pmc_sha256_update(&m->outer, inner, sizeof(inner));
    pmc_sha256_final(&m->outer, out);
}

int pmc_equal_ct(const uint8_t *a, const uint8_t *b, size_t len)
{
    uint8_t diff = 0;
    for (size_t i = 0; i < len; ++i) diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}
