/* pymcoll FTAR (fault-tolerant allreduce): public API of pymcoll._ftar.
 *
 * No MPI here: replicas talk TCP. The wire: length-prefixed, versioned
 * binary frames, bounds checked on decode, with an optional HMAC-SHA256 over
 * header and payload, and the challenge-response that authenticates a
 * connection with the job token without sending it. On it: the coordinator
 * (membership, quorum, epochs, commit decisions; never tensor data) and the
 * member (ring allreduce between replicas, votes, state catch-up).
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
    PMC_FTAR_DONOR,            /* member asks for (coordinator names) a state donor */
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
 * nonces and the client's identity; both derive the connection's MAC keys,
 * one per direction (so a frame reflected back to its sender fails). */
enum { PMC_FTAR_ROLE_CLIENT = 0, PMC_FTAR_ROLE_SERVER = 1 };
enum { PMC_FTAR_CLIENT_TO_SERVER = 0, PMC_FTAR_SERVER_TO_CLIENT = 1 };
void pmc_ftar_auth_proof(const uint8_t *token, size_t tokenlen, int role, const uint8_t *nonce_server,
                         const uint8_t *nonce_client, const char *identity, uint8_t *out);
void pmc_ftar_session_key(const uint8_t *token, size_t tokenlen, const uint8_t *nonce_server,
                          const uint8_t *nonce_client, int direction, uint8_t *out);
/* Constant-time comparison of two 32-byte proofs or MACs (1 if equal). */
int pmc_ftar_proof_equal(const uint8_t *a, const uint8_t *b);
/* Fills out with len bytes from the kernel's random source; 0 on success. */
int pmc_ftar_random(void *out, size_t len);

/* The primitives, for tests against other implementations. */
void pmc_ftar_sha256(const void *data, size_t len, uint8_t *out);
void pmc_ftar_hmac(const uint8_t *key, size_t keylen, const void *data, size_t len, uint8_t *out);


/* ---- Coordinator and members ---------------------------------------- */

/* Status of a member operation (pymcoll.ftar.Status names them). */
enum {
    PMC_FTAR_ST_OK = 0,
    PMC_FTAR_ST_ABORTED = 1,           /* a member failed: retry in the next epoch, or skip */
    PMC_FTAR_ST_TIMEOUT = 2,           /* the operation's deadline passed */
    PMC_FTAR_ST_FENCED = 3,            /* evicted by the coordinator: rejoin and catch up */
    PMC_FTAR_ST_TOO_FEW = 4,           /* no quorum of min_replicas in time */
    PMC_FTAR_ST_COORDINATOR_LOST = 5,  /* no decision: the step is not applied */
    PMC_FTAR_ST_ERROR = 6              /* bad argument or local failure (see the message) */
};

enum {
    PMC_FTAR_FLOAT32 = 0,
    PMC_FTAR_FLOAT64 = 1,
    PMC_FTAR_BFLOAT16 = 2,             /* 16-bit types accumulate in float32 */
    PMC_FTAR_FLOAT16 = 3,
    PMC_FTAR_INT32 = 4,
    PMC_FTAR_INT64 = 5,
    PMC_FTAR_DTYPE_COUNT
};

enum { PMC_FTAR_SUM = 0, PMC_FTAR_MAX = 1, PMC_FTAR_MIN = 2, PMC_FTAR_OP_COUNT };

enum {
    PMC_FTAR_NO_MEMBER = -1,
    PMC_FTAR_ADDR_BYTES = 128,         /* "HOST:PORT" with its terminator */
    PMC_FTAR_MESSAGE_BYTES = 256,
    PMC_FTAR_DEFAULT_HEARTBEAT_MS = 100,
    PMC_FTAR_DEFAULT_EVICT_MS = 2000,
    PMC_FTAR_DEFAULT_JOIN_TIMEOUT_MS = 1000,
    PMC_FTAR_DEFAULT_CHUNK_BYTES = 262144
};

typedef struct pmc_ftar_coord pmc_ftar_coord;

typedef struct pmc_ftar_coord_config {
    const char *bind;                  /* "HOST:PORT"; port 0 picks a free one */
    const uint8_t *token;
    size_t tokenlen;
    uint32_t min_replicas;             /* a quorum after the join timeout needs this many */
    uint32_t heartbeat_ms;             /* members' and the coordinator's heartbeat period */
    uint32_t evict_ms;                 /* a member silent this long is evicted */
    uint32_t join_timeout_ms;          /* how long a quorum waits for missing previous members */
    int log_fd;                        /* one line per event (-1: none) */
} pmc_ftar_coord_config;

