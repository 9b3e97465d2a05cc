/* Normalization operators: LayerNorm, LayerNormBackward and AddLayerNorm. */
#include "aclnn.h"

/* ---- layer norm ------------------------------------------------------------------------------ */

/* ops-nn e5c3fa932 norm/layer_norm_v4 (op_api/aclnn_layer_norm.cpp) and norm/layer_norm_grad_v3
 * (op_api/aclnn_layer_norm_backward.cpp). Rows of N = Π normalizedShape elements; mean and
 * rstd = 1/√(biased var + eps) per row (tiling coefficient 1/rowSize; kernel_layer_norm.h). */

/* normalizedShape against input (right-aligned), weight and bias; out (or gradOut) like input. */
static int norm_shapes(const char *op, const aclTensor *x, const aclIntArray *norm, const aclTensor *w,
                       const aclTensor *b, int64_t *n_out) {
    if (norm->size == 0 || norm->size > SIM_MAX_DIMS || x->ndim > SIM_MAX_DIMS)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "normalizedShape must have 1 to 8 dims, input at most 8");
    if (x->ndim < norm->size) return bad(ACLNN_ERR_PARAM_INVALID, op, "input has fewer dims than normalizedShape");
    int64_t n = 1;
    uint64_t axis = x->ndim - norm->size;
    for (uint64_t i = 0; i < norm->size; i++) {
        if (x->dims[axis + i] != norm->values[i])
            return bad(ACLNN_ERR_PARAM_INVALID, op, "input's trailing dims differ from normalizedShape");
        n *= norm->values[i];
    }
    const aclTensor *params[2] = {w, b};
    for (int j = 0; j < 2; j++) {
        const aclTensor *p = params[j];
        if (!p) continue;
        if (p->ndim != norm->size) return bad(ACLNN_ERR_PARAM_INVALID, op, "weight and bias must have normalizedShape");
        for (uint64_t i = 0; i < norm->size; i++)
            if (p->dims[i] != norm->values[i])
                return bad(ACLNN_ERR_PARAM_INVALID, op, "weight and bias must have normalizedShape");
    }
    *n_out = n;
    return 0;
}

/* t = out, x, w, b, mean, rstd; i[0] = N, i[1] = has w, i[2] = has b, i[3] = has mean/rstd; f[0] = eps. */
static void run_layer_norm(aclOpExecutor *e) {
    Flat out = flat_of(&e->t[0]), x = flat_of(&e->t[1]), w = flat_of(&e->t[2]), b = flat_of(&e->t[3]);
    Flat mean_out = flat_of(&e->t[4]), rstd_out = flat_of(&e->t[5]);
    int64_t n = e->i[0], m = n ? numel(&e->t[1]) / n : 0;
    for (int64_t r = 0; r < m; r++) {
        double sum = 0, sq = 0;
        for (int64_t j = 0; j < n; j++) sum += (float)ld_flat(&x, r * n + j);
        float mean = (float)(sum / (double)n);
        for (int64_t j = 0; j < n; j++) {
            float d = (float)ld_flat(&x, r * n + j) - mean;
            sq += (double)d * d;
        }
        float rstd = 1.0f / sqrtf((float)(sq / (double)n) + (float)e->f[0]);
        for (int64_t j = 0; j < n; j++) {
            float wj = e->i[1] ? (float)ld_flat(&w, j) : 1.0f, bj = e->i[2] ? (float)ld_flat(&b, j) : 0.0f;
            st_flat(&out, r * n + j, ((float)ld_flat(&x, r * n + j) - mean) * rstd * wj + bj);
        }
        if (e->i[3] & 1) st_flat(&mean_out, r, mean);
        if (e->i[3] & 2) st_flat(&rstd_out, r, rstd);
    }
}

static int float_or(int dt, int like) { return dt == like || dt == ACL_FLOAT; }

