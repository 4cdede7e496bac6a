/* FTAR frames: little-endian header, payload, optional HMAC-SHA256 over
 * both. Decoding checks every field before it trusts a length. */
#include <string.h>

#include "pymcoll_ftar.h"
#include "ring.h"
#include "sha256.h"

#define MAGIC UINT32_C(0x54464d50) /* "PMFT" in the stream */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
    return v;
}

size_t pmc_ftar_frame_size(uint32_t length, int mac)
{
    return PMC_FTAR_HEADER_BYTES + (size_t)length + (mac ? PMC_FTAR_MAC_BYTES : 0);
}

static void frame_mac(const uint8_t *key, size_t keylen, const uint8_t *frame, size_t bytes, uint8_t *out)
{
    pmc_hmac m;
    pmc_hmac_init(&m, key, keylen);
    pmc_hmac_update(&m, frame, bytes);
    pmc_hmac_final(&m, out);
}

int pmc_ftar_frame_encode(const pmc_ftar_header *h, const void *payload, uint32_t length, const uint8_t *key,
                          size_t keylen, void *out, size_t cap, size_t *written)
{
    if (h == NULL || out == NULL || written == NULL || (length > 0 && payload == NULL)) return PMC_FTAR_BAD_ARG;
    if (h->type == 0 || h->type >= PMC_FTAR_TYPE_COUNT) return PMC_FTAR_BAD_TYPE;
    const int mac = key != NULL;
    const size_t need = pmc_ftar_frame_size(length, mac);
    *written = 0;
    if (cap < need) return PMC_FTAR_NO_ROOM;
    uint8_t *p = out;
    pmc_ftar_header wire = *h;
    wire.length = length;
    wire.flags = (uint16_t)((h->flags & ~PMC_FTAR_FLAG_MAC) | (mac ? PMC_FTAR_FLAG_MAC : 0));
    pmc_ftar_header_encode(&wire, p);
    if (length > 0) memmove(p + PMC_FTAR_HEADER_BYTES, payload, length);
    if (mac) frame_mac(key, keylen, p, PMC_FTAR_HEADER_BYTES + (size_t)length, p + PMC_FTAR_HEADER_BYTES + length);
    *written = need;
    return PMC_FTAR_OK;
}

void pmc_ftar_header_encode(const pmc_ftar_header *h, uint8_t out[PMC_FTAR_HEADER_BYTES])
{
    put32(out, MAGIC);
    out[4] = PMC_FTAR_VERSION;
    out[5] = h->type;
    out[6] = (uint8_t)h->flags;
    out[7] = (uint8_t)(h->flags >> 8);
    put32(out + 8, h->length);
    put32(out + 12, h->sender);
    put64(out + 16, h->epoch);
    put64(out + 24, h->step);
    put64(out + 32, h->seq);
}

int pmc_ftar_frame_decode(const void *buf, size_t len, uint32_t max_payload, const uint8_t *key, size_t keylen,
                          int require_mac, pmc_ftar_header *h, size_t *frame_bytes)
{
    if (buf == NULL || h == NULL || frame_bytes == NULL) return PMC_FTAR_BAD_ARG;
    const uint8_t *p = buf;
    *frame_bytes = PMC_FTAR_HEADER_BYTES;
    /* The magic and version are judged as soon as their bytes arrive: a
     * stranger's stream is refused without waiting for a whole header. */
    for (size_t i = 0; i < 4 && i < len; ++i)
        if (p[i] != (uint8_t)(MAGIC >> (8 * i))) return PMC_FTAR_BAD_MAGIC;
    if (len > 4 && p[4] != PMC_FTAR_VERSION) return PMC_FTAR_BAD_VERSION;
    if (len < PMC_FTAR_HEADER_BYTES) return PMC_FTAR_NEED_MORE;
    memset(h, 0, sizeof(*h));
    h->version = p[4];
    h->type = p[5];
    h->flags = (uint16_t)(p[6] | p[7] << 8);
    h->length = get32(p + 8);
    h->sender = get32(p + 12);
    h->epoch = get64(p + 16);
    h->step = get64(p + 24);
    h->seq = get64(p + 32);
    if (h->type == 0 || h->type >= PMC_FTAR_TYPE_COUNT) return PMC_FTAR_BAD_TYPE;
    if (h->flags & ~PMC_FTAR_FLAG_MAC) return PMC_FTAR_BAD_TYPE; /* no other flag exists in version 1 */
    if (h->length > max_payload) return PMC_FTAR_TOO_LONG;
    const int mac = (h->flags & PMC_FTAR_FLAG_MAC) != 0;
    if (require_mac && !mac) return PMC_FTAR_BAD_MAC;
    const size_t need = pmc_ftar_frame_size(h->length, mac);
    *frame_bytes = need;
    if (len < need) return PMC_FTAR_NEED_MORE;
    if (mac && key != NULL) {
        uint8_t want[PMC_FTAR_MAC_BYTES];
        frame_mac(key, keylen, p, PMC_FTAR_HEADER_BYTES + (size_t)h->length, want);
        if (!pmc_equal_ct(want, p + PMC_FTAR_HEADER_BYTES + h->length, PMC_FTAR_MAC_BYTES)) return PMC_FTAR_BAD_MAC;
    }
    return PMC_FTAR_OK;
}

const char *pmc_ftar_strerror(int code)
{
    switch (code) {
    case PMC_FTAR_OK: return "ok";
    case PMC_FTAR_NEED_MORE: return "incomplete frame";
    case PMC_FTAR_BAD_MAGIC: return "not a pymcoll FTAR frame (bad magic)";
    case PMC_FTAR_BAD_VERSION: return "unsupported FTAR frame version";
    case PMC_FTAR_BAD_TYPE: return "unknown frame type or flags";
    case PMC_FTAR_TOO_LONG: return "frame longer than the receiver accepts";
    case PMC_FTAR_BAD_MAC: return "frame MAC missing or wrong";
    case PMC_FTAR_NO_ROOM: return "output buffer too small for the frame";
    case PMC_FTAR_BAD_ARG: return "invalid argument";
    default: return "unknown FTAR status";
    }
}
