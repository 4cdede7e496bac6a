/* pymcoll codec: error-bounded lossy compression of 2-D embedding tensors.
 *
 * No MPI, no threads, no global state: scratch memory lives in a context
 * (one per thread). A compressed buffer is self-describing: a 64-byte
 * header (magic, version, dtype, shape, bound, stage, sizes, CRCs of the
 * header and of the payload) and the payload; every field is checked on
 * decode, and a corrupt or truncated buffer gives PMC_CODEC_ECORRUPT with
 * a message, never a read out of bounds.
 *
 * Guarantee: for every element, |x - decoded| <= bound (the absolute bound:
 * the given one, or relative x (max - min) of the finite values), checked in
 * double precision against the value the decoder will produce in the
 * tensor's dtype. Elements that cannot meet it with a code (NaN, infinities,
 * codes beyond 16 bits, a bound below the dtype's resolution) are stored
 * exactly.
 */
#ifndef PYMCOLL_CODEC_H
#define PYMCOLL_CODEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Constants are enums, so that the Python binding sees them too. */
enum {
    PMC_CODEC_VERSION = 2,
    PMC_CODEC_HEADER_BYTES = 64,
    PMC_CODEC_MESSAGE_BYTES = 256,
};

/* Element types of the input (and of the decoded output). */
enum { PMC_CODEC_F32 = 0, PMC_CODEC_BF16 = 1, PMC_CODEC_F16 = 2 };

/* Lossless stages. AUTO picks the smaller of PACKED and HUFFMAN (or EXACT
 * when codes do not pay); EXACT stores the distinct rows as they are. */
enum {
    PMC_CODEC_STAGE_AUTO = -1,
    PMC_CODEC_STAGE_EXACT = 0,
    PMC_CODEC_STAGE_PACKED = 1,
    PMC_CODEC_STAGE_HUFFMAN = 2,
};

/* Header flags. */
enum {
    PMC_CODEC_FLAG_DEDUP = 1,    /* repeated rows stored once, with a row map */
    PMC_CODEC_FLAG_WIDE = 2,     /* 16-bit codes (else 8-bit) */
    PMC_CODEC_FLAG_RELATIVE = 4, /* the requested bound was relative to the value range */
};

/* Status codes. */
enum {
    PMC_CODEC_OK = 0,
    PMC_CODEC_EINVAL = 1,   /* a bad argument */
    PMC_CODEC_ESPACE = 2,   /* the output buffer is too small */
    PMC_CODEC_ECORRUPT = 3, /* not a valid compressed buffer */
    PMC_CODEC_ENOMEM = 4,
    PMC_CODEC_EVERSION = 5, /* written by another format version */
};

typedef struct pmc_codec_ctx pmc_codec_ctx;

typedef struct {
    uint32_t version;
    uint32_t dtype;
    int32_t stage;
    uint32_t flags;
    uint64_t rows;
    uint32_t cols;
    uint32_t unique_rows;
    double bound;     /* the absolute bound applied (0 for EXACT) */
    double requested; /* the bound as given (relative or absolute, see flags) */
    uint32_t exceptions;
    uint32_t code_bits; /* bits per code in PACKED; 0 otherwise */
    uint64_t payload_bytes;
} pmc_codec_header;

pmc_codec_ctx *pmc_codec_ctx_new(void);
void pmc_codec_ctx_free(pmc_codec_ctx *ctx);

/* Element size in bytes of a dtype (0 for an unknown one). */
size_t pmc_codec_dtype_size(int dtype);

/* The most bytes compressing rows x cols elements can take (header included). */
uint64_t pmc_codec_max_bytes(uint64_t rows, uint32_t cols, int dtype);

/* Compresses rows x cols elements of `dtype` at `in` (row-major) with error
 * bound `bound` (relative != 0: times the value range) into out[0..cap);
 * *written gets the size. */
int pmc_codec_compress(pmc_codec_ctx *ctx, const void *in, uint64_t rows, uint32_t cols, int dtype, double bound,
                       int relative, int stage, void *out, uint64_t cap, uint64_t *written, char *msg,
                       size_t msg_len);

/* Reads and checks the header of buf[0..len) (not the payload). */
int pmc_codec_read_header(const void *buf, uint64_t len, pmc_codec_header *header, char *msg, size_t msg_len);

/* Decodes buf[0..len) into out, which holds out_bytes (rows x cols x the
 * dtype's size, from the header). */
int pmc_codec_decompress(pmc_codec_ctx *ctx, const void *buf, uint64_t len, void *out, uint64_t out_bytes,
                         char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif

#endif
