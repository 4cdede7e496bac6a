/* Row classes of the Huffman stage: distinct rows grouped by their largest
 * symbol, each group Huffman coded with its own code lengths.
 *
 * Trained embedding tables mix rows of very different magnitudes (ids seen
 * often have grown, rare ones stay near their small initial values): one
 * code for all rows spends bits on wide codes in small rows. Classes cut
 * the codes by 2-3% on such batches and cost a class per row.
 *
 * Section: u8 k (1..4 classes); for k > 1 each distinct row's class packed
 * at bits_for(k - 1) bits; then a Huffman block per class holding the
 * symbols of its rows in row order (16-bit symbols: k = 1 and two blocks,
 * the low and the high bytes). The encoder tries k = 1..4 with classes cut
 * at quantiles of the rows' largest symbols and keeps the smallest. */
#include <stdio.h>

#include "codec_internal.h"

#define MAX_CLASSES 4

static int fail(char *msg, size_t msg_len, const char *what) {
    if (msg && msg_len) snprintf(msg, msg_len, "%s", what);
    return PMC_CODEC_ECORRUPT;
}

static unsigned class_bits(unsigned k) { return k <= 1 ? 0 : k == 2 ? 1 : 2; }

/* Class of distinct row u from the packed map (w bits each, w in 1..2; the map holds enough bytes). */
static unsigned class_at(const uint8_t *map, uint64_t map_bytes, uint32_t u, unsigned w) {
    uint64_t bit = (uint64_t)u * w;
    unsigned v = map[bit >> 3];
    if ((bit >> 3) + 1 < map_bytes) v |= (unsigned)map[(bit >> 3) + 1] << 8;
    return (v >> (bit & 7)) & ((1u << w) - 1);
}

/* The symbol histogram of class c of k: the groups from *g on whose bound is within the class's cut
 * (*g advances past them, so calling for c = 0, 1, ... walks the groups once). */
static void class_histogram(uint64_t (*hist)[256], const unsigned *bounds, unsigned nb, unsigned cut,
                            unsigned *g, uint64_t merged[256]) {
    memset(merged, 0, 256 * sizeof merged[0]);
    for (; *g < nb && bounds[*g] <= cut; (*g)++)
        for (unsigned s = 0; s < 256; s++) merged[s] += hist[*g][s];
}

uint64_t pmc_codec_classes_max_bytes(uint64_t n_sym, uint32_t unique) {
    return 1 + pmc_codec_packed_bytes(unique, 2) + MAX_CLASSES * pmc_codec_huffman_max_bytes(n_sym);
}