SIM_EXPORT aclnnStatus aclnnLayerNormGetWorkspaceSize(const aclTensor *x, const aclIntArray *norm, const aclTensor *w,
                                                      const aclTensor *b, double eps, aclTensor *out, aclTensor *mean,
                                                      aclTensor *rstd, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnLayerNorm";
    int r;
    if (!norm) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "normalizedShape is null");
    if ((r = check(op, x, "input")) || (r = check(op, out, "out"))) return r;
    if ((w && (r = check(op, w, "weightOptional"))) || (b && (r = check(op, b, "biasOptional"))) ||
        (mean && (r = check(op, mean, "meanOutOptional"))) || (rstd && (r = check(op, rstd, "rstdOutOptional"))))
        return r;
    /* CheckInputDtype: weight and bias are the input's dtype or FLOAT, and the same when both given. */
    if ((w && !float_or(w->dtype, x->dtype)) || (b && !float_or(b->dtype, x->dtype)) || (w && b && w->dtype != b->dtype))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "weight and bias must have the input's dtype or FLOAT, and one dtype");
    if ((r = soc_dtype(op, "out", out->dtype)) || (mean && (r = soc_dtype(op, "meanOut", mean->dtype))) ||
        (rstd && (r = soc_dtype(op, "rstdOut", rstd->dtype))))
        return r;
    int64_t n;
    if ((r = norm_shapes(op, x, norm, w, b, &n))) return r;
    if (!same_shape(out, x)) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must have the input's shape");
    int64_t m = n ? numel(x) / n : 0;
    if ((mean && numel(mean) != m) || (rstd && numel(rstd) != m))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "meanOut and rstdOut need one element per row");
    aclnnStatus s = make(op, x->dtype, run_layer_norm, 0, ws, e);
    if (s) return s;
    aclOpExecutor *x_ = *e;
    x_->t[0] = *out;
    x_->t[1] = *x;
    if (w) x_->t[2] = *w;
    if (b) x_->t[3] = *b;
    if (mean) x_->t[4] = *mean;
    if (rstd) x_->t[5] = *rstd;
    x_->i[0] = n;
    x_->i[1] = w != NULL;
    x_->i[2] = b != NULL;
    x_->i[3] = (mean ? 1 : 0) | (rstd ? 2 : 0);
    x_->f[0] = eps;
    return 0;
}
PHASE2(LayerNorm)

/* t = gradOut, x, mean, rstd, w, gradInput, gradWeight, gradBias; i[0] = N, i[1] = has w,
 * i[2] = output mask bits. dx = (ĝ − mean(ĝ) − x̂·mean(ĝ⊙x̂))·rstd with ĝ = g⊙w;
 * dw = Σ g⊙x̂ and db = Σ g over the rows, accumulated in FP32 and cast to the outputs. */
static void run_layer_norm_backward(aclOpExecutor *e) {
    Flat g = flat_of(&e->t[0]), x = flat_of(&e->t[1]), mean_in = flat_of(&e->t[2]), rstd_in = flat_of(&e->t[3]);
    Flat w = flat_of(&e->t[4]), dx = flat_of(&e->t[5]), dw_out = flat_of(&e->t[6]), db_out = flat_of(&e->t[7]);
    int64_t n = e->i[0], m = n ? numel(&e->t[1]) / n : 0, mask = e->i[2];
    float *dw = calloc((size_t)(n ? n : 1), sizeof *dw), *db = calloc((size_t)(n ? n : 1), sizeof *db);
    for (int64_t r = 0; r < m; r++) {
        float mean = (float)ld_flat(&mean_in, r), rstd = (float)ld_flat(&rstd_in, r);
        float sum_g = 0, sum_gx = 0;
        for (int64_t j = 0; j < n; j++) {
            float gj = (float)ld_flat(&g, r * n + j), wj = e->i[1] ? (float)ld_flat(&w, j) : 1.0f;
            float xh = ((float)ld_flat(&x, r * n + j) - mean) * rstd;
            sum_g += gj * wj;
            sum_gx += gj * wj * xh;
            dw[j] += gj * xh;
            db[j] += gj;
        }
        if (mask & 1)
            for (int64_t j = 0; j < n; j++) {
                float gj = (float)ld_flat(&g, r * n + j), wj = e->i[1] ? (float)ld_flat(&w, j) : 1.0f;
                float xh = ((float)ld_flat(&x, r * n + j) - mean) * rstd;
                st_flat(&dx, r * n + j, (gj * wj - sum_g / (float)n - xh * sum_gx / (float)n) * rstd);
            }
    }
    for (int64_t j = 0; j < n; j++) {
        if (mask & 2) st_flat(&dw_out, j, dw[j]);
        if (mask & 4) st_flat(&db_out, j, db[j]);
    }
    free(dw);
    free(db);
}

