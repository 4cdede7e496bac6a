/* Canonical Huffman coding of a byte stream, codes at most 12 bits long.
 *
 * Block: u8 mode (0: Huffman, 1: one symbol repeated), then for mode 1 the
 * symbol; for mode 0, u8 span (the symbols 0..span-1 have code lengths; 0
 * means 256), (span + 1) / 2 bytes of code lengths (two 4-bit lengths per
 * byte, symbol 2k in the low nibble), u32 length of the bit stream in bytes,
 * and the stream, codes written least significant bit first (each code bit-reversed
 * so that a 12-bit table lookup decodes it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"

#define MAX_BITS 12
#define TABLE_SIZE (1u << MAX_BITS)
/* The decoder's table of several symbols per lookup: its window, and the fewest symbols a
 * block needs for it to be built (2^MULTI_BITS entries cost about as much as decoding that
 * many symbols one by one). */
#define MULTI_BITS 10
#define MULTI_MIN (8u << MULTI_BITS)

/* Bytes before the stream of a mode-0 block whose symbols are below span (1..256). */
static uint64_t head_bytes(unsigned span) { return 2 + (span + 1) / 2 + 4; }

uint64_t pmc_codec_huffman_max_bytes(uint64_t n) { return head_bytes(256) + (n * MAX_BITS + 7) / 8 + 8; }
uint64_t pmc_codec_huffman_min_bytes(uint64_t n, unsigned span) { return head_bytes(span) + (n + 7) / 8; }

/* Code lengths from frequencies (two-queue Huffman over the sorted leaves). */
static unsigned build_lengths(const uint64_t freq_in[256], uint8_t len[256]) {
    uint64_t freq[256];
    memcpy(freq, freq_in, sizeof freq);
    for (;;) {
        int sym[256], n = 0;
        for (int s = 0; s < 256; s++)
            if (freq[s]) sym[n++] = s;
        memset(len, 0, 256);
        if (n == 1) {
            len[sym[0]] = 1;
            return 1;
        }
        /* Insertion sort by frequency (stable in the symbol). */
        for (int i = 1; i < n; i++) {
            int s = sym[i], j = i - 1;
            while (j >= 0 && freq[sym[j]] > freq[s]) {
                sym[j + 1] = sym[j];
                j--;
            }
            sym[j + 1] = s;
        }
        uint64_t weight[512];
        int parent[512];
        for (int i = 0; i < n; i++) weight[i] = freq[sym[i]];
        int leaf = 0, node = n, next = n; /* internal nodes are created in increasing weight order */
        for (int k = 0; k < n - 1; k++) {
            int pick[2];
            for (int m = 0; m < 2; m++) {
                if (leaf < n && (node >= next || weight[leaf] <= weight[node]))
                    pick[m] = leaf++;
                else
                    pick[m] = node++;
            }
            weight[next] = weight[pick[0]] + weight[pick[1]];
            parent[pick[0]] = parent[pick[1]] = next;
            next++;
        }
        int depth[512];
        depth[next - 1] = 0;
        for (int i = next - 2; i >= 0; i--) depth[i] = depth[parent[i]] + 1;
        unsigned maxlen = 0;
        for (int i = 0; i < n; i++) {
            len[sym[i]] = (uint8_t)(depth[i] > 15 ? 15 : depth[i]);
            if ((unsigned)depth[i] > maxlen) maxlen = (unsigned)depth[i];
        }
        if (maxlen <= MAX_BITS) return maxlen;
        /* Too deep: flatten the distribution and build again. */
        for (int s = 0; s < 256; s++)
            if (freq[s]) freq[s] = (freq[s] >> 1) | 1;
    }
}

/* Canonical codes, bit-reversed for LSB-first output. 0 when the lengths are not a valid prefix code. */
static int canonical_codes(const uint8_t len[256], uint16_t code[256]) {
    unsigned count[MAX_BITS + 1] = {0}, next[MAX_BITS + 2];
    for (int s = 0; s < 256; s++) {
        if (len[s] > MAX_BITS) return 0;
        count[len[s]]++;
    }
    count[0] = 0;
    /* Kraft: the lengths must not oversubscribe the code space. */
    uint32_t space = 0;
    for (unsigned b = 1; b <= MAX_BITS; b++) space += count[b] << (MAX_BITS - b);
    if (space > TABLE_SIZE) return 0;
    unsigned c = 0;
    for (unsigned b = 1; b <= MAX_BITS + 1; b++) {
        c = (c + count[b - 1]) << 1;
        next[b] = c;
    }
    for (int s = 0; s < 256; s++) {
        if (!len[s]) continue;
        unsigned v = next[len[s]]++, r = 0;
        for (unsigned b = 0; b < len[s]; b++) r |= ((v >> b) & 1u) << (len[s] - 1 - b);
        code[s] = (uint16_t)r;
    }
    return 1;
}