/* Binds and listens; *addr receives the bound "HOST:PORT". msg (may be NULL)
 * receives the reason of a failure. */
int pmc_ftar_coord_create(const pmc_ftar_coord_config *cfg, pmc_ftar_coord **out, char *addr, size_t addrcap,
                          char *msg, size_t msgcap);
/* Serves until pmc_ftar_coord_stop (any thread). 0 when stopped. */
int pmc_ftar_coord_run(pmc_ftar_coord *c);
void pmc_ftar_coord_stop(pmc_ftar_coord *c);
void pmc_ftar_coord_destroy(pmc_ftar_coord *c);

typedef struct pmc_ftar_member pmc_ftar_member;

typedef struct pmc_ftar_member_config {
    const char *coordinator;           /* "HOST:PORT" */
    const char *replica_id;            /* unique per replica, 1..63 bytes of [A-Za-z0-9._-] */
    const uint8_t *token;
    size_t tokenlen;
    const char *bind_host;             /* where this member listens for peers (NULL: 127.0.0.1) */
    uint32_t streams;                  /* TCP connections to each neighbour (>= 1) */
    uint32_t chunk_bytes;              /* pipelining unit of the ring */
    int integrity;                     /* MAC on data frames too */
    uint32_t timeout_ms;               /* deadline of each operation */
    int64_t committed_step;            /* last step whose update this state holds (-1: initial state) */
    const char *fault;                 /* PYMCOLL_FTAR_FAULT spec, or NULL */
    int log_fd;                        /* -1: none */
} pmc_ftar_member_config;

typedef struct pmc_ftar_step_info {
    int status;                        /* PMC_FTAR_ST_* */
    uint64_t epoch;
    int64_t step;                      /* the group's step (a joiner adopts it) */
    uint32_t n_members;
    uint32_t index;                    /* this member's place in the ring */
    int healing;                       /* this member catches up: it contributes zeros */
    uint32_t n_healing;                /* members catching up in this epoch */
    int serve_state;                   /* publish the state this step: someone catches up */
} pmc_ftar_step_info;

typedef struct pmc_ftar_result {
    int status;                        /* PMC_FTAR_ST_* */
    uint32_t n_contrib;                /* replicas whose input is in the sum */
    uint64_t epoch;
} pmc_ftar_result;

int pmc_ftar_member_create(const pmc_ftar_member_config *cfg, pmc_ftar_member **out, char *msg, size_t msgcap);
/* Waits for the quorum of `step`. Returns info->status. */
int pmc_ftar_member_begin_step(pmc_ftar_member *m, int64_t step, pmc_ftar_step_info *info);
/* out = sum (max, min) of every contributing member's in; in is untouched. */
int pmc_ftar_member_allreduce(pmc_ftar_member *m, const void *in, void *out, size_t count, int dtype, int op,
                              int contribute, pmc_ftar_result *res);
/* Votes for (current epoch, step); PMC_FTAR_ST_OK only on COMMIT. */
int pmc_ftar_member_commit(pmc_ftar_member *m, int64_t step, int ok);
/* Keeps a copy of the state after `step` for members that catch up. */
int pmc_ftar_member_publish_state(pmc_ftar_member *m, int64_t step, const void *buf, size_t len);
/* Fetches the newest state of step >= min_step from the assigned donor (another
 * on failure). *buf is malloc'ed: release it with pmc_ftar_free. */
int pmc_ftar_member_fetch_state(pmc_ftar_member *m, int64_t min_step, int64_t *step, void **buf, size_t *len);
/* The reason of the last failed call on m (fetch_state, which may run on
 * another thread, keeps its own: pmc_ftar_member_fetch_message). */
const char *pmc_ftar_member_message(pmc_ftar_member *m);
const char *pmc_ftar_member_fetch_message(pmc_ftar_member *m);
int64_t pmc_ftar_member_committed_step(pmc_ftar_member *m);
/* A member that caught up (state loaded, missed updates replayed) says so;
 * until then commits while healing leave its committed step behind. */
void pmc_ftar_member_set_committed_step(pmc_ftar_member *m, int64_t step);
void pmc_ftar_member_destroy(pmc_ftar_member *m);
void pmc_ftar_free(void *p);
const char *pmc_ftar_status_name(int status);

#ifdef __cplusplus
}
#endif

#endif
