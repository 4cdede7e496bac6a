/* The ring allreduce between members: reduce-scatter then allgather over
 * TCP, chunked and pipelined, out of place. Internal to FTAR. */
#ifndef PMC_FTAR_RING_H
#define PMC_FTAR_RING_H

#include <stddef.h>
#include <stdint.h>

#include "pymcoll_ftar.h"

/* Fault-injection points inside the ring (the member maps them to its spec). */
enum { PMC_RING_AT_REDUCE_SCATTER = 0, PMC_RING_AT_ALLGATHER = 1 };

/* How a ring operation ended. */
enum {
    PMC_RING_OK = 0,
    PMC_RING_ABORTED,      /* the abort descriptor became readable */
    PMC_RING_TIMEOUT,      /* deadline passed */
    PMC_RING_PEER_LOST,    /* a neighbour closed or reset a connection */
    PMC_RING_BAD_FRAME,    /* a frame failed its checks (header, length, order, MAC) */
    PMC_RING_NO_MEMORY,
    PMC_RING_BAD_ARG
};

typedef struct pmc_ring_stream {
    int fd;                /* non-blocking TCP socket */
    uint8_t key[32];       /* the connection's session key (MACs when integrity is on) */
    uint64_t seq;          /* next frame sequence number in this direction; kept across operations */
} pmc_ring_stream;

typedef struct pmc_ring_args {
    uint32_t n;            /* members in the ring (>= 2) */
    uint32_t index;        /* this member's position; sends go to index+1, receives come from index-1 */
    uint32_t streams;      /* connections per direction (>= 1) */
    pmc_ring_stream *send; /* [streams] to the right neighbour */
    pmc_ring_stream *recv; /* [streams] from the left neighbour */
    int abort_fd;          /* readable: give up at once (-1: none) */
    int64_t deadline_ms;   /* CLOCK_MONOTONIC milliseconds (pmc_ftar_now_ms); <= 0: none */
    uint64_t epoch;        /* header epoch of every data frame */
    uint64_t op;           /* operation number within the epoch: header step of every data frame */
    uint32_t chunk_bytes;  /* payload bytes per data frame (>= 1024) */
    int integrity;         /* MAC every data frame, and require it on receipt */
    void (*fault)(void *arg, int point); /* called once per point per operation (may be NULL) */
    void *fault_arg;
    void **scratch;        /* reusable scratch kept by the caller (*scratch may be NULL) */
    size_t *scratch_bytes;
} pmc_ring_args;

/* out = reduction over members of in (zeros from a member with contribute=0);
 * every member ends with the same bits. *n_contrib counts contributing members.
 * in and out must not overlap (PMC_RING_BAD_ARG); in is only read. */
int pmc_ring_allreduce(const pmc_ring_args *a, const void *in, void *out, size_t count, int dtype, int op,
                       int contribute, uint32_t *n_contrib);
const char *pmc_ring_strerror(int code);

/* Element size of a dtype (0 if unknown), and the reduction kernels. */
size_t pmc_ftar_dtype_size(int dtype);
/* acc[i] = acc[i] op x[i] for n elements of the accumulation type of dtype
 * (float32 for the 16-bit types, else dtype itself). */
void pmc_ftar_reduce(void *acc, const void *x, size_t n, int dtype, int op);
/* acc[i] = acc[i] op own[i], own in dtype itself (widened on the fly for the
 * 16-bit types), acc in the accumulation type; own == NULL: zeros. */
void pmc_ftar_reduce_own(void *acc, const void *own, size_t n, int dtype, int op);
/* The 16-bit types: widen to float32, narrow with round-to-nearest-even. */
void pmc_ftar_widen(float *out, const void *in, size_t n, int dtype);
void pmc_ftar_narrow(void *out, const float *in, size_t n, int dtype);

int64_t pmc_ftar_now_ms(void);

/* The 40 header bytes of a frame (frame.c): magic, version, h's fields, with
 * h->flags and h->length as given (no MAC is computed here). */
void pmc_ftar_header_encode(const pmc_ftar_header *h, uint8_t out[PMC_FTAR_HEADER_BYTES]);

#endif