int pmc_codec_classes_encode(pmc_codec_ctx *ctx, uint32_t unique, uint32_t cols, int wide, uint8_t *out,
                             uint64_t *written) {
    uint64_t n_sym = (uint64_t)unique * cols;
    const uint16_t *sym = ctx->symbols;
    const uint8_t *bytes = (const uint8_t *)ctx->symbols; /* little-endian: low byte first */
    if (wide || unique < 2 * MAX_CLASSES) {
        out[0] = 1;
        uint64_t at = 1 + pmc_codec_huffman_encode(bytes, n_sym, 2, out + 1);
        if (wide) at += pmc_codec_huffman_encode(bytes + 1, n_sym, 2, out + at);
        *written = at;
        return PMC_CODEC_OK;
    }
    if (pmc_codec_grow((void **)&ctx->remap, &ctx->remap_cap, (size_t)unique * 4 + 4)) return PMC_CODEC_ENOMEM;
    /* Each row's largest symbol, and how many rows have each. */
    uint8_t *top = (uint8_t *)ctx->remap;
    uint32_t rows_with[256] = {0};
    for (uint32_t u = 0; u < unique; u++) {
        const uint16_t *row = sym + (size_t)u * cols;
        unsigned m = 0;
        for (uint32_t c = 0; c < cols; c++) m = row[c] > m ? row[c] : m;
        top[u] = (uint8_t)m;
        rows_with[m]++;
    }
    /* Cut points of k classes at the quantiles of the largest symbols: class c holds the rows
     * whose largest symbol is below cut[k][c] (and at least the previous cut). */
    unsigned cut[MAX_CLASSES + 1][MAX_CLASSES];
    for (unsigned k = 1; k <= MAX_CLASSES; k++) {
        unsigned c = 0;
        uint64_t seen = 0;
        for (unsigned m = 0; m < 256 && c + 1 < k; m++) {
            seen += rows_with[m];
            while (c + 1 < k && seen * k >= (uint64_t)(c + 1) * unique) cut[k][c++] = m + 1;
        }
        while (c < k) cut[k][c++] = 256;
    }
    /* Symbol histograms of the groups between all distinct cuts. */
    unsigned bounds[MAX_CLASSES * MAX_CLASSES + 1], nb = 0;
    for (unsigned k = 1; k <= MAX_CLASSES; k++)
        for (unsigned c = 0; c < k; c++) {
            unsigned b = cut[k][c], i = 0;
            while (i < nb && bounds[i] != b) i++;
            if (i == nb) bounds[nb++] = b;
        }
    for (unsigned i = 1; i < nb; i++) /* sort (a handful) */
        for (unsigned j = i; j > 0 && bounds[j - 1] > bounds[j]; j--) {
            unsigned t = bounds[j];
            bounds[j] = bounds[j - 1];
            bounds[j - 1] = t;
        }
    uint8_t group_of[256];
    for (unsigned m = 0, g = 0; m < 256; m++) {
        while (m >= bounds[g]) g++;
        group_of[m] = (uint8_t)g;
    }
    uint64_t hist[MAX_CLASSES * MAX_CLASSES][256];
    memset(hist, 0, sizeof(hist[0]) * nb);
    for (uint32_t u = 0; u < unique; u++) {
        uint64_t *h = hist[group_of[top[u]]];
        const uint16_t *row = sym + (size_t)u * cols;
        for (uint32_t c = 0; c < cols; c++) h[row[c] & 0xFF]++;
    }
    /* The size of each k, exactly (the code lengths the encoder would build). */
    unsigned best_k = 1;
    uint64_t best = UINT64_MAX;
    for (unsigned k = 1; k <= MAX_CLASSES; k++) {
        uint64_t size = 1 + pmc_codec_packed_bytes(unique, class_bits(k)), merged[256];
        unsigned g = 0;
        for (unsigned c = 0; c < k; c++) {
            class_histogram(hist, bounds, nb, cut[k][c], &g, merged);
            size += pmc_codec_huffman_cost(merged);
        }
        if (size < best) {
            best = size;
            best_k = k;
        }
    }
    unsigned k = best_k, w = class_bits(k);
    uint8_t *cls = top; /* in place: a row's class replaces its largest symbol */
    for (uint32_t u = 0; u < unique; u++) {
        unsigned c = 0;
        while (top[u] >= cut[k][c]) c++;
        cls[u] = (uint8_t)c;
    }
    out[0] = (uint8_t)k;
    uint64_t at = 1;
    if (k > 1) {
        uint64_t map_bytes = pmc_codec_packed_bytes(unique, w);
        memset(out + at, 0, map_bytes);
        for (uint32_t u = 0; u < unique; u++) {
            uint64_t bit = (uint64_t)u * w;
            out[at + (bit >> 3)] |= (uint8_t)(cls[u] << (bit & 7));
        }
        at += map_bytes;
    }
    /* Each class's block straight from its rows' symbols (the low bytes, stride 2), with the
     * histograms counted above. */
    pmc_huffman_encoder enc;
    for (unsigned c = 0, g = 0; c < k; c++) {
        uint64_t merged[256];
        class_histogram(hist, bounds, nb, cut[k][c], &g, merged);
        pmc_codec_huffman_begin(&enc, merged, out + at);
        for (uint32_t u = 0; u < unique; u++)
            if (cls[u] == c) pmc_codec_huffman_put(&enc, bytes + (size_t)u * cols * 2, cols, 2);
        at += pmc_codec_huffman_end(&enc);
    }
    *written = at;
    return PMC_CODEC_OK;
}

