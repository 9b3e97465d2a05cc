/* Activation operators: Softmax, LogSoftmax and their backwards, and GeluBackwardV2 (GeluV2 is a
 * unary op of elementwise.c). */
#include "aclnn.h"

/* A dim in −n ≤ dim < n (a 0-d tensor counts as n = 1), as a non-negative axis; −1 if out of range
 * (ops-nn e5c3fa932 activation/softmax_v2/op_api/aclnn_softmax.cpp CheckDim). */
static int64_t axis_of(const aclTensor *t, int64_t dim) {
    int64_t n = t->ndim ? (int64_t)t->ndim : 1;
    if (dim < -n || dim >= n) return -1;
    return dim < 0 ? dim + n : dim;
}

/* Iterate the rows along `axis`: calls f(e, base_k, stride_k, len) with flat indices of the row's
 * first element and the flat step between its elements. */
static void for_rows(const aclTensor *t, int64_t axis, aclOpExecutor *e,
                     void (*f)(aclOpExecutor *, int64_t, int64_t, int64_t)) {
    int64_t len = t->ndim ? t->dims[axis] : 1, inner = 1, outer = 1;
    for (uint64_t d = 0; d < t->ndim; d++) {
        if ((int64_t)d > axis) inner *= t->dims[d];
        if ((int64_t)d < axis) outer *= t->dims[d];
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) f(e, o * len * inner + i, inner, len);
}

/* A row's maximum and Σ exp(x − max), accumulated in FP32. */
static void row_max_sum(Flat *x, int64_t k0, int64_t step, int64_t len, float *mx, float *sum) {
    *mx = -INFINITY;
    *sum = 0;
    for (int64_t j = 0; j < len; j++) {
        float v = (float)ld_flat(x, k0 + j * step);
        if (v > *mx) *mx = v;
    }
    for (int64_t j = 0; j < len; j++) *sum += expf((float)ld_flat(x, k0 + j * step) - *mx);
}

/* t[0] = out, t[1] = self. Max-subtracted, accumulated in FP32. */
static void softmax_row(aclOpExecutor *e, int64_t k0, int64_t step, int64_t len) {
    Flat out = flat_of(&e->t[0]), x = flat_of(&e->t[1]);
    float mx, sum;
    row_max_sum(&x, k0, step, len, &mx, &sum);
    for (int64_t j = 0; j < len; j++) st_flat(&out, k0 + j * step, expf((float)ld_flat(&x, k0 + j * step) - mx) / sum);
}

static void run_softmax(aclOpExecutor *e) { for_rows(&e->t[1], e->i[0], e, softmax_row); }

/* Phase 1 of Softmax and LogSoftmax: dim in [−r, r − 1], rank ≤ 8, out of self's shape in a
 * dtype the part has. */
static aclnnStatus softmax_like(const char *op, void (*run)(aclOpExecutor *), const aclTensor *x, int64_t dim,
                                aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    int r;
    if ((r = check(op, x, "self")) || (r = check(op, out, "out"))) return r;
    if ((r = soc_dtype(op, "out", out->dtype))) return r;
    int64_t axis = axis_of(x, dim);
    if (axis < 0) return bad(ACLNN_ERR_PARAM_INVALID, op, "dim is out of range");
    if (x->ndim > SIM_MAX_DIMS || !same_shape(x, out)) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must have self's shape (at most 8 dims)");
    aclnnStatus s = make(op, x->dtype, run, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *x;
    (*e)->i[0] = axis;
    return 0;
}

SIM_EXPORT aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor *x, int64_t dim, aclTensor *out, uint64_t *ws,
                                                    aclOpExecutor **e) {
    return softmax_like("aclnnSoftmax", run_softmax, x, dim, out, ws, e);
}
PHASE2(Softmax)

/* t[0] = out, t[1] = gradOutput, t[2] = output: out = y·(g − Σ g·y) along the axis
 * (ops-nn e5c3fa932 activation/softmax_grad/docs/aclnnSoftmaxBackward.md). */
