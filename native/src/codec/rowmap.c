/* The row map: which distinct row each row of a deduplicated batch holds.
 *
 * Distinct rows are numbered in order of first appearance, so a row that
 * holds a distinct row for the first time needs no index: it is the next
 * one. Two forms, the smaller kept:
 *   PACKED (kind 0): u8 width, every row's index packed at that width;
 *   SPLIT  (kind 1): a bitmap of the first occurrences (bit r of byte r/8),
 *          u32 escapes, then the repeated rows' indices as one Huffman block
 *          of bytes (min(index, 255)) and, packed at the width of
 *          unique - 256, index - 255 of each escape (a byte of 255).
 * SPLIT pays where rows are drawn from a skewed distribution: popular rows
 * appear early, get small indices, and take few bits; the rare late ones
 * take an escape. */
#include <stdio.h>

#include "codec_internal.h"

enum { KIND_PACKED = 0, KIND_SPLIT = 1 };

/* Bits of an index of `unique` (>= 1) distinct rows. */
static unsigned width_for(uint32_t unique) { return pmc_codec_bits_for(unique - 1u); }

#define ESCAPE 255u
#define SPLIT_HEAD(rows) (1 + ((rows) + 7) / 8 + 4)

/* Width of an escape's extra value (index - 255 <= unique - 256). */
static unsigned escape_width(uint32_t unique) { return unique > ESCAPE ? width_for(unique - ESCAPE) : 0; }

static int fail(char *msg, size_t msg_len, const char *what) {
    if (msg && msg_len) snprintf(msg, msg_len, "%s", what);
    return PMC_CODEC_ECORRUPT;
}

uint64_t pmc_codec_rowmap_max_bytes(uint64_t rows) { return 2 + pmc_codec_packed_bytes(rows, 32); }

int pmc_codec_rowmap_encode(pmc_codec_ctx *ctx, uint64_t rows, uint32_t unique, uint8_t *out, uint64_t cap,
                            uint64_t *written) {
    unsigned w = width_for(unique), ew = escape_width(unique);
    uint64_t packed = 2 + pmc_codec_packed_bytes(rows, w), repeats = rows - unique;
    uint64_t split_max = SPLIT_HEAD(rows) + pmc_codec_huffman_max_bytes(repeats) + pmc_codec_packed_bytes(repeats, 32);
    /* ctx->repeats: the symbols' bytes (repeats + 8 bytes), then the escapes' values. */
    uint64_t sym_words = (repeats + 8 + 3) / 4;
    if (pmc_codec_grow((void **)&ctx->repeats, &ctx->repeats_cap, (sym_words + repeats) * 4) ||
        pmc_codec_grow((void **)&ctx->work2, &ctx->work2_cap, split_max))
        return PMC_CODEC_ENOMEM;
    uint8_t *sym = (uint8_t *)ctx->repeats;
    uint32_t *esc = ctx->repeats + sym_words;
    uint8_t *split = ctx->work2, *bitmap = split + 1;
    memset(bitmap, 0, (rows + 7) / 8);
    split[0] = KIND_SPLIT;
    uint32_t seen = 0, n_esc = 0;
    uint64_t k = 0;
    for (uint64_t r = 0; r < rows; r++) {
        uint32_t u = ctx->row_map[r];
        if (u == seen) {
            bitmap[r >> 3] |= (uint8_t)(1u << (r & 7));
            seen++;
        } else if (u < ESCAPE) {
            sym[k++] = (uint8_t)u;
        } else {
            sym[k++] = ESCAPE;
            esc[n_esc++] = u - ESCAPE;
        }
    }
    uint64_t at = SPLIT_HEAD(rows);
    memcpy(split + at - 4, &n_esc, 4);
    /* A Huffman block of two symbols or more takes its code lengths and a bit per symbol:
     * where that cannot beat the packed form (small batches), it is not built. */
    int several = 0;
    unsigned top = repeats ? sym[0] : 0;
    for (uint64_t i = 1; i < repeats; i++) {
        several |= sym[i] != sym[0];
        top = sym[i] > top ? sym[i] : top;
    }
    if (several && at + pmc_codec_huffman_min_bytes(repeats, top + 1) >= packed) at = packed;
    if (at < packed) at += pmc_codec_huffman_encode(sym, repeats, 1, split + at);
    if (n_esc) {
        pmc_codec_pack32(esc, n_esc, ew, split + at);
        at += pmc_codec_packed_bytes(n_esc, ew);
    }
    if (at < packed) {
        if (at > cap) return PMC_CODEC_ESPACE;
        memcpy(out, split, at);
        *written = at;
        return PMC_CODEC_OK;
    }
    if (packed > cap) return PMC_CODEC_ESPACE;
    out[0] = KIND_PACKED;
    out[1] = (uint8_t)w;
    pmc_codec_pack32(ctx->row_map, rows, w, out + 2);
    *written = packed;
    return PMC_CODEC_OK;
}

