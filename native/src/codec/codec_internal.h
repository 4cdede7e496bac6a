/* Internal interfaces of the codec (native/src/codec). */
#ifndef PMC_CODEC_INTERNAL_H
#define PMC_CODEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pymcoll_codec.h"

/* Scratch memory reused across calls (grown on demand, never shrunk). */
struct pmc_codec_ctx {
    uint32_t crc_tables[8][256];
    uint32_t *row_map; /* per row: its distinct row's index */
    size_t row_map_cap;
    uint32_t *first; /* per distinct row: the first row holding it */
    size_t first_cap;
    uint32_t *slots; /* dedup hash table: row index + 1, 0 = empty */
    size_t slots_cap;
    uint16_t *symbols; /* distinct rows' symbols: 0 = exception, else zigzag(code) + 1 */
    size_t symbols_cap;
    uint8_t *exceptions; /* exact values, in the dtype's bytes, in symbol order */
    size_t exceptions_cap;
    uint8_t *work; /* an encoded candidate, or a plane of bytes */
    size_t work_cap;
    uint8_t *work2;
    size_t work2_cap;
    uint32_t *repeats; /* the row map's indices of repeated rows */
    size_t repeats_cap;
    uint32_t *remap; /* per distinct row: the distinct row of the same codes it merges into */
    size_t remap_cap;
};

/* Grows *buf to hold `bytes`; 0 on success. */
int pmc_codec_grow(void **buf, size_t *cap, size_t bytes);

/* CRC-32 (the zlib polynomial) of data[0..len), continuing from crc (0 to
 * start): sliced with the context's tables, or bit by bit (short inputs). */
void pmc_codec_crc32_tables(uint32_t tables[8][256]);
uint32_t pmc_codec_crc32(const uint32_t tables[8][256], uint32_t crc, const void *data, size_t len);
uint32_t pmc_codec_crc32_bits(uint32_t crc, const void *data, size_t len);

/* dtype conversions: element i of `row` as a double; a double rounded to the
 * dtype as the decoder stores it (back as a double); storing into a row. */
double pmc_codec_load(const void *row, size_t i, int dtype);
double pmc_codec_round(double v, int dtype);
void pmc_codec_store(void *row, size_t i, int dtype, double v);

/* Finds the distinct rows: fills ctx->row_map (rows entries) and ctx->first
 * (*unique entries, in order of first appearance). */
int pmc_codec_dedup(pmc_codec_ctx *ctx, const uint8_t *in, uint64_t rows, size_t row_bytes, uint32_t *unique);

/* After quantization: merges distinct rows whose symbols are the same (rows
 * without exceptions), updating ctx->row_map, ctx->first and ctx->symbols in
 * place; *unique gets the rows left. */
int pmc_codec_merge_code_rows(pmc_codec_ctx *ctx, uint64_t rows, uint32_t cols, uint32_t *unique);

/* A bit writer, least significant bit first: at most 32 bits per put, flushed a 32-bit word at a time. */
typedef struct {
    uint8_t *p;
    uint64_t acc;
    unsigned have; /* bits held in acc, below 32 between calls */
} pmc_bitwriter;

static inline void pmc_bw_put(pmc_bitwriter *w, uint64_t value, unsigned bits) {
    w->acc |= value << w->have;
    w->have += bits;
    if (w->have >= 32) {
        uint32_t word = (uint32_t)w->acc;
        memcpy(w->p, &word, 4);
        w->p += 4;
        w->acc >>= 32;
        w->have -= 32;
    }
}

/* Writes the bits left (whole bytes, the last one padded with zeros); returns the end. */
static inline uint8_t *pmc_bw_finish(pmc_bitwriter *w) {
    while (w->have > 0) {
        *w->p++ = (uint8_t)w->acc;
        w->acc >>= 8;
        w->have = w->have > 8 ? w->have - 8 : 0;
    }
    return w->p;
}

/* Packs n values of `bits` bits (1-16) LSB first; returns the bytes written
 * (out must hold pmc_codec_packed_bytes(n, bits)). */