/* Rows per class from the section at in (k read and checked); *head gets the bytes before the blocks. */
static int read_classes(const uint8_t *in, uint64_t avail, uint32_t unique, int wide, unsigned *k_out,
                        uint32_t count[MAX_CLASSES], uint64_t *head, char *msg, size_t msg_len) {
    if (avail < 1) return fail(msg, msg_len, "truncated Huffman codes");
    unsigned k = in[0];
    if (k < 1 || k > MAX_CLASSES || (wide && k != 1)) return fail(msg, msg_len, "invalid number of row classes");
    memset(count, 0, MAX_CLASSES * sizeof count[0]);
    *k_out = k;
    if (k == 1) {
        count[0] = unique;
        *head = 1;
        return PMC_CODEC_OK;
    }
    unsigned w = class_bits(k);
    uint64_t map_bytes = pmc_codec_packed_bytes(unique, w);
    if (map_bytes > avail - 1) return fail(msg, msg_len, "truncated row classes");
    for (uint32_t u = 0; u < unique; u++) {
        unsigned c = class_at(in + 1, map_bytes, u, w);
        if (c >= k) return fail(msg, msg_len, "invalid row class");
        count[c]++;
    }
    *head = 1 + map_bytes;
    return PMC_CODEC_OK;
}

int pmc_codec_classes_size(const uint8_t *in, uint64_t avail, uint32_t unique, uint32_t cols, int wide,
                           uint64_t *size, char *msg, size_t msg_len) {
    unsigned k;
    uint32_t count[MAX_CLASSES];
    uint64_t at;
    int rc = read_classes(in, avail, unique, wide, &k, count, &at, msg, msg_len);
    if (rc) return rc;
    for (unsigned b = 0; b < (wide ? 2u : k); b++) {
        uint64_t block;
        rc = pmc_codec_huffman_block_size(in + at, avail - at, (uint64_t)count[wide ? 0 : b] * cols, &block, msg,
                                          msg_len);
        if (rc) return rc;
        at += block;
    }
    *size = at;
    return PMC_CODEC_OK;
}

int pmc_codec_classes_decode(pmc_codec_ctx *ctx, const uint8_t *in, uint64_t avail, uint32_t unique, uint32_t cols,
                             int wide, uint64_t *used, const uint32_t **position, char *msg, size_t msg_len) {
    unsigned k;
    uint32_t count[MAX_CLASSES];
    uint64_t at, n_sym = (uint64_t)unique * cols;
    int rc = read_classes(in, avail, unique, wide, &k, count, &at, msg, msg_len);
    if (rc) return rc;
    uint8_t *bytes = (uint8_t *)ctx->symbols;
    *position = NULL;
    if (k == 1) {
        if (!wide) memset(ctx->symbols, 0, n_sym * 2);
        for (unsigned plane = 0; plane < (wide ? 2u : 1u); plane++) {
            uint64_t block;
            rc = pmc_codec_huffman_decode(in + at, avail - at, n_sym, bytes + plane, 2, &block, msg, msg_len);
            if (rc) return rc;
            at += block;
        }
        *used = at;
        return PMC_CODEC_OK;
    }
    /* Class c's rows take the symbol rows from start[c] on, in row order. */
    if (pmc_codec_grow((void **)&ctx->remap, &ctx->remap_cap, (size_t)unique * 4 + 4)) return PMC_CODEC_ENOMEM;
    uint32_t start[MAX_CLASSES], next[MAX_CLASSES];
    for (unsigned c = 0, s = 0; c < k; c++) {
        start[c] = next[c] = s;
        s += count[c];
    }
    unsigned w = class_bits(k);
    uint64_t map_bytes = pmc_codec_packed_bytes(unique, w);
    for (uint32_t u = 0; u < unique; u++) ctx->remap[u] = next[class_at(in + 1, map_bytes, u, w)]++;
    memset(ctx->symbols, 0, n_sym * 2);
    for (unsigned c = 0; c < k; c++) {
        uint64_t block;
        rc = pmc_codec_huffman_decode(in + at, avail - at, (uint64_t)count[c] * cols,
                                      bytes + (uint64_t)start[c] * cols * 2, 2, &block, msg, msg_len);
        if (rc) return rc;
        at += block;
    }
    *position = ctx->remap;
    *used = at;
    return PMC_CODEC_OK;
}
