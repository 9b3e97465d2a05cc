/* What every aclnn operator shares: element access, phase 1's checks, the per-SoC support table
 * and the executors. */
#include "aclnn.h"

/* ---- element access -------------------------------------------------------------------------- */

double ld(const void *base, int dt, int64_t i) {
    switch (dt) {
    case ACL_FLOAT: return ((const float *)base)[i];
    case ACL_FLOAT16: return f16_to_f32(((const uint16_t *)base)[i]);
    case ACL_BF16: return bf16_to_f32(((const uint16_t *)base)[i]);
    case ACL_DOUBLE: return ((const double *)base)[i];
    case ACL_INT64: return (double)((const int64_t *)base)[i];
    case ACL_INT32: return ((const int32_t *)base)[i];
    case ACL_UINT32: return ((const uint32_t *)base)[i];
    case ACL_UINT8: case ACL_BOOL: return ((const uint8_t *)base)[i];
    case ACL_INT8: return ((const int8_t *)base)[i];
    default: return 0;
    }
}

void st(void *base, int dt, int64_t i, double v) {
    switch (dt) {
    case ACL_FLOAT: ((float *)base)[i] = (float)v; break;
    case ACL_FLOAT16: ((uint16_t *)base)[i] = f32_to_f16((float)v); break;
    case ACL_BF16: ((uint16_t *)base)[i] = f32_to_bf16((float)v); break;
    case ACL_DOUBLE: ((double *)base)[i] = v; break;
    case ACL_INT64: ((int64_t *)base)[i] = (int64_t)v; break;
    case ACL_INT32: ((int32_t *)base)[i] = (int32_t)v; break;
    case ACL_UINT32: ((uint32_t *)base)[i] = (uint32_t)v; break;
    case ACL_UINT8: ((uint8_t *)base)[i] = (uint8_t)v; break;
    case ACL_BOOL: ((uint8_t *)base)[i] = v != 0; break;
    case ACL_INT8: ((int8_t *)base)[i] = (int8_t)v; break;
    }
}

/* Host base of a view (the storage start): valid while the device memory is. */
void *host_base(const aclTensor *t) {
    int64_t extent = t->offset + 1;
    for (uint64_t d = 0; d < t->ndim; d++)
        if (t->dims[d] > 0) extent += (t->dims[d] - 1) * t->strides[d];
    if (numel(t) == 0) extent = 1;
    return aclsimHostPtr(t->data, (uint64_t)extent * sim_dtype_size(t->dtype));
}

/* Strides of `in` broadcast (NumPy rules) to `out`'s shape; 0 when incompatible. */
int bcast(const aclTensor *in, const aclTensor *out, int64_t *strides) {
    if (in->ndim > out->ndim) return 0;
    uint64_t lead = out->ndim - in->ndim;
    for (uint64_t d = 0; d < out->ndim; d++) {
        if (d < lead) { strides[d] = 0; continue; }
        int64_t n = in->dims[d - lead];
        if (n == out->dims[d]) strides[d] = n == 1 ? 0 : in->strides[d - lead];
        else if (n == 1) strides[d] = 0;
        else return 0;
    }
    return 1;
}

Flat flat_of(const aclTensor *t) {
    Flat f = {t, {0}};
    it_init(&f.it, t, NULL);
    return f;
}

double ld_flat(Flat *f, int64_t k) {
    int64_t off;
    offsets(f->t, k, &f->it, 1, &off);
    return ld(f->it.base, f->it.dt, off);
}

void st_flat(Flat *f, int64_t k, double v) {
    int64_t off;
    offsets(f->t, k, &f->it, 1, &off);
    st(f->it.base, f->it.dt, off, v);
}

/* ---- validation ------------------------------------------------------------------------------ */

int bad(aclnnStatus code, const char *op, const char *why) {
    aclsimSetError("%s: %s", op, why);
    return code;
}