uint64_t pmc_codec_huffman_cost(const uint64_t freq[256]) {
    int distinct = 0, top = 0;
    for (int s = 0; s < 256; s++)
        if (freq[s]) {
            distinct++;
            top = s;
        }
    if (distinct <= 1) return 2;
    uint8_t len[256];
    build_lengths(freq, len);
    uint64_t bits = 0;
    for (int s = 0; s <= top; s++) bits += freq[s] * len[s];
    return head_bytes((unsigned)top + 1) + (bits + 7) / 8;
}

void pmc_codec_huffman_begin(pmc_huffman_encoder *e, const uint64_t freq[256], uint8_t *out) {
    int distinct = 0, only = 0;
    for (int s = 0; s < 256; s++)
        if (freq[s]) {
            distinct++;
            only = s;
        }
    e->out = out;
    if (distinct <= 1) { /* mode 1: the symbol, no stream */
        out[0] = 1;
        out[1] = (uint8_t)only;
        e->single = 1;
        e->w = (pmc_bitwriter){.p = out + 2};
        return;
    }
    e->single = 0;
    memset(e->code, 0, sizeof e->code);
    build_lengths(freq, e->len);
    canonical_codes(e->len, e->code);
    unsigned span = (unsigned)only + 1; /* the highest symbol present, plus one */
    out[0] = 0;
    out[1] = (uint8_t)span; /* 256 wraps to 0 */
    for (unsigned k = 0; k < (span + 1) / 2; k++)
        out[2 + k] = (uint8_t)(e->len[2 * k] | ((2 * k + 1 < 256 ? e->len[2 * k + 1] : 0) << 4));
    e->w = (pmc_bitwriter){.p = out + head_bytes(span)};
}

void pmc_codec_huffman_put(pmc_huffman_encoder *e, const uint8_t *in, uint64_t n, size_t stride) {
    if (e->single) return;
    const uint16_t *code = e->code;
    const uint8_t *len = e->len;
    uint8_t *p = e->w.p;
    uint64_t acc = e->w.acc;
    unsigned have = e->w.have;
    while (have >= 8) { /* whole bytes out: at most 7 bits held below */
        *p++ = (uint8_t)acc;
        acc >>= 8;
        have -= 8;
    }
    uint64_t i = 0;
    /* Four codes of at most 12 bits on top of at most 7 held bits fit 64: one unaligned 8-byte
     * store per four symbols (the block's bound leaves 8 bytes of room past the stream). */
    for (; i + 4 <= n; i += 4) {
        const uint8_t *q = in + i * stride;
        unsigned s0 = q[0], s1 = q[stride], s2 = q[2 * stride], s3 = q[3 * stride];
        acc |= (uint64_t)code[s0] << have;
        have += len[s0];
        acc |= (uint64_t)code[s1] << have;
        have += len[s1];
        acc |= (uint64_t)code[s2] << have;
        have += len[s2];
        acc |= (uint64_t)code[s3] << have;
        have += len[s3];
        memcpy(p, &acc, 8);
        p += have >> 3;
        acc >>= have & ~7u;
        have &= 7u;
    }
    for (; i < n; i++) {
        unsigned s = in[i * stride];
        acc |= (uint64_t)code[s] << have;
        have += len[s];
        if (have >= 8) {
            memcpy(p, &acc, 8);
            p += have >> 3;
            acc >>= have & ~7u;
            have &= 7u;
        }
    }
    e->w = (pmc_bitwriter){.p = p, .acc = acc, .have = have};
}

