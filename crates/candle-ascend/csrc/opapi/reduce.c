/* Reduction operators (ReduceSum, Amax, Amin, ArgMax, ArgMin): accumulate in the workspace (one
 * double pair per output element). */
#include "aclnn.h"

enum { R_SUM, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN };

/* t[0] = out, t[1] = self; i[0] = kind; dims[] = reduced dims (mask), i[1] = keepdim. */
static void run_reduce(aclOpExecutor *e) {
    const aclTensor *in = &e->t[1], *out = &e->t[0];
    int64_t nout = numel(out), nin = numel(in);
    double *acc = e->workspace, *arg = acc + nout;
    int kind = (int)e->i[0];
    for (int64_t j = 0; j < nout; j++) {
        acc[j] = kind == R_SUM ? 0 : NAN;
        arg[j] = 0;
    }
    int reduced[SIM_MAX_DIMS] = {0};
    for (int d = 0; d < e->ndims; d++) reduced[e->dims[d]] = 1;
    It it;
    it_init(&it, in, NULL);
    for (int64_t k = 0; k < nin; k++) {
        int64_t off, rem = k, o = 0, mul = 1, along = 0, along_mul = 1;
        offsets(in, k, &it, 1, &off);
        for (int64_t d = (int64_t)in->ndim - 1; d >= 0; d--) { /* flat output index, reduced dims dropped */
            int64_t idx = rem % in->dims[d];
            rem /= in->dims[d];
            if (!reduced[d]) { o += idx * mul; mul *= in->dims[d]; }
            else { along += idx * along_mul; along_mul *= in->dims[d]; }
        }
        double v = ld(it.base, it.dt, off);
        switch (kind) {
        case R_SUM: acc[o] += v; break;
        case R_MAX: case R_ARGMAX:
            if (isnan(acc[o]) || v > acc[o]) { acc[o] = v; arg[o] = (double)along; }
            break;
        default:
            if (isnan(acc[o]) || v < acc[o]) { acc[o] = v; arg[o] = (double)along; }
        }
    }
    It ot;
    it_init(&ot, out, NULL);
    for (int64_t j = 0; j < nout; j++) {
        int64_t off;
        offsets(out, j, &ot, 1, &off);
        st(ot.base, ot.dt, off, kind >= R_ARGMAX ? arg[j] : acc[j]);
    }
}

static aclnnStatus reduce(const char *op, int kind, const aclTensor *a, const int64_t *dims, uint64_t ndims, int keep,
                          const aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    int r;
    if ((r = check(op, a, "self")) || (r = check(op, out, "out"))) return r;
    int mask[SIM_MAX_DIMS] = {0};
    for (uint64_t d = 0; d < ndims; d++) {
        int64_t x = dims[d] < 0 ? dims[d] + (int64_t)a->ndim : dims[d];
        if (x < 0 || x >= (int64_t)a->ndim) return bad(ACLNN_ERR_PARAM_INVALID, op, "dim out of range");
        mask[x] = 1;
    }
    int64_t expect = 0, nout = 1; /* the output shape: reduced dims become 1 (keep) or vanish */
    for (uint64_t d = 0; d < a->ndim; d++) {
        if (mask[d] && !keep) continue;
        int64_t want = mask[d] ? 1 : a->dims[d];
        if ((uint64_t)expect >= out->ndim || out->dims[expect] != want)
            return bad(ACLNN_ERR_PARAM_INVALID, op, "out has the wrong shape for this reduction");
        nout *= want;
        expect++;
    }
    if ((uint64_t)expect != out->ndim) return bad(ACLNN_ERR_PARAM_INVALID, op, "out has the wrong rank");
    if (kind >= R_ARGMAX && out->dtype != ACL_INT64 && out->dtype != ACL_INT32)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "out must be INT32 or INT64");
    aclnnStatus s = make(op, a->dtype, run_reduce, (uint64_t)nout * 2 * sizeof(double), ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *a;
    (*e)->i[0] = kind;
    (*e)->ndims = 0;
    for (uint64_t d = 0; d < a->ndim; d++)
        if (mask[d]) (*e)->dims[(*e)->ndims++] = (int64_t)d;
    return 0;
}

SIM_EXPORT aclnnStatus aclnnReduceSumGetWorkspaceSize(const aclTensor *a, const aclIntArray *dims, bool keep,
                                                      int32_t dtype, aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    if (!dims) return bad(ACLNN_ERR_PARAM_NULLPTR, "aclnnReduceSum", "dims is null");
    if (out && out->dtype != dtype) return bad(ACLNN_ERR_PARAM_INVALID, "aclnnReduceSum", "dtype must be out's dtype");
    return reduce("aclnnReduceSum", R_SUM, a, dims->values, dims->size, keep, out, ws, e);
}
PHASE2(ReduceSum)

SIM_EXPORT aclnnStatus aclnnAmaxGetWorkspaceSize(const aclTensor *a, const aclIntArray *dims, bool keep,
                                                 aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    if (!dims) return bad(ACLNN_ERR_PARAM_NULLPTR, "aclnnAmax", "dim is null");
    return reduce("aclnnAmax", R_MAX, a, dims->values, dims->size, keep, out, ws, e);
}
PHASE2(Amax)

SIM_EXPORT aclnnStatus aclnnAminGetWorkspaceSize(const aclTensor *a, const aclIntArray *dims, bool keep,
                                                 aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    if (!dims) return bad(ACLNN_ERR_PARAM_NULLPTR, "aclnnAmin", "dim is null");
    return reduce("aclnnAmin", R_MIN, a, dims->values, dims->size, keep, out, ws, e);
}
PHASE2(Amin)

SIM_EXPORT aclnnStatus aclnnArgMaxGetWorkspaceSize(const aclTensor *a, int64_t dim, bool keep, aclTensor *out,
                                                   uint64_t *ws, aclOpExecutor **e) {
    return reduce("aclnnArgMax", R_ARGMAX, a, &dim, 1, keep, out, ws, e);
}
PHASE2(ArgMax)

SIM_EXPORT aclnnStatus aclnnArgMinGetWorkspaceSize(const aclTensor *a, int64_t dim, bool keep, aclTensor *out,
                                                   uint64_t *ws, aclOpExecutor **e) {
    return reduce("aclnnArgMin", R_ARGMIN, a, &dim, 1, keep, out, ws, e);
}
PHASE2(ArgMin)
