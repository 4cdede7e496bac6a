/* Fixed-width bit packing, least significant bit first. */
#include <string.h>

#include "codec_internal.h"

uint64_t pmc_codec_packed_bytes(uint64_t n, unsigned bits) { return (n * bits + 7) / 8; }

unsigned pmc_codec_bits_for(uint64_t max_value) {
    unsigned b = 1;
    while (b < 64 && (max_value >> b)) b++;
    return b;
}

void pmc_codec_pack32(const uint32_t *values, uint64_t n, unsigned bits, uint8_t *out) {
    pmc_bitwriter w = {.p = out};
    uint64_t mask = (bits >= 32) ? 0xFFFFFFFFull : ((1ull << bits) - 1);
    for (uint64_t i = 0; i < n; i++) pmc_bw_put(&w, (uint64_t)values[i] & mask, bits);
    pmc_bw_finish(&w);
}

void pmc_codec_pack(const uint16_t *values, uint64_t n, unsigned bits, uint8_t *out) {
    pmc_bitwriter w = {.p = out};
    uint64_t mask = (1ull << bits) - 1;
    for (uint64_t i = 0; i < n; i++) pmc_bw_put(&w, (uint64_t)values[i] & mask, bits);
    pmc_bw_finish(&w);
}

void pmc_codec_unpack32(const uint8_t *in, uint64_t n, unsigned bits, uint32_t *out) {
    uint64_t total = pmc_codec_packed_bytes(n, bits), at = 0, acc = 0;
    unsigned have = 0;
    uint64_t mask = (bits >= 32) ? 0xFFFFFFFFull : ((1ull << bits) - 1);
    for (uint64_t i = 0; i < n; i++) {
        while (have < bits) {
            acc |= (uint64_t)(at < total ? in[at] : 0) << have;
            at++;
            have += 8;
        }
        out[i] = (uint32_t)(acc & mask);
        acc >>= bits;
        have -= bits;
    }
}

void pmc_codec_unpack(const uint8_t *in, uint64_t n, unsigned bits, uint16_t *out) {
    uint64_t total = pmc_codec_packed_bytes(n, bits), at = 0, acc = 0;
    unsigned have = 0;
    uint64_t mask = (1ull << bits) - 1;
    for (uint64_t i = 0; i < n; i++) {
        if (have < bits) {
            if (at + 4 <= total) {
                uint32_t w;
                memcpy(&w, in + at, 4);
                acc |= (uint64_t)w << have;
                at += 4;
                have += 32;
            } else {
                while (have < bits) {
                    acc |= (uint64_t)(at < total ? in[at] : 0) << have;
                    at++;
                    have += 8;
                }
            }
        }
        out[i] = (uint16_t)(acc & mask);
        acc >>= bits;
        have -= bits;
    }
}