uint64_t pmc_codec_huffman_end(pmc_huffman_encoder *e) {
    if (e->single) return 2;
    uint8_t *stream = e->out + head_bytes(e->out[1] ? e->out[1] : 256);
    uint8_t *end = pmc_bw_finish(&e->w);
    uint32_t bytes = (uint32_t)(end - stream);
    memcpy(stream - 4, &bytes, 4);
    return (uint64_t)(end - e->out);
}

uint64_t pmc_codec_huffman_encode(const uint8_t *in, uint64_t n, size_t stride, uint8_t *out) {
    uint64_t freq[256] = {0};
    for (uint64_t i = 0; i < n; i++) freq[in[i * stride]]++;
    pmc_huffman_encoder e;
    pmc_codec_huffman_begin(&e, freq, out);
    pmc_codec_huffman_put(&e, in, n, stride);
    return pmc_codec_huffman_end(&e);
}

static int fail(char *msg, size_t msg_len, const char *what) {
    if (msg && msg_len) snprintf(msg, msg_len, "%s", what);
    return PMC_CODEC_ECORRUPT;
}

int pmc_codec_huffman_block_size(const uint8_t *in, uint64_t avail, uint64_t n, uint64_t *size, char *msg,
                                 size_t msg_len) {
    if (avail < 2) return fail(msg, msg_len, "truncated Huffman block");
    if (in[0] == 1) {
        *size = 2;
        return PMC_CODEC_OK;
    }
    if (in[0] != 0) return fail(msg, msg_len, "invalid Huffman block");
    unsigned span = in[1] ? in[1] : 256;
    uint64_t head = head_bytes(span);
    if (avail < head) return fail(msg, msg_len, "truncated Huffman block");
    uint32_t bytes;
    memcpy(&bytes, in + head - 4, 4);
    /* Codes take 1 to MAX_BITS bits each. */
    if ((uint64_t)bytes * 8 < n || (uint64_t)bytes > (n * MAX_BITS + 7) / 8) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "Huffman stream of %u bytes for %llu symbols", bytes, (unsigned long long)n);
        return PMC_CODEC_ECORRUPT;
    }
    if (head + (uint64_t)bytes > avail) return fail(msg, msg_len, "truncated Huffman block");
    *size = head + (uint64_t)bytes;
    return PMC_CODEC_OK;
}

/* Tops the bit buffer up to 56 bits or more from 8 readable bytes at *p (whole bytes taken). */
static inline void refill8(const uint8_t **p, uint64_t *acc, unsigned *have) {
    uint64_t word;
    memcpy(&word, *p, 8);
    *acc |= word << *have;
    *p += (63 - *have) >> 3;
    *have |= 56;
}