static void softmax_grad_row(aclOpExecutor *e, int64_t k0, int64_t step, int64_t len) {
    Flat out = flat_of(&e->t[0]), g = flat_of(&e->t[1]), y = flat_of(&e->t[2]);
    float dot = 0;
    for (int64_t j = 0; j < len; j++) dot += (float)ld_flat(&g, k0 + j * step) * (float)ld_flat(&y, k0 + j * step);
    for (int64_t j = 0; j < len; j++) {
        float yj = (float)ld_flat(&y, k0 + j * step);
        st_flat(&out, k0 + j * step, yj * ((float)ld_flat(&g, k0 + j * step) - dot));
    }
}

static void run_softmax_grad(aclOpExecutor *e) { for_rows(&e->t[1], e->i[0], e, softmax_grad_row); }

/* Phase 1 of SoftmaxBackward and LogSoftmaxBackward: gradOutput and output share a dtype and,
 * with out, a shape; dim in [−r, r − 1]. */
static aclnnStatus softmax_like_grad(const char *op, void (*run)(aclOpExecutor *), const aclTensor *g,
                                     const aclTensor *y, int64_t dim, aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    int r;
    if ((r = check(op, g, "gradOutput")) || (r = check(op, y, "output")) || (r = check(op, out, "out"))) return r;
    if (y->dtype != g->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "output must have gradOutput's dtype");
    if (!is_float(out->dtype)) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must be a floating dtype");
    int64_t axis = axis_of(g, dim);
    if (axis < 0) return bad(ACLNN_ERR_PARAM_INVALID, op, "dim is out of range");
    if (g->ndim > SIM_MAX_DIMS || !same_shape(g, y) || !same_shape(g, out))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "output and out must have gradOutput's shape (at most 8 dims)");
    aclnnStatus s = make(op, g->dtype, run, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *g;
    (*e)->t[2] = *y;
    (*e)->i[0] = axis;
    return 0;
}

SIM_EXPORT aclnnStatus aclnnSoftmaxBackwardGetWorkspaceSize(const aclTensor *g, const aclTensor *y, int64_t dim,
                                                            aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    return softmax_like_grad("aclnnSoftmaxBackward", run_softmax_grad, g, y, dim, out, ws, e);
}
PHASE2(SoftmaxBackward)

/* t[0] = out, t[1] = self: out = x − max − log Σ exp(x − max) along the axis, in FP32
 * (ops-nn e5c3fa932 activation/log_softmax_v2/docs/aclnnLogSoftmax.md). */
static void log_softmax_row(aclOpExecutor *e, int64_t k0, int64_t step, int64_t len) {
    Flat out = flat_of(&e->t[0]), x = flat_of(&e->t[1]);
    float mx, sum;
    row_max_sum(&x, k0, step, len, &mx, &sum);
    float lse = mx + logf(sum);
    for (int64_t j = 0; j < len; j++) st_flat(&out, k0 + j * step, (float)ld_flat(&x, k0 + j * step) - lse);
}

static void run_log_softmax(aclOpExecutor *e) { for_rows(&e->t[1], e->i[0], e, log_softmax_row); }

/* The kernel computes in out's dtype (op_api aclnn_logsoftmax.cpp). */
SIM_EXPORT aclnnStatus aclnnLogSoftmaxGetWorkspaceSize(const aclTensor *x, int64_t dim, aclTensor *out, uint64_t *ws,
                                                       aclOpExecutor **e) {
    return softmax_like("aclnnLogSoftmax", run_log_softmax, x, dim, out, ws, e);
}
PHASE2(LogSoftmax)

/* t[0] = out, t[1] = gradOutput, t[2] = output (the log-probabilities): out = g − exp(y)·Σ g
 * along the axis (ops-nn e5c3fa932 activation/log_softmax_grad/docs/aclnnLogSoftmaxBackward.md). */