SIM_EXPORT aclnnStatus aclnnLayerNormBackwardGetWorkspaceSize(
    const aclTensor *g, const aclTensor *x, const aclIntArray *norm, const aclTensor *mean, const aclTensor *rstd,
    const aclTensor *w, const aclTensor *b, const aclBoolArray *mask, aclTensor *dx, aclTensor *dw, aclTensor *db,
    uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnLayerNormBackward";
    int r;
    if (!norm || !mask) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "normalizedShape or outputMask is null");
    if ((r = check(op, g, "gradOut")) || (r = check(op, x, "input")) || (r = check(op, mean, "mean")) ||
        (r = check(op, rstd, "rstd")))
        return r;
    if (mask->size != 3) return bad(ACLNN_ERR_PARAM_INVALID, op, "outputMask must have 3 elements");
    aclTensor *outs[3] = {dx, dw, db};
    const char *names[3] = {"gradInputOut", "gradWeightOut", "gradBiasOut"};
    int bits = 0;
    for (int j = 0; j < 3; j++)
        if (mask->values[j]) {
            if ((r = check(op, outs[j], names[j]))) return r;
            bits |= 1 << j;
        }
    if ((w && (r = check(op, w, "weightOptional"))) || (b && (r = check(op, b, "biasOptional")))) return r;
    if (g->dtype != x->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "gradOut must have the input's dtype");
    if (w && !float_or(w->dtype, x->dtype)) return bad(ACLNN_ERR_PARAM_INVALID, op, "weight must have the input's dtype or FLOAT");
    /* aclnnLayerNormBackward.md (ops-nn e5c3fa932 norm/layer_norm_grad_v3/docs): gradInputOut has the
     * input's dtype, gradWeightOut and gradBiasOut the weight's (the input's without one). op_api
     * casts other outputs, but the document is the contract: refused. */
    if ((bits & 1) && dx->dtype != x->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "gradInputOut must have the input's dtype");
    for (int j = 1; j < 3; j++)
        if ((bits >> j & 1) && outs[j]->dtype != (w ? w->dtype : x->dtype))
            return bad(ACLNN_ERR_PARAM_INVALID, op, "gradWeightOut and gradBiasOut must have the weight's dtype");
    for (int j = 0; j < 3; j++)
        if ((bits >> j & 1) && (r = soc_dtype(op, names[j], outs[j]->dtype))) return r;
    if ((r = soc_dtype(op, "mean", mean->dtype)) || (r = soc_dtype(op, "rstd", rstd->dtype))) return r;
    int64_t n;
    if ((r = norm_shapes(op, x, norm, w, b, &n))) return r;
    int64_t m = n ? numel(x) / n : 0;
    if (!same_shape(g, x) || !same_shape(mean, rstd) || numel(mean) != m || ((bits & 1) && !same_shape(dx, x)) ||
        ((bits & 2) && numel(dw) != n) || ((bits & 4) && numel(db) != n))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "gradOut and gradInput need the input's shape, mean and rstd one element per row, gradWeight and gradBias N");
    aclnnStatus s = make(op, x->dtype, run_layer_norm_backward, 0, ws, e);
    if (s) return s;
    aclOpExecutor *q = *e;
    q->t[0] = *g;
    q->t[1] = *x;
    q->t[2] = *mean;
    q->t[3] = *rstd;
    if (w) q->t[4] = *w;
    for (int j = 0; j < 3; j++)
        if (bits >> j & 1) q->t[5 + j] = *outs[j];
    q->i[0] = n;
    q->i[1] = w != NULL;
    q->i[2] = bits;
    return 0;
}
PHASE2(LayerNormBackward)

/* ---- AddLayerNorm (ops-nn e5c3fa932 norm/add_layer_norm) ------------------------------------- */

/* t[0] = yOut, t[1] = xOut, t[2] = gamma, t[3] = beta, t[4] = meanOut, t[5] = rstdOut, t[6] = x1,
 * t[7] = x2; i[0] = N (gamma's elements). xOut = x1 + x2 as stored in its dtype, then the layer
 * norm of xOut (run_layer_norm), so that a LayerNormBackward of xOut matches it exactly. */
static void run_add_layer_norm(aclOpExecutor *e) {
    Flat sum = flat_of(&e->t[1]), a = flat_of(&e->t[6]), b = flat_of(&e->t[7]);
    for (int64_t k = 0, n = numel(&e->t[1]); k < n; k++) st_flat(&sum, k, (float)ld_flat(&a, k) + (float)ld_flat(&b, k));
    run_layer_norm(e);
}