uint64_t pmc_codec_packed_bytes(uint64_t n, unsigned bits);
/* Bits that hold every value up to max_value (at least 1). */
unsigned pmc_codec_bits_for(uint64_t max_value);
void pmc_codec_pack(const uint16_t *values, uint64_t n, unsigned bits, uint8_t *out);
void pmc_codec_pack32(const uint32_t *values, uint64_t n, unsigned bits, uint8_t *out);
/* Unpacks; the input must hold pmc_codec_packed_bytes(n, bits) bytes. */
void pmc_codec_unpack(const uint8_t *in, uint64_t n, unsigned bits, uint16_t *out);
void pmc_codec_unpack32(const uint8_t *in, uint64_t n, unsigned bits, uint32_t *out);

/* Huffman coding of a byte stream: the most bytes a block can take, encode
 * (returns bytes written), decode (PMC_CODEC_OK or PMC_CODEC_ECORRUPT;
 * *used gets the block's size). The output stride lets a plane of 16-bit
 * symbols be written in place. */
uint64_t pmc_codec_huffman_max_bytes(uint64_t n);
/* The fewest bytes a block of n symbols below span takes when they are not all the same. */
uint64_t pmc_codec_huffman_min_bytes(uint64_t n, unsigned span);
uint64_t pmc_codec_huffman_encode(const uint8_t *in, uint64_t n, size_t stride, uint8_t *out);
/* The same in parts, for symbols that are not in one run (a class's rows) and frequencies
 * already counted: begin writes the block's head for symbols of these frequencies, put
 * appends n symbols (the ones counted, in any number of calls), end finishes the stream
 * and returns the block's size. */
typedef struct {
    uint16_t code[256];
    uint8_t len[256];
    pmc_bitwriter w;
    uint8_t *out;
    int single; /* one distinct symbol: mode 1, no stream */
} pmc_huffman_encoder;
void pmc_codec_huffman_begin(pmc_huffman_encoder *e, const uint64_t freq[256], uint8_t *out);
void pmc_codec_huffman_put(pmc_huffman_encoder *e, const uint8_t *in, uint64_t n, size_t stride);
uint64_t pmc_codec_huffman_end(pmc_huffman_encoder *e);
/* The bytes of the block pmc_codec_huffman_encode would write for symbols of these frequencies. */
uint64_t pmc_codec_huffman_cost(const uint64_t freq[256]);
/* The size of the Huffman block of n symbols at in[0..avail), checked against avail. */
int pmc_codec_huffman_block_size(const uint8_t *in, uint64_t avail, uint64_t n, uint64_t *size, char *msg,
                                 size_t msg_len);
int pmc_codec_huffman_decode(const uint8_t *in, uint64_t avail, uint64_t n, uint8_t *out, size_t stride,
                             uint64_t *used, char *msg, size_t msg_len);

/* The row map of a deduplicated batch (rowmap.c): the most bytes it takes;
 * encoding ctx->row_map (the smaller of its forms); its size as laid out at
 * in[0..avail); decoding into ctx->row_map and ctx->first, every entry checked. */
uint64_t pmc_codec_rowmap_max_bytes(uint64_t rows);
int pmc_codec_rowmap_encode(pmc_codec_ctx *ctx, uint64_t rows, uint32_t unique, uint8_t *out, uint64_t cap,
                            uint64_t *written);
int pmc_codec_rowmap_size(const uint8_t *in, uint64_t avail, uint64_t rows, uint32_t unique, uint64_t *size,
                          char *msg, size_t msg_len);
int pmc_codec_rowmap_decode(pmc_codec_ctx *ctx, const uint8_t *in, uint64_t avail, uint64_t rows, uint32_t unique,
                            uint64_t *used, char *msg, size_t msg_len);

/* The Huffman stage's codes in row classes (classes.c): the most bytes; encoding
 * ctx->symbols of `unique` distinct rows (wide: 16-bit symbols); the section's
 * size as laid out at in[0..avail); decoding into ctx->symbols, where
 * *position (NULL: the identity) gives each distinct row's symbol row. */
uint64_t pmc_codec_classes_max_bytes(uint64_t n_sym, uint32_t unique);
int pmc_codec_classes_encode(pmc_codec_ctx *ctx, uint32_t unique, uint32_t cols, int wide, uint8_t *out,
                             uint64_t *written);
int pmc_codec_classes_size(const uint8_t *in, uint64_t avail, uint32_t unique, uint32_t cols, int wide,
                           uint64_t *size, char *msg, size_t msg_len);
int pmc_codec_classes_decode(pmc_codec_ctx *ctx, const uint8_t *in, uint64_t avail, uint32_t unique, uint32_t cols,
                             int wide, uint64_t *used, const uint32_t **position, char *msg, size_t msg_len);

#endif
