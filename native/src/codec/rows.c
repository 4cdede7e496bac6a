/* Distinct rows of a batch: pooled embeddings of the same ids are the same
 * bytes, and a batch of a low-cardinality table holds few distinct rows;
 * after quantization, rows of different bytes but the same codes (near-zero
 * rows of ids training barely touched) are one row too. */
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"

int pmc_codec_grow(void **buf, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return 0;
    size_t want = *cap ? *cap : 4096;
    while (want < bytes) {
        if (want > SIZE_MAX / 2) {
            want = bytes;
            break;
        }
        want *= 2;
    }
    void *p = realloc(*buf, want);
    if (!p) return -1;
    *buf = p;
    *cap = want;
    return 0;
}

/* Four independent lanes over 32-byte blocks: the multiplications of one row overlap. */
static uint64_t row_hash(const uint8_t *p, size_t n) {
    uint64_t h[4] = {0x9E3779B97F4A7C15ull ^ n, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0x27D4EB2F165667C5ull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * k, 8);
            h[k] = (h[k] ^ w) * 0xFF51AFD7ED558CCDull;
            h[k] ^= h[k] >> 29;
        }
    uint64_t x = h[0] ^ (h[1] * 0x9E3779B97F4A7C15ull) ^ (h[2] >> 7) ^ (h[3] * 0xC4CEB9FE1A85EC53ull);
    for (; i < n; i++) x = (x ^ p[i]) * 0x100000001B3ull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    return x ^ (x >> 29);
}

int pmc_codec_dedup(pmc_codec_ctx *ctx, const uint8_t *in, uint64_t rows, size_t row_bytes, uint32_t *unique) {
    size_t nslots = 16;
    while (nslots < 2 * rows) nslots *= 2;
    if (pmc_codec_grow((void **)&ctx->slots, &ctx->slots_cap, nslots * sizeof(uint32_t)) ||
        pmc_codec_grow((void **)&ctx->row_map, &ctx->row_map_cap, (size_t)rows * sizeof(uint32_t) + 4) ||
        pmc_codec_grow((void **)&ctx->first, &ctx->first_cap, (size_t)rows * sizeof(uint32_t) + 4))
        return PMC_CODEC_ENOMEM;
    uint32_t *slots = ctx->slots;
    memset(slots, 0, nslots * sizeof(uint32_t));
    uint32_t n = 0;
    for (uint64_t r = 0; r < rows; r++) {
        const uint8_t *row = in + r * row_bytes;
        size_t s = (size_t)row_hash(row, row_bytes) & (nslots - 1);
        for (;;) {
            uint32_t held = slots[s];
            if (held == 0) {
                /* A new distinct row. */
                slots[s] = (uint32_t)r + 1;
                ctx->first[n] = (uint32_t)r;
                ctx->row_map[r] = n++;
                break;
            }
            if (memcmp(in + (uint64_t)(held - 1) * row_bytes, row, row_bytes) == 0) {
                ctx->row_map[r] = ctx->row_map[held - 1];
                break;
            }
            s = (s + 1) & (nslots - 1);
        }
    }
    *unique = n;
    return PMC_CODEC_OK;
}

int pmc_codec_merge_code_rows(pmc_codec_ctx *ctx, uint64_t rows, uint32_t cols, uint32_t *unique) {
    uint32_t n = *unique;
    size_t nslots = 16, sym_bytes = (size_t)cols * 2;
    while (nslots < 2 * (size_t)n) nslots *= 2;
    if (pmc_codec_grow((void **)&ctx->slots, &ctx->slots_cap, nslots * sizeof(uint32_t)) ||
        pmc_codec_grow((void **)&ctx->remap, &ctx->remap_cap, (size_t)n * sizeof(uint32_t) + 4))
        return PMC_CODEC_ENOMEM;
    uint32_t *slots = ctx->slots;
    memset(slots, 0, nslots * sizeof(uint32_t));
    uint16_t *sym = ctx->symbols;
    uint32_t kept = 0;
    /* Kept rows move down to index `kept` (<= u), in order: first appearances stay in order.
     * Only rows without exceptions merge, so the exceptions keep their order and place. */
    for (uint32_t u = 0; u < n; u++) {
        const uint16_t *row = sym + (size_t)u * cols;
        int has_exc = 0;
        for (uint32_t c = 0; c < cols; c++) has_exc |= row[c] == 0;
        if (!has_exc) {
            size_t s = (size_t)row_hash((const uint8_t *)row, sym_bytes) & (nslots - 1);
            uint32_t match = 0;
            for (; slots[s]; s = (s + 1) & (nslots - 1))
                if (memcmp(sym + (size_t)(slots[s] - 1) * cols, row, sym_bytes) == 0) {
                    match = slots[s];
                    break;
                }
            if (match) {
                ctx->remap[u] = match - 1;
                continue;
            }
            slots[s] = kept + 1;
        }
        if (kept != u) {
            memmove(sym + (size_t)kept * cols, row, sym_bytes);
            ctx->first[kept] = ctx->first[u];
        }
        ctx->remap[u] = kept++;
    }
    if (kept != n)
        for (uint64_t r = 0; r < rows; r++) ctx->row_map[r] = ctx->remap[ctx->row_map[r]];
    *unique = kept;
    return PMC_CODEC_OK;
}