/* The OpDef's nine dtype combinations (add_layer_norm_def.cpp): x1, x2, gamma (= beta). */
static int add_layer_norm_dtypes_ok(int x1, int x2, int gamma) {
    static const int combos[9][3] = {{ACL_FLOAT, ACL_FLOAT16, ACL_FLOAT}, {ACL_FLOAT, ACL_BF16, ACL_FLOAT},
                                     {ACL_FLOAT16, ACL_FLOAT, ACL_FLOAT}, {ACL_BF16, ACL_FLOAT, ACL_FLOAT},
                                     {ACL_FLOAT16, ACL_FLOAT16, ACL_FLOAT}, {ACL_BF16, ACL_BF16, ACL_FLOAT},
                                     {ACL_FLOAT16, ACL_FLOAT16, ACL_FLOAT16}, {ACL_BF16, ACL_BF16, ACL_BF16},
                                     {ACL_FLOAT, ACL_FLOAT, ACL_FLOAT}};
    for (int c = 0; c < 9; c++)
        if (combos[c][0] == x1 && combos[c][1] == x2 && combos[c][2] == gamma) return 1;
    return 0;
}

/* Dtypes per the OpDef (161002): y and x take x1's dtype when x1 and x2 share it, else FLOAT;
 * mean and rstd FLOAT. Shapes per add_layer_norm_tiling.cpp (561002 at tiling): ranks 1-8,
 * x1 = x2 = y = x, gamma = beta = x1's trailing dims, mean = rstd = x1's leading dims then 1s,
 * no zero dim. biasOptional is not emulated and is refused. No 910 config exists. */
SIM_EXPORT aclnnStatus aclnnAddLayerNormGetWorkspaceSize(const aclTensor *x1, const aclTensor *x2, const aclTensor *gamma,
                                                         const aclTensor *beta, const aclTensor *bias, double eps,
                                                         bool additional_output, const aclTensor *y,
                                                         const aclTensor *mean, const aclTensor *rstd,
                                                         const aclTensor *x, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnAddLayerNorm";
    int r;
    if ((r = check(op, x1, "x1")) || (r = check(op, x2, "x2")) || (r = check(op, gamma, "gamma")) ||
        (r = check(op, beta, "beta")) || (r = check(op, y, "yOut")) || (r = check(op, mean, "meanOut")) ||
        (r = check(op, rstd, "rstdOut")) || (r = check(op, x, "xOut")))
        return r;
    (void)additional_output; /* xOut is written either way here; the kernel writes it when asked */
    if (bias) return bad(ACLNN_ERR_PARAM_INVALID, op, "biasOptional is not emulated");
    int out_dt = x1->dtype == x2->dtype ? x1->dtype : ACL_FLOAT;
    if (!add_layer_norm_dtypes_ok(x1->dtype, x2->dtype, gamma->dtype) || beta->dtype != gamma->dtype ||
        y->dtype != out_dt || x->dtype != out_dt || mean->dtype != ACL_FLOAT || rstd->dtype != ACL_FLOAT)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "the dtypes are not one of the OpDef's combinations");
    uint64_t rank = x1->ndim, g_rank = gamma->ndim;
    int shapes_ok = rank >= 1 && rank <= 8 && g_rank >= 1 && g_rank <= rank && same_shape(x1, x2) &&
                    same_shape(x1, y) && same_shape(x1, x) && same_shape(gamma, beta) && same_shape(mean, rstd) &&
                    mean->ndim == rank;
    for (uint64_t d = 0; shapes_ok && d < rank; d++) {
        int normed = d >= rank - g_rank;
        shapes_ok = x1->dims[d] > 0 && mean->dims[d] == (normed ? 1 : x1->dims[d]) &&
                    (!normed || gamma->dims[d - (rank - g_rank)] == x1->dims[d]);
    }
    if (!shapes_ok) return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "shapes of x1, x2, gamma, beta, mean, rstd, y or x do not fit");
    aclnnStatus s = make(op, x1->dtype, run_add_layer_norm, 0, ws, e);
    if (s) return s;
    const aclTensor *ts[8] = {y, x, gamma, beta, mean, rstd, x1, x2};
    for (int k = 0; k < 8; k++) (*e)->t[k] = *ts[k];
    (*e)->i[0] = numel(gamma);
    (*e)->i[1] = 1;
    (*e)->i[2] = 1;
    (*e)->i[3] = 3;
    (*e)->f[0] = eps;
    return 0;
}
PHASE2(AddLayerNorm)
