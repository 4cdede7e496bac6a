/* Data described by datatypes, as the contiguous bytes the core moves. A
 * dense datatype's buffer is used as it is; anything else (a vector, a
 * struct, absolute addresses from MPI_BOTTOM, a negative displacement) is
 * packed into a staging buffer on this rank alone, so that ranks agree on
 * the bytes whatever datatypes describe them. */
#include <string.h>

#include "pmpi.h"

int pmpi_view(pmpi_comm *s, int which, const pmpi_type *t, const void *buf, uint64_t elems, int load, void **out)
{
    if (t->dense) {
        *out = (void *)(uintptr_t)buf;
        return PMC_OK;
    }
    unsigned char *stage = pmpi_stage(s, which, (size_t)(elems * t->size));
    if (stage == NULL) return PMC_ERR_NOMEM;
    *out = stage;
    return load ? pmpi_pack(t, buf, elems, stage) : PMC_OK;
}

int pmpi_unview(const pmpi_type *t, const void *view, uint64_t elems, void *buf)
{
    return t->dense ? PMC_OK : pmpi_unpack(t, view, elems, buf);
}

int pmpi_any_negative(const pmpi_comm *s, pmpi_array counts)
{
    for (int i = 0; i < s->size; ++i)
        if (pmpi_at(counts, i) < 0) return 1;
    return 0;
}

/* Whether blocks can be read where they are: a dense type, displacements >= 0. */
static int in_place_layout(const pmpi_comm *s, const pmpi_type *t, pmpi_array displs)
{
    if (!t->dense) return 0;
    for (int i = 0; i < s->size; ++i)
        if (pmpi_at(displs, i) < 0) return 0;
    return 1;
}

int pmpi_vview(pmpi_comm *s, int which, const pmpi_type *t, const void *buf, pmpi_array counts, pmpi_array displs,
               int load, uint64_t *ucounts, uint64_t *udispls, void **out)
{
    const int direct = in_place_layout(s, t, displs);
    uint64_t packed = 0;
    for (int i = 0; i < s->size; ++i) {
        ucounts[i] = (uint64_t)pmpi_at(counts, i) * t->size;
        udispls[i] = direct ? (uint64_t)pmpi_at(displs, i) * (uint64_t)t->extent : packed;
        packed += ucounts[i];
    }
    if (direct) {
        *out = (void *)(uintptr_t)buf;
        return PMC_OK;
    }
    unsigned char *stage = pmpi_stage(s, which, (size_t)packed);
    if (stage == NULL) return PMC_ERR_NOMEM;
    *out = stage;
    if (!load) return PMC_OK;
    for (int i = 0; i < s->size; ++i) {
        const unsigned char *block = (const unsigned char *)buf + pmpi_at(displs, i) * t->extent;
        int rc = pmpi_pack(t, block, (uint64_t)pmpi_at(counts, i), stage + udispls[i]);
        if (rc != PMC_OK) return rc;
    }
    return PMC_OK;
}

int pmpi_vunview(const pmpi_comm *s, const pmpi_type *t, const void *view, pmpi_array counts, pmpi_array displs,
                 const uint64_t *udispls, void *buf)
{
    if (view == buf) return PMC_OK;
    for (int i = 0; i < s->size; ++i) {
        unsigned char *block = (unsigned char *)buf + pmpi_at(displs, i) * t->extent;
        int rc = pmpi_unpack(t, (const unsigned char *)view + udispls[i], (uint64_t)pmpi_at(counts, i), block);
        if (rc != PMC_OK) return rc;
    }
    return PMC_OK;
}