int pmc_codec_rowmap_size(const uint8_t *in, uint64_t avail, uint64_t rows, uint32_t unique, uint64_t *size,
                          char *msg, size_t msg_len) {
    if (avail < 2) return fail(msg, msg_len, "truncated row map");
    unsigned w = width_for(unique);
    if (in[0] == KIND_PACKED) {
        if (in[1] != w || 2 + pmc_codec_packed_bytes(rows, w) > avail) return fail(msg, msg_len, "invalid row map");
        *size = 2 + pmc_codec_packed_bytes(rows, w);
        return PMC_CODEC_OK;
    }
    if (in[0] != KIND_SPLIT) return fail(msg, msg_len, "unknown row map form");
    uint64_t at = SPLIT_HEAD(rows), repeats = rows - unique, block;
    if (at > avail) return fail(msg, msg_len, "truncated row map");
    uint32_t n_esc;
    memcpy(&n_esc, in + at - 4, 4);
    if (n_esc > repeats || (n_esc && unique <= ESCAPE)) return fail(msg, msg_len, "invalid row map escapes");
    int rc = pmc_codec_huffman_block_size(in + at, avail - at, repeats, &block, msg, msg_len);
    if (rc) return rc;
    at += block;
    uint64_t extra = pmc_codec_packed_bytes(n_esc, escape_width(unique));
    if (extra > avail - at) return fail(msg, msg_len, "truncated row map");
    *size = at + extra;
    return PMC_CODEC_OK;
}

int pmc_codec_rowmap_decode(pmc_codec_ctx *ctx, const uint8_t *in, uint64_t avail, uint64_t rows, uint32_t unique,
                            uint64_t *used, char *msg, size_t msg_len) {
    uint64_t size;
    int rc = pmc_codec_rowmap_size(in, avail, rows, unique, &size, msg, msg_len);
    if (rc) return rc;
    uint32_t seen = 0;
    if (in[0] == KIND_PACKED) {
        pmc_codec_unpack32(in + 2, rows, in[1], ctx->row_map);
        for (uint64_t r = 0; r < rows; r++) {
            uint32_t u = ctx->row_map[r];
            if (u > seen || u >= unique) return fail(msg, msg_len, "invalid row map entry");
            if (u == seen) ctx->first[seen++] = (uint32_t)r;
        }
    } else {
        uint64_t repeats = rows - unique, at = SPLIT_HEAD(rows), block;
        uint32_t n_esc;
        memcpy(&n_esc, in + at - 4, 4);
        uint64_t sym_words = (repeats + 8 + 3) / 4;
        if (pmc_codec_grow((void **)&ctx->repeats, &ctx->repeats_cap, (sym_words + n_esc) * 4)) return PMC_CODEC_ENOMEM;
        uint8_t *sym = (uint8_t *)ctx->repeats;
        uint32_t *esc = ctx->repeats + sym_words;
        rc = pmc_codec_huffman_decode(in + at, avail - at, repeats, sym, 1, &block, msg, msg_len);
        if (rc) return rc;
        at += block;
        if (n_esc) pmc_codec_unpack32(in + at, n_esc, escape_width(unique), esc);
        uint32_t used_esc = 0;
        const uint8_t *bitmap = in + 1;
        uint64_t k = 0;
        for (uint64_t r = 0; r < rows; r++) {
            if (bitmap[r >> 3] & (1u << (r & 7))) {
                if (seen == unique) return fail(msg, msg_len, "row map marks more distinct rows than the header");
                ctx->first[seen] = (uint32_t)r;
                ctx->row_map[r] = seen++;
            } else {
                if (k == repeats) return fail(msg, msg_len, "row map marks fewer distinct rows than the header");
                uint64_t u = sym[k++];
                if (u == ESCAPE) {
                    if (used_esc == n_esc) return fail(msg, msg_len, "more row map escapes than stored");
                    u += esc[used_esc++];
                }
                /* A repeat refers to a distinct row already seen. */
                if (u >= seen) return fail(msg, msg_len, "invalid row map entry");
                ctx->row_map[r] = (uint32_t)u;
            }
        }
        if (used_esc != n_esc) return fail(msg, msg_len, "row map escapes left unused");
        /* Bits past the last row must be clear: one buffer, one encoding. */
        if ((rows & 7) && (bitmap[rows >> 3] >> (rows & 7)))
            return fail(msg, msg_len, "row map bitmap has bits past the last row");
    }
    if (seen != unique) return fail(msg, msg_len, "row map misses distinct rows");
    *used = size;
    return PMC_CODEC_OK;
}