int check(const char *op, const aclTensor *t, const char *name) {
    if (!t) {
        aclsimSetError("%s: %s is null", op, name);
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    if (t->magic != SIM_TENSOR_MAGIC) {
        aclsimSetError("%s: %s is not a live aclTensor", op, name);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (!host_base(t)) {
        aclsimSetError("%s: %s does not lie in device memory (data %p, offset %lld)", op, name, t->data,
                       (long long)t->offset);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return 0;
}

int same_shape(const aclTensor *a, const aclTensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (uint64_t d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return 1;
}

double scalar_value(const aclScalar *s) { return s ? s->value : 1.0; }

/* ---- the per-SoC support table (soc/op_support.tsv) ------------------------------------------ */

#include "op_support.h"

static const char *dtype_name(int dt) {
    switch (dt) {
    case ACL_FLOAT: return "FLOAT";
    case ACL_FLOAT16: return "FLOAT16";
    case ACL_BF16: return "BF16";
    case ACL_DOUBLE: return "DOUBLE";
    case ACL_INT8: return "INT8";
    case ACL_INT16: return "INT16";
    case ACL_INT32: return "INT32";
    case ACL_INT64: return "INT64";
    case ACL_UINT8: return "UINT8";
    case ACL_UINT16: return "UINT16";
    case ACL_UINT32: return "UINT32";
    case ACL_UINT64: return "UINT64";
    case ACL_BOOL: return "BOOL";
    default: return "UNDEFINED";
    }
}

static const char *family_name(void) {
    return aclsimSocFamily() == SIM_SOC_910 ? "Atlas training series" : "Atlas A2 training series";
}

static const SimOpRow *op_row(const char *op) {
    int family = aclsimSocFamily();
    for (size_t i = 0; i < sizeof SIM_OP_TABLE / sizeof *SIM_OP_TABLE; i++)
        if (SIM_OP_TABLE[i].family == family && strcmp(SIM_OP_TABLE[i].op, op) == 0) return &SIM_OP_TABLE[i];
    return NULL;
}

/* Phase 1 refuses, with 161002, an op or a dtype outside the part's row of the table. */
int soc_dtype(const char *op, const char *param, int dtype) {
    const SimOpRow *r = op_row(op);
    if (!r || !r->dtypes) {
        aclsimSetError("%s is not supported on %s (%s)%s%s", op, aclrtGetSocName(), family_name(), r ? ": " : "",
                       r ? r->source : "");
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (dtype < 0 || dtype > 63 || !(r->dtypes & (1ull << dtype))) {
        aclsimSetError("%s: %s dtype %s is not supported on %s (%s; %s)", op, param, dtype_name(dtype),
                       aclrtGetSocName(), family_name(), r->source);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return 0;
}

/* Phase 1 refuses, with 161002, a cubeMathType outside the part's row of the table for the input
 * dtype (ops-nn cube_util.cpp). */
int soc_cube_math_type(const char *op, int dtype, int8_t cube_math_type) {
    const SimOpRow *row = op_row(op);
    if (cube_math_type < 0 || cube_math_type > 3 || !(row->cube[dtype] & (1u << cube_math_type))) {
        aclsimSetError("%s: cubeMathType %d is not supported for %s input on %s (%s; %s)", op, cube_math_type,
                       dtype_name(dtype), aclrtGetSocName(), family_name(), row->source);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return 0;
}

/* opbase CanCast (data_type_utils.h): a floating value never casts to an integral or BOOL type,
 * nor a non-BOOL value to BOOL. aclnnAdd/Adds/Sub check alpha this way (aclnn_add.cpp), and so
 * does aclnnPowTensorScalar's promoted result; IndexAdd's doc states the same rule for alpha. The
 * Muls/Adds scalar and the fill value are not checked by the vendor. */
int scalar_castable(const char *op, const char *name, const aclScalar *s, int to) {
    int ok = !(is_float(s->dtype) && !is_float(to)) && !(to == ACL_BOOL && s->dtype != ACL_BOOL);
    if (ok) return 0;
    aclsimSetError("%s: %s of dtype %s cannot be cast to %s (opbase CanCast)", op, name, dtype_name(s->dtype),
                   dtype_name(to));
    return ACLNN_ERR_PARAM_INVALID;
}

/* ---- executors (kept by libnnopbase) --------------------------------------------------------- */

aclnnStatus make(const char *op, int dtype, void (*run)(aclOpExecutor *), uint64_t ws, uint64_t *ws_out,
                 aclOpExecutor **exec) {
    if (!ws_out || !exec) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "workspaceSize or executor is null");
    int r;
    if ((r = soc_dtype(op, "self", dtype))) return r;
    if (aclsimFailOp(op)) return bad(ACLNN_ERR_INNER, op, "failure injected by CANDLE_ASCEND_SIM_FAIL_OP");
    *exec = aclsimNewExecutor(op, run, ws);
    if (*exec) (*exec)->aicpu = (op_row(op)->aicpu >> dtype) & 1;
    *ws_out = ws;
    return ACLNN_SUCCESS;
}

/* opbase's phase 2 (op_executor.cpp): a NULL executor, or a positive size with a NULL
 * workspace, is 161001; the size is not compared with phase 1's, so a short workspace is an
 * AI Core fault when the kernel runs; a NULL stream is the default stream. */
aclnnStatus launch(const char *op, void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream) {
    if (!e) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "executor is null");
    if (ws_size > 0 && !ws) {
        aclDestroyAclOpExecutor(e); /* opbase destroys it on this path, even a repeatable one */
        return bad(ACLNN_ERR_PARAM_NULLPTR, op, "workspaceSize > 0 with a null workspace");
    }
    aclsimTakeExecutor(op, e);
    if (strcmp(e->op, op) != 0) return bad(ACLNN_ERR_PARAM_INVALID, op, "executor was created by another op");
    if (e->workspace_size) e->workspace = ws_size >= e->workspace_size ? aclsimHostPtr(ws, e->workspace_size) : NULL;
    aclsimCountLaunch(op, e->aicpu);
    if (aclsimEnqueue(stream, aclsimRunExecutor, e) != 0) return bad(ACLNN_ERR_RUNTIME_ERROR, op, "no stream");
    return ACLNN_SUCCESS;
}
