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

uint64_t pmc_codec_huffman_encode(const uint8_t *in, uint64_t n, size_t stride, uint8_t *out) {
    uint64_t freq[256] = {0};
    for (uint64_t i = 0; i < n; i++) freq[in[i * stride]]++;
    int distinct = 0, only = 0;
    for (int s = 0; s < 256; s++)
        if (freq[s]) {
            distinct++;
            only = s;
        }
    if (distinct <= 1) {
        out[0] = 1;
        out[1] = (uint8_t)only;
        return 2;
    }
    uint8_t len[256];
    uint16_t code[256] = {0};
    build_lengths(freq, len);
    canonical_codes(len, code);
    unsigned span = (unsigned)only + 1; /* the highest symbol present, plus one */
    out[0] = 0;
    out[1] = (uint8_t)span; /* 256 wraps to 0 */
    for (unsigned k = 0; k < (span + 1) / 2; k++)
        out[2 + k] = (uint8_t)(len[2 * k] | ((2 * k + 1 < 256 ? len[2 * k + 1] : 0) << 4));
    uint8_t *stream = out + head_bytes(span);
    pmc_bitwriter w = {.p = stream};
    for (uint64_t i = 0; i < n; i++) {
        uint8_t s = in[i * stride];
        pmc_bw_put(&w, code[s], len[s]);
    }
    uint8_t *end = pmc_bw_finish(&w);
    uint32_t bytes = (uint32_t)(end - stream);
    memcpy(stream - 4, &bytes, 4);
    return (uint64_t)(end - out);
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
    uint64_t acc = 0, consumed = 0;
    unsigned have = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (have < MAX_BITS) {
            if (end - p >= 8) {
                uint64_t word;
                memcpy(&word, p, 8);
                acc |= word << have;
                p += (63 - have) >> 3;
                have |= 56;
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