static void log_softmax_grad_row(aclOpExecutor *e, int64_t k0, int64_t step, int64_t len) {
    Flat out = flat_of(&e->t[0]), g = flat_of(&e->t[1]), y = flat_of(&e->t[2]);
    float sum = 0;
    for (int64_t j = 0; j < len; j++) sum += (float)ld_flat(&g, k0 + j * step);
    for (int64_t j = 0; j < len; j++) {
        float gj = (float)ld_flat(&g, k0 + j * step), yj = (float)ld_flat(&y, k0 + j * step);
        st_flat(&out, k0 + j * step, gj - expf(yj) * sum);
    }
}

static void run_log_softmax_grad(aclOpExecutor *e) { for_rows(&e->t[1], e->i[0], e, log_softmax_grad_row); }

/* dim in [−r, r − 1]: the doc says [−n, n], the source rejects n (op_api
 * aclnn_logsoftmax_backward.cpp). */
SIM_EXPORT aclnnStatus aclnnLogSoftmaxBackwardGetWorkspaceSize(const aclTensor *g, const aclTensor *y, int64_t dim,
                                                               aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    return softmax_like_grad("aclnnLogSoftmaxBackward", run_log_softmax_grad, g, y, dim, out, ws, e);
}
PHASE2(LogSoftmaxBackward)

/* t[0] = gradInput, t[1] = gradOutput, t[2] = self (the forward input x); i[0] = 1 for "tanh".
 * "none": dy·(½ + ½·erf(x/√2) + x·e^(−x²/2)/√(2π)); "tanh": dy·(½(1 + tanh u) + ½x(1 − tanh²u)·u′)
 * with u = √(2/π)(x + 0.044715x³), in FP32 (ops-nn e5c3fa932 activation/gelu_grad_v2: docs, and
 * op_kernel/arch35/gelu_grad_v2_dag.h for tanh). */
static void run_gelu_backward(aclOpExecutor *e) {
    It its[3];
    for (int j = 0; j < 3; j++) it_init(&its[j], &e->t[j], &e->t[0]);
    int64_t n = numel(&e->t[0]), offs[3];
    for (int64_t k = 0; k < n; k++) {
        offsets(&e->t[0], k, its, 3, offs);
        float dy = (float)ld(its[1].base, its[1].dt, offs[1]), x = (float)ld(its[2].base, its[2].dt, offs[2]), d;
        if (e->i[0]) {
            float u = 0.7978845608f * (x + 0.044715f * x * x * x), t = tanhf(u);
            d = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
        } else {
            d = 0.5f + 0.5f * erff(x / 1.4142135624f) + x * expf(-0.5f * x * x) / 2.5066282746f;
        }
        st(its[0].base, its[0].dt, offs[0], dy * d);
    }
}

SIM_EXPORT aclnnStatus aclnnGeluBackwardV2GetWorkspaceSize(const aclTensor *g, const aclTensor *x, char *approximate,
                                                           aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnGeluBackwardV2";
    int r;
    if (!approximate) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "approximate is null");
    if ((r = check(op, g, "gradOutput")) || (r = check(op, x, "self")) || (r = check(op, out, "gradInput"))) return r;
    int tanh_mode = strcmp(approximate, "tanh") == 0;
    if (!tanh_mode && strcmp(approximate, "none") != 0) return bad(ACLNN_ERR_PARAM_INVALID, op, "approximate must be \"none\" or \"tanh\"");
    /* gradInput's dtype must equal the promoted type; this emulator promotes equal dtypes only. */
    if (g->dtype != x->dtype || out->dtype != x->dtype)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "gradOutput, self and gradInput must share one dtype here");
    int64_t tmp[SIM_MAX_DIMS];
    if (!same_shape(x, out) || !bcast(g, out, tmp)) return bad(ACLNN_ERR_PARAM_INVALID, op, "gradInput must have the broadcast shape");
    aclnnStatus s = make(op, x->dtype, run_gelu_backward, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *g;
    (*e)->t[2] = *x;
    (*e)->i[0] = tanh_mode;
    return 0;
}
PHASE2(GeluBackwardV2)