int pmc_codec_huffman_decode(const uint8_t *in, uint64_t avail, uint64_t n, uint8_t *out, size_t stride,
                             uint64_t *used, char *msg, size_t msg_len) {
    if (avail < 2) return fail(msg, msg_len, "truncated Huffman block");
    if (in[0] == 1) {
        for (uint64_t i = 0; i < n; i++) out[i * stride] = in[1];
        *used = 2;
        return PMC_CODEC_OK;
    }
    if (in[0] != 0) return fail(msg, msg_len, "unknown Huffman block mode");
    unsigned span = in[1] ? in[1] : 256;
    uint64_t head = head_bytes(span);
    if (avail < head) return fail(msg, msg_len, "truncated Huffman code lengths");
    uint8_t len[256] = {0};
    for (unsigned k = 0; k < (span + 1) / 2; k++) {
        len[2 * k] = in[2 + k] & 0x0F;
        if (2 * k + 1 < span) len[2 * k + 1] = in[2 + k] >> 4;
        else if (in[2 + k] >> 4) return fail(msg, msg_len, "Huffman code length past the span");
    }
    uint16_t code[256] = {0};
    if (!canonical_codes(len, code)) return fail(msg, msg_len, "invalid Huffman code lengths");
    uint32_t bytes;
    memcpy(&bytes, in + head - 4, 4);
    if (bytes > avail - head) return fail(msg, msg_len, "Huffman stream longer than the buffer");
    /* A table of 2^(longest code) entries: small alphabets build a small one. */
    unsigned bits = 1;
    for (int s = 0; s < 256; s++)
        if (len[s] > bits) bits = len[s];
    const unsigned size = 1u << bits, mask = size - 1;
    uint16_t table[TABLE_SIZE];
    memset(table, 0, size * sizeof table[0]);
    for (int s = 0; s < 256; s++) {
        if (!len[s]) continue;
        for (unsigned fill = code[s]; fill < size; fill += 1u << len[s]) table[fill] = (uint16_t)((s << 4) | len[s]);
    }
    const uint8_t *p = in + head, *end = p + bytes;
    uint64_t acc = 0, consumed = 0, i = 0;
    unsigned have = 0, bad = 0;
    /* Long blocks: a second table giving, for each MULTI_BITS-bit window, the whole codes it
     * starts with (up to four symbols) and their total length, so that the common short codes
     * come several to a lookup (a window starting with a longer code has none: the first table
     * decodes it). Each window holds four lookups after a refill (4 x 12 bits), each lookup
     * up to four symbols: 16 symbols of room. */
    if (n >= MULTI_MIN) {
        const unsigned mbits = bits < MULTI_BITS ? bits : MULTI_BITS, msize = 1u << mbits, mmask = msize - 1;
        uint64_t multi[1u << MULTI_BITS]; /* symbols in bits 0-31, count in 32-34, length in 40-47 */
        for (unsigned w = 0; w < msize; w++) {
            uint64_t entry = 0;
            unsigned taken = 0, count = 0; /* bits and symbols of the window decoded */
            while (count < 4) {
                uint16_t t = table[(w >> taken) & mask];
                unsigned l = t & 15u;
                if (!t || l > mbits - taken) break; /* no code, or one that runs past the window */
                entry |= (uint64_t)(t >> 4) << (8 * count);
                taken += l;
                count++;
            }
            multi[w] = entry | (uint64_t)count << 32 | (uint64_t)taken << 40;
        }
        while (i + 16 <= n && end - p >= 8) {
            refill8(&p, &acc, &have);
            for (unsigned j = 0; j < 4; j++) {
                uint64_t m = multi[acc & mmask];
                unsigned count = (unsigned)(m >> 32) & 7u, l = (unsigned)(m >> 40) & 0xFFu;
                if (count) {
                    uint8_t *o = out + i * stride;
                    o[0] = (uint8_t)m;
                    o[stride] = (uint8_t)(m >> 8);
                    o[2 * stride] = (uint8_t)(m >> 16);
                    o[3 * stride] = (uint8_t)(m >> 24);
                    i += count;
                } else {
                    uint16_t e = table[acc & mask];
                    l = e & 15u;
                    bad |= !e;
                    out[i * stride] = (uint8_t)(e >> 4);
                    i++;
                }
                acc >>= l;
                have -= l;
                consumed += l;
            }
            if (bad) return fail(msg, msg_len, "invalid Huffman code in the stream");
        }
    }
    /* Four symbols per refill while 8 bytes of stream are left: a refill leaves at least 56
     * bits, four codes take at most 48. A code outside the table (entry 0, length 0) is noted
     * and reported after the four. */
    for (; i + 4 <= n && end - p >= 8; i += 4) {
        refill8(&p, &acc, &have);
        for (unsigned j = 0; j < 4; j++) {
            uint16_t e = table[acc & mask];
            unsigned l = e & 15u;
            bad |= !e;
            out[(i + j) * stride] = (uint8_t)(e >> 4);
            acc >>= l;
            have -= l;
            consumed += l;
        }
        if (bad) return fail(msg, msg_len, "invalid Huffman code in the stream");
    }
    for (; i < n; i++) {
        if (have < MAX_BITS) {
            if (end - p >= 8) {
                refill8(&p, &acc, &have);
            } else {
                while (have <= 56) {
                    acc |= (uint64_t)(p < end ? *p : 0) << have;
                    p++;
                    have += 8;
                }
            }
        }
        uint16_t e = table[acc & mask];
        if (!e) return fail(msg, msg_len, "invalid Huffman code in the stream");
        unsigned l = e & 15u;
        out[i * stride] = (uint8_t)(e >> 4);
        acc >>= l;
        have -= l;
        consumed += l;
    }
    if (consumed > (uint64_t)bytes * 8) return fail(msg, msg_len, "Huffman stream ends early");
    if ((consumed + 7) / 8 != bytes) return fail(msg, msg_len, "Huffman stream has trailing bytes");
    *used = head + (uint64_t)bytes;
    return PMC_CODEC_OK;
}
