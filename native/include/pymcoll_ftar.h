/* pymcoll FTAR (fault-tolerant allreduce): public API of pymcoll._ftar.
 *
 * No MPI here: replicas talk TCP. This part is the wire: length-prefixed,
 * versioned binary frames, bounds checked on decode, with an optional
 * HMAC-SHA256 over header and payload; and the challenge-response that
 * authenticates a connection with the job token without sending it.
 */
#ifndef PYMCOLL_FTAR_H
#define PYMCOLL_FTAR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Results of frame encoding and decoding. */
enum {
    PMC_FTAR_OK = 0,
    PMC_FTAR_NEED_MORE = 1,    /* decode: not all of the frame is there yet */
    PMC_FTAR_BAD_MAGIC = 2,
    PMC_FTAR_BAD_VERSION = 3,
    PMC_FTAR_BAD_TYPE = 4,
    PMC_FTAR_TOO_LONG = 5,     /* payload longer than the receiver accepts */
    PMC_FTAR_BAD_MAC = 6,      /* MAC missing where required, or wrong */
    PMC_FTAR_NO_ROOM = 7,      /* encode: output buffer too small */
    PMC_FTAR_BAD_ARG = 8
};

/* Frame types. */
enum {
    PMC_FTAR_HELLO = 1,        /* server -> client: challenge nonce */
    PMC_FTAR_AUTH,             /* client -> server: nonce, identity, proof */
    PMC_FTAR_AUTH_OK,          /* server -> client: the server's proof */
    PMC_FTAR_HEARTBEAT,
    PMC_FTAR_JOIN,
    PMC_FTAR_QUORUM,
    PMC_FTAR_VOTE,
    PMC_FTAR_COMMIT,
    PMC_FTAR_ABORT,
    PMC_FTAR_DATA,
    PMC_FTAR_STATE,
    PMC_FTAR_TYPE_COUNT
};

/* Sizes of the wire (an enum, so that the Python binding sees them too). */
enum {
    PMC_FTAR_VERSION = 1,
    PMC_FTAR_HEADER_BYTES = 40,
    PMC_FTAR_MAC_BYTES = 32,
    PMC_FTAR_NONCE_BYTES = 32,
    PMC_FTAR_FLAG_MAC = 1
};

typedef struct pmc_ftar_header {
    uint8_t version;
    uint8_t type;
    uint16_t flags;            /* PMC_FTAR_FLAG_MAC: a MAC follows the payload */
    uint32_t length;           /* payload bytes */
    uint32_t sender;           /* member index (0xFFFFFFFF: coordinator) */
    uint64_t epoch;
    uint64_t step;
    uint64_t seq;              /* per connection and direction: a replayed frame is out of order */
} pmc_ftar_header;

/* Bytes of a frame with `length` payload bytes (and a MAC). */
size_t pmc_ftar_frame_size(uint32_t length, int mac);
/* Writes header h (version and length filled in here), payload and, with a
 * key, the MAC into out. */
int pmc_ftar_frame_encode(const pmc_ftar_header *h, const void *payload, uint32_t length, const uint8_t *key,
                          size_t keylen, void *out, size_t cap, size_t *written);
/* Reads one frame from buf[0..len). PMC_FTAR_OK: *h, the payload at
 * buf + PMC_FTAR_HEADER_BYTES, *frame_bytes consumed. NEED_MORE:
 * *frame_bytes is what the whole frame needs (or the header, if even that is
 * incomplete). require_mac: a frame without a MAC is refused; with a key, a
 * MAC present is checked. A bad frame never reads past len. */
int pmc_ftar_frame_decode(const void *buf, size_t len, uint32_t max_payload, const uint8_t *key, size_t keylen,
                          int require_mac, pmc_ftar_header *h, size_t *frame_bytes);
const char *pmc_ftar_strerror(int code);

/* Challenge-response: each side proves it holds the token for the two
 * nonces and the client's identity; both derive the connection's MAC key. */
enum { PMC_FTAR_ROLE_CLIENT = 0, PMC_FTAR_ROLE_SERVER = 1 };
void pmc_ftar_auth_proof(const uint8_t *token, size_t tokenlen, int role, const uint8_t *nonce_server,
                         const uint8_t *nonce_client, const char *identity, uint8_t *out);
void pmc_ftar_session_key(const uint8_t *token, size_t tokenlen, const uint8_t *nonce_server,
                          const uint8_t *nonce_client, uint8_t *out);
/* Constant-time comparison of two 32-byte proofs or MACs (1 if equal). */
int pmc_ftar_proof_equal(const uint8_t *a, const uint8_t *b);
/* Fills out with len bytes from the kernel's random source; 0 on success. */
int pmc_ftar_random(void *out, size_t len);

/* The primitives, for tests against other implementations. */
void pmc_ftar_sha256(const void *data, size_t len, uint8_t *out);
void pmc_ftar_hmac(const uint8_t *key, size_t keylen, const void *data, size_t len, uint8_t *out);

#ifdef __cplusplus
}
#endif

#endif
