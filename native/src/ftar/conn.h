/* Authenticated TCP connections of FTAR: addresses, listening, connecting,
 * the challenge-response handshake and MAC'ed control frames. Internal. */
#ifndef PMC_FTAR_CONN_H
#define PMC_FTAR_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "pymcoll_ftar.h"

/* Outcomes of connection calls. */
enum {
    PMC_IO_OK = 0,
    PMC_IO_AGAIN,          /* no complete frame buffered yet */
    PMC_IO_CLOSED,         /* the peer closed or reset the connection */
    PMC_IO_TIMEOUT,
    PMC_IO_ERROR,          /* a system call failed (errno kept in the message) */
    PMC_IO_BAD_FRAME,      /* decoding refused the bytes */
    PMC_IO_AUTH,           /* the peer failed authentication */
    PMC_IO_INTERRUPTED     /* the interrupt descriptor became readable */
};

enum {
    PMC_CONN_MAX_CONTROL = 65536,     /* control payloads are small */
    PMC_CONN_IDENTITY_BYTES = 160
};

typedef struct pmc_conn {
    int fd;
    int authenticated;
    uint8_t key_tx[32], key_rx[32];   /* session keys, one per direction: MACs after the handshake */
    uint8_t nonce_server[PMC_FTAR_NONCE_BYTES];
    uint64_t send_seq, recv_seq;      /* replay and reordering checks */
    uint32_t sender;                  /* our sender field in headers */
    char identity[PMC_CONN_IDENTITY_BYTES]; /* the client's identity, as proven */
    uint8_t *buf;                     /* received bytes not yet consumed */
    size_t len, cap, consumed;
    int64_t last_recv_ms;             /* when bytes last arrived */
} pmc_conn;

int64_t pmc_ftar_now_ms(void);

/* "HOST:PORT" (HOST a name or an IPv4/IPv6 literal, [v6]:port too). */
int pmc_addr_resolve(const char *hostport, void *sockaddr_out, uint32_t *len_out, char *msg, size_t msgcap);
/* Non-blocking listening socket; *bound gets "HOST:PORT" with the real port. */
int pmc_listen(const char *hostport, int *fd, char *bound, size_t boundcap, char *msg, size_t msgcap);
/* Blocking-with-deadline connect; returns a non-blocking socket with TCP_NODELAY. */
int pmc_connect(const char *hostport, int64_t deadline_ms, int *fd, char *msg, size_t msgcap);
/* TCP_NODELAY, non-blocking, close-on-exec; larger buffers when `bulk`. */
void pmc_socket_tune(int fd, int bulk);

void pmc_conn_init(pmc_conn *c, int fd, uint32_t sender);
void pmc_conn_close(pmc_conn *c);

/* Client side of the handshake, blocking until the deadline. */
int pmc_conn_handshake_client(pmc_conn *c, const uint8_t *token, size_t tokenlen, const char *identity,
                              int64_t deadline_ms);
/* Server side in two halves, so an event loop can run it: hello sends the
 * challenge; accept checks the client's AUTH frame and answers AUTH_OK. */
int pmc_conn_server_hello(pmc_conn *c, const uint8_t *token, size_t tokenlen, int64_t deadline_ms);
int pmc_conn_server_accept(pmc_conn *c, const uint8_t *token, size_t tokenlen, const pmc_ftar_header *h,
                           const uint8_t *payload, int64_t deadline_ms);
/* Both halves, blocking until the deadline. */
int pmc_conn_handshake_server(pmc_conn *c, const uint8_t *token, size_t tokenlen, int64_t deadline_ms);

/* Sends one frame (MAC'ed once authenticated), waiting for room until the deadline. */
int pmc_conn_send(pmc_conn *c, int type, uint64_t epoch, uint64_t step, const void *payload, uint32_t len,
                  int64_t deadline_ms);
/* Reads what the socket has (never blocks). PMC_IO_CLOSED on EOF. */
int pmc_conn_pump(pmc_conn *c);
/* The next complete frame already read, if any (PMC_IO_AGAIN if none). The
 * payload stays valid until the next pump/next/recv on c. Checks the MAC
 * (required once authenticated) and the sequence number. */
int pmc_conn_next(pmc_conn *c, pmc_ftar_header *h, const uint8_t **payload);
/* pump + next until a frame arrives, the deadline passes, or interrupt_fd
 * (-1: none) becomes readable. */
int pmc_conn_recv(pmc_conn *c, int64_t deadline_ms, int interrupt_fd, pmc_ftar_header *h,
                  const uint8_t **payload);

/* Waits until fd is readable/writable (events as for poll) or the deadline;
 * PMC_IO_INTERRUPTED when interrupt_fd becomes readable first. */
int pmc_wait_fd(int fd, short events, int64_t deadline_ms, int interrupt_fd);

const char *pmc_io_strerror(int code);

#endif
