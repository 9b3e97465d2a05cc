/* Copy operators: Cast, InplaceCopy, InplaceFillScalar and InplaceZero. */
#include "aclnn.h"

/* Cast and InplaceCopy: out[...] = convert(src broadcast). t[0] = out, t[1] = src. */
static void run_copy(aclOpExecutor *e) {
    It its[2];
    for (int j = 0; j < 2; j++) it_init(&its[j], &e->t[j], &e->t[0]);
    int64_t n = numel(&e->t[0]), offs[2];
    int to_int = !is_float(e->t[0].dtype), from_float = is_float(e->t[1].dtype);
    for (int64_t k = 0; k < n; k++) {
        offsets(&e->t[0], k, its, 2, offs);
        double v = ld(its[1].base, its[1].dt, offs[1]);
        st(its[0].base, its[0].dt, offs[0], to_int && from_float ? trunc(v) : v);
    }
}

SIM_EXPORT aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor *a, int32_t dtype, aclTensor *out, uint64_t *ws,
                                                 aclOpExecutor **e) {
    const char *op = "aclnnCast";
    int r;
    if ((r = check(op, a, "self")) || (r = check(op, out, "out"))) return r;
    if (out->dtype != dtype || !same_shape(a, out)) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must have self's shape and the target dtype");
    if ((r = soc_dtype(op, "out", out->dtype))) return r;
    aclnnStatus s = make(op, a->dtype, run_copy, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *a;
    return 0;
}
PHASE2(Cast)

SIM_EXPORT aclnnStatus aclnnInplaceCopyGetWorkspaceSize(aclTensor *dst, const aclTensor *src, uint64_t *ws,
                                                        aclOpExecutor **e) {
    const char *op = "aclnnInplaceCopy";
    int r;
    int64_t tmp[SIM_MAX_DIMS];
    if ((r = check(op, dst, "selfRef")) || (r = check(op, src, "src"))) return r;
    if (!bcast(src, dst, tmp)) return bad(ACLNN_ERR_PARAM_INVALID, op, "src does not broadcast to selfRef");
    if ((r = soc_dtype(op, "src", src->dtype))) return r;
    aclnnStatus s = make(op, dst->dtype, run_copy, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *dst;
    (*e)->t[1] = *src;
    return 0;
}
PHASE2(InplaceCopy)

static void run_fill(aclOpExecutor *e) {
    It it;
    it_init(&it, &e->t[0], NULL);
    int64_t n = numel(&e->t[0]), off;
    for (int64_t k = 0; k < n; k++) {
        offsets(&e->t[0], k, &it, 1, &off);
        st(it.base, it.dt, off, e->f[0]);
    }
}

SIM_EXPORT aclnnStatus aclnnInplaceFillScalarGetWorkspaceSize(aclTensor *dst, const aclScalar *value, uint64_t *ws,
                                                              aclOpExecutor **e) {
    int r;
    if ((r = check("aclnnInplaceFillScalar", dst, "selfRef"))) return r;
    if (!value) return bad(ACLNN_ERR_PARAM_NULLPTR, "aclnnInplaceFillScalar", "value is null");
    aclnnStatus s = make("aclnnInplaceFillScalar", dst->dtype, run_fill, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *dst;
    (*e)->f[0] = value->value;
    return 0;
}
PHASE2(InplaceFillScalar)

SIM_EXPORT aclnnStatus aclnnInplaceZeroGetWorkspaceSize(aclTensor *dst, uint64_t *ws, aclOpExecutor **e) {
    int r;
    if ((r = check("aclnnInplaceZero", dst, "selfRef"))) return r;
    aclnnStatus s = make("aclnnInplaceZero", dst->dtype, run_fill, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *dst;
    return 0;
}
PHASE2(InplaceZero)
