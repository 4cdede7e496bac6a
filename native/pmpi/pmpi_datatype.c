/* Datatypes and ops as the core sees them: data-moving collectives move
 * bytes (a derived datatype is packed on the rank that uses it), reductions
 * need one of the core's element types and predefined ops. */
#include <string.h>

#include "pmpi.h"

int pmpi_type_of(MPI_Datatype type, pmpi_type *out)
{
    MPI_Count size = 0, lb = 0, extent = 0, true_lb = 0, true_extent = 0;
    memset(out, 0, sizeof(*out));
    out->type = type;
    if (type == MPI_DATATYPE_NULL) return 1;
    if (PMPI_Type_size_x(type, &size) != MPI_SUCCESS || size == MPI_UNDEFINED || size < 0) return 1;
    if (PMPI_Type_get_extent_x(type, &lb, &extent) != MPI_SUCCESS) return 1;
    if (PMPI_Type_get_true_extent_x(type, &true_lb, &true_extent) != MPI_SUCCESS) return 1;
    out->size = (uint64_t)size;
    out->extent = (MPI_Aint)extent;
    out->dense = lb == 0 && true_lb == 0 && extent == size && true_extent == size;
    return 0;
}

int pmpi_pack(const pmpi_type *t, const void *buf, uint64_t count, void *out)
{
    if (count == 0 || t->size == 0) return PMC_OK;
    return pmc_pack((uintptr_t)t->type, buf, count, out, count * t->size);
}

int pmpi_unpack(const pmpi_type *t, const void *in, uint64_t count, void *buf)
{
    if (count == 0 || t->size == 0) return PMC_OK;
    return pmc_unpack((uintptr_t)t->type, in, count * t->size, buf, count);
}

int pmpi_reduce_op(MPI_Op op)
{
    if (op == MPI_SUM) return PMC_OP_SUM;
    if (op == MPI_PROD) return PMC_OP_PROD;
    if (op == MPI_MIN) return PMC_OP_MIN;
    if (op == MPI_MAX) return PMC_OP_MAX;
    if (op == MPI_LAND) return PMC_OP_LAND;
    if (op == MPI_LOR) return PMC_OP_LOR;
    if (op == MPI_LXOR) return PMC_OP_LXOR;
    if (op == MPI_BAND) return PMC_OP_BAND;
    if (op == MPI_BOR) return PMC_OP_BOR;
    if (op == MPI_BXOR) return PMC_OP_BXOR;
    return -1;
}

/* The core's integer type of a C integer of `bytes` bytes. */
static int int_of(size_t bytes, int is_signed)
{
    switch (bytes) {
    case 1: return is_signed ? PMC_DT_INT8 : PMC_DT_UINT8;
    case 2: return is_signed ? PMC_DT_INT16 : PMC_DT_UINT16;
    case 4: return is_signed ? PMC_DT_INT32 : PMC_DT_UINT32;
    case 8: return is_signed ? PMC_DT_INT64 : PMC_DT_UINT64;
    default: return -1;
    }
}

/* Element type of a predefined MPI datatype, or -1. MPI_CHAR is text, not
 * a number, and MPI defines no reduction on it. */
static int dtype_of(MPI_Datatype t, int op)
{
    if (t == MPI_INT8_T || t == MPI_SIGNED_CHAR) return PMC_DT_INT8;
    if (t == MPI_UINT8_T || t == MPI_UNSIGNED_CHAR) return PMC_DT_UINT8;
    if (t == MPI_INT16_T || t == MPI_SHORT) return PMC_DT_INT16;
    if (t == MPI_UINT16_T || t == MPI_UNSIGNED_SHORT) return PMC_DT_UINT16;
    if (t == MPI_INT32_T) return PMC_DT_INT32;
    if (t == MPI_UINT32_T) return PMC_DT_UINT32;
    if (t == MPI_INT64_T || t == MPI_LONG_LONG_INT || t == MPI_LONG_LONG) return PMC_DT_INT64;
    if (t == MPI_UINT64_T || t == MPI_UNSIGNED_LONG_LONG) return PMC_DT_UINT64;
    if (t == MPI_INT) return int_of(sizeof(int), 1);
    if (t == MPI_UNSIGNED) return int_of(sizeof(unsigned), 0);
    if (t == MPI_LONG) return int_of(sizeof(long), 1);
    if (t == MPI_UNSIGNED_LONG) return int_of(sizeof(unsigned long), 0);
    if (t == MPI_AINT) return int_of(sizeof(MPI_Aint), 1);
    if (t == MPI_OFFSET) return int_of(sizeof(MPI_Offset), 1);
    if (t == MPI_COUNT) return int_of(sizeof(MPI_Count), 1);
    if (t == MPI_FLOAT) return PMC_DT_FLOAT32;
    if (t == MPI_DOUBLE) return PMC_DT_FLOAT64;
    if (t == MPI_LONG_DOUBLE) return PMC_DT_LONGDOUBLE;
    if (t == MPI_C_FLOAT_COMPLEX || t == MPI_C_COMPLEX) return PMC_DT_COMPLEX64;
    if (t == MPI_C_DOUBLE_COMPLEX) return PMC_DT_COMPLEX128;
    if (t == MPI_C_LONG_DOUBLE_COMPLEX) return PMC_DT_CLONGDOUBLE;
    if (t == MPI_C_BOOL) return PMC_DT_BOOL;
    /* MPI_BYTE takes the bitwise ops only. */
    if (t == MPI_BYTE && (op == PMC_OP_BAND || op == PMC_OP_BOR || op == PMC_OP_BXOR)) return PMC_DT_UINT8;
    return -1;
}

int pmpi_reduce_dtype(MPI_Datatype type, int op)
{
    if (type == MPI_DATATYPE_NULL || op < 0) return -1;
    const int dt = dtype_of(type, op);
    if (dt < 0 || !pmc_op_valid(dt, op)) return -1;
    /* The core's long double kernels assume the C compiler's layout. */
    MPI_Count size = 0;
    if (PMPI_Type_size_x(type, &size) != MPI_SUCCESS || (uint64_t)size != (uint64_t)pmc_dtype_size(dt)) return -1;
    return dt;
}
