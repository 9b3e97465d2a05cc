/* Attention operators: FlashAttentionScore and FlashAttentionScoreGrad (ops-transformer c29bc10
 * attention/flash_attention_score[_grad]). */
#include "aclnn.h"

/* Geometry of one FA call: batch, heads, query and key lengths, head dim, layout code. */
typedef struct { int64_t b, n, s1, s2, d; int layout; } FaGeom;
enum { FA_BSH = 0, FA_SBH = 1, FA_BSND = 2, FA_BNSD = 3 };

/* Flat index of (b, n, s, d) in a tensor of the layout, sequence length s_len. */
static int64_t fa_index(const FaGeom *g, int64_t b, int64_t n, int64_t s, int64_t s_len, int64_t d) {
    switch (g->layout) {
    case FA_SBH: return ((s * g->b + b) * g->n + n) * g->d + d;
    case FA_BNSD: return ((b * g->n + n) * s_len + s) * g->d + d;
    default: return ((b * s_len + s) * g->n + n) * g->d + d; /* BSH and BSND */
    }
}

/* Whether key j is masked for query i of (b, n): attenMask of shape [B,N,S1,S2], [B,1,S1,S2],
 * [1,1,S1,S2] or [S1,S2], 1 = masked. */
static int fa_masked(Flat *m, const aclTensor *mt, const FaGeom *g, int64_t b, int64_t n, int64_t i, int64_t j) {
    if (!mt) return 0;
    int64_t bb = mt->ndim == 4 && mt->dims[0] > 1 ? b : 0, nn = mt->ndim == 4 && mt->dims[1] > 1 ? n : 0;
    int64_t nd = mt->ndim == 4 ? mt->dims[1] : 1;
    return ld_flat(m, ((bb * nd + nn) * g->s1 + i) * g->s2 + j) != 0;
}

/* pse (realShiftOptional) of (b, n, i, j): shape [B,N,S1,S2], [B,N,1,S2] or [1,N,S1,S2]; 0 without. */
static double fa_pse(Flat *p, const aclTensor *pt, const FaGeom *g, int64_t b, int64_t n, int64_t i, int64_t j) {
    if (!pt) return 0;
    int64_t bb = pt->dims[0] > 1 ? b : 0, ii = pt->dims[2] > 1 ? i : 0;
    return ld_flat(p, ((bb * g->n + n) * pt->dims[2] + ii) * g->s2 + j);
}

/* Scores of query row i of (b, n) against every key: scale·(pse + q·kᵀ) (the documented
 * formula), masked keys −FLT_MAX (FA's replacement value, not −inf). */
static void fa_scores(Flat *q, Flat *k, Flat *m, const aclTensor *mt, Flat *p, const aclTensor *pt, const FaGeom *g,
                      double scale, int64_t b, int64_t n, int64_t i, float *s) {
    for (int64_t j = 0; j < g->s2; j++) {
        double acc = 0;
        for (int64_t d = 0; d < g->d; d++)
            acc += ld_flat(q, fa_index(g, b, n, i, g->s1, d)) * ld_flat(k, fa_index(g, b, n, j, g->s2, d));
        acc += fa_pse(p, pt, g, b, n, i, j);
        s[j] = fa_masked(m, mt, g, b, n, i, j) ? -3.4028234663852886e38f : (float)(acc * scale);
    }
}

/* The dropout factor of element (b, n, i, j): bit (LSB first) of the flattened (B, N, S1, S2)
 * index over keepProb, or 1 without a mask. */
static double fa_drop(const uint8_t *mask, const FaGeom *g, double keep, int64_t b, int64_t n, int64_t i, int64_t j) {
    if (!mask) return 1.0;
    int64_t k = ((b * g->n + n) * g->s1 + i) * g->s2 + j;
    return (mask[k / 8] >> (k % 8) & 1) ? 1.0 / keep : 0.0;
}

/* Forward. t[0] = out, t[1] = q, t[2] = k, t[3] = v, t[4] = softmaxMax, t[5] = softmaxSum,
 * t[6] = attenMask (ndim 0: none), t[7] = dropMask (ndim 0: none), t[8] = pse (ndim 0: none);
 * dims[0..5] = the geometry;
 * f[0] = scale, f[1] = keepProb; i[0] = innerPrecise. */
static void fa_geom_load(const aclOpExecutor *e, FaGeom *g) {
    g->b = e->dims[0], g->n = e->dims[1], g->s1 = e->dims[2], g->s2 = e->dims[3], g->d = e->dims[4];
    g->layout = (int)e->dims[5];
}

static void run_flash_attention(aclOpExecutor *e) {
    FaGeom g;
    fa_geom_load(e, &g);
    Flat out = flat_of(&e->t[0]), q = flat_of(&e->t[1]), k = flat_of(&e->t[2]), v = flat_of(&e->t[3]);
    Flat mx = flat_of(&e->t[4]), sm = flat_of(&e->t[5]), m = flat_of(&e->t[6]), p = flat_of(&e->t[8]);
    const aclTensor *mt = e->t[6].ndim ? &e->t[6] : NULL, *pt = e->t[8].ndim ? &e->t[8] : NULL;
    const uint8_t *drop = e->t[7].ndim ? (const uint8_t *)host_base(&e->t[7]) + e->t[7].offset : NULL;
    float *s = malloc(sizeof(float) * (size_t)g.s2);
    if (!s) { aclsimKernelFault("aclnnFlashAttentionScore: out of host memory"); return; }
    for (int64_t b = 0; b < g.b; b++)
        for (int64_t n = 0; n < g.n; n++)
            for (int64_t i = 0; i < g.s1; i++) {
                fa_scores(&q, &k, &m, mt, &p, pt, &g, e->f[0], b, n, i, s);
                float max = -3.4028234663852886e38f;
                int all_masked = 1;
                for (int64_t j = 0; j < g.s2; j++) {
                    if (s[j] > max) max = s[j];
                    if (!fa_masked(&m, mt, &g, b, n, i, j)) all_masked = 0;
                }
                double sum = 0;
                for (int64_t j = 0; j < g.s2; j++) sum += exp((double)s[j] - max);
                for (int64_t c = 0; c < 8; c++) {
                    st_flat(&mx, ((b * g.n + n) * g.s1 + i) * 8 + c, max);
                    st_flat(&sm, ((b * g.n + n) * g.s1 + i) * 8 + c, sum);
                }
                int zero_row = all_masked && e->i[0] == 2; /* innerPrecise 2: invalid rows give 0 */
                for (int64_t d = 0; d < g.d; d++) {
                    double acc = 0;
                    for (int64_t j = 0; !zero_row && j < g.s2; j++) {
                        double p = exp((double)s[j] - max) / sum * fa_drop(drop, &g, e->f[1], b, n, i, j);
                        acc += p * ld_flat(&v, fa_index(&g, b, n, j, g.s2, d));
                    }
                    st_flat(&out, fa_index(&g, b, n, i, g.s1, d), acc);
                }
            }
    free(s);
}

/* Layout, shapes and the arguments both ops share (FA L2 AnalysisAxis, tiling AnalyzeAttrs,
 * attenMask and dropMask analysis). Only what the emulator runs is accepted: no padding mask or
 * prefix, sparseMode 0 without a band, Dv = Dk. */
static int fa_check(const char *op, const aclTensor *q, const aclTensor *k, const aclTensor *v, const aclTensor *pse,
                    const aclTensor *drop, const aclTensor *pad, const aclTensor *mask, const aclIntArray *prefix,
                    double keep, int64_t pre, int64_t next, int64_t heads, const char *layout, int64_t sparse,
                    FaGeom *g) {
    int r;
    if (!layout) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "inputLayout is null");
    if ((r = check(op, q, "query")) || (r = check(op, k, "key")) || (r = check(op, v, "value"))) return r;
    if (q->dtype != k->dtype || q->dtype != v->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "query, key and value must share a dtype");
    if (pad || prefix) return bad(ACLNN_ERR_PARAM_INVALID, op, "paddingMask and prefix are not emulated");
    if (heads <= 0) return bad(ACLNN_ERR_PARAM_INVALID, op, "head_num must > 0");
    int code = !strcmp(layout, "BSH") ? FA_BSH : !strcmp(layout, "SBH") ? FA_SBH : !strcmp(layout, "BSND") ? FA_BSND
             : !strcmp(layout, "BNSD") ? FA_BNSD : -1;
    if (code < 0) return bad(ACLNN_ERR_PARAM_INVALID, op, "inputLayout must be BSH, SBH, BSND or BNSD");
    uint64_t rank = code <= FA_SBH ? 3 : 4;
    if (q->ndim != rank || k->ndim != rank || v->ndim != rank)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "query, key and value must have the layout's rank");
    g->layout = code;
    if (code == FA_BSH || code == FA_SBH) {
        int bi = code == FA_BSH ? 0 : 1;
        if (q->dims[2] % heads) return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "H must be a multiple of head_num");
        g->b = q->dims[bi], g->n = heads, g->d = q->dims[2] / heads;
        g->s1 = q->dims[1 - bi], g->s2 = k->dims[1 - bi];
        if (k->dims[bi] != g->b || k->dims[2] != q->dims[2]) return bad(ACLNN_ERR_PARAM_INVALID, op, "key must match query's B, N and D here");
    } else {
        int ni = code == FA_BSND ? 2 : 1, si = code == FA_BSND ? 1 : 2;
        if (q->dims[ni] != heads) return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "head_num must be query's N dim");
        g->b = q->dims[0], g->n = heads, g->d = q->dims[3], g->s1 = q->dims[si], g->s2 = k->dims[si];
        if (k->dims[0] != g->b || k->dims[ni] != heads || k->dims[3] != g->d)
            return bad(ACLNN_ERR_PARAM_INVALID, op, "key must match query's B, N and D here");
    }
    if (!same_shape(k, v)) return bad(ACLNN_ERR_PARAM_INVALID, op, "value must have key's shape here (Dv = Dk)");
    if (g->d <= 0 || g->d > 768) return bad(ACLNN_ERR_PARAM_INVALID, op, "Head dim must <= 768");
    /* aclnnFlashAttentionScore.md 约束说明: B 1~2M, N 1~256, S 1~1M. */
    if (g->n > 256) return bad(ACLNN_ERR_PARAM_INVALID, op, "N (head_num) must be in [1, 256]");
    if (g->b < 1 || g->b > 2 * 1024 * 1024) return bad(ACLNN_ERR_PARAM_INVALID, op, "B must be in [1, 2M]");
    if (g->s1 < 1 || g->s2 < 1 || g->s1 > 1024 * 1024 || g->s2 > 1024 * 1024)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "S must be in [1, 1M]");
    if (!(keep > 0 && keep <= 1)) return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "keepProb value must be in range of (0, 1]");
    if (sparse != 0) return bad(ACLNN_ERR_PARAM_INVALID, op, "only sparseMode 0 is emulated");
    if (pre < g->s1 || next < g->s2) return bad(ACLNN_ERR_PARAM_INVALID, op, "a band (preTokens/nextTokens below S) is not emulated");
    if (mask) {
        if ((r = check(op, mask, "attenMask"))) return r;
        if (mask->dtype != ACL_BOOL && mask->dtype != ACL_UINT8)
            return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "invalid attenMask dtype, only support bool or uint8");
        /* The tiling's shape types in its order (flash_attention_score_tiling_general.cpp
         * L1515-1530): [1,1,S1,S2], [B,1,S1,S2], [B,N,S1,S2]; so [1,N,S1,S2] only when B is 1. */
        int64_t d0 = mask->ndim == 4 ? mask->dims[0] : 0, d1 = mask->ndim == 4 ? mask->dims[1] : 0;
        int ok = mask->ndim == 2 ? mask->dims[0] == g->s1 && mask->dims[1] == g->s2
               : mask->ndim == 4 && mask->dims[2] == g->s1 && mask->dims[3] == g->s2 &&
                     ((d0 == 1 && d1 == 1) || (d0 == g->b && d1 == 1) || (d0 == g->b && d1 == g->n));
        if (!ok) return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "atten_mask must be [B,N,Sq,Skv], [B,1,Sq,Skv], [1,1,Sq,Skv] or [Sq,Skv]");
    }
    if (pse) {
        /* aclnnFlashAttentionScore.md: realShiftOptional has query's dtype and the shape
         * [B,N,S,S], [B,N,1,Skv] or [1,N,S,S]. */
        if ((r = check(op, pse, "realShiftOptional"))) return r;
        if (pse->dtype != q->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "realShiftOptional must have query's dtype");
        int ok = pse->ndim == 4 && pse->dims[1] == g->n && pse->dims[3] == g->s2 &&
                 ((pse->dims[0] == g->b && (pse->dims[2] == g->s1 || pse->dims[2] == 1)) ||
                  (pse->dims[0] == 1 && pse->dims[2] == g->s1));
        if (!ok) return bad(ACLNN_ERR_PARAM_INVALID, op, "realShiftOptional must be [B,N,S,S], [B,N,1,Skv] or [1,N,S,S]");
    }
    if (drop) {
        if ((r = check(op, drop, "dropMask"))) return r;
        if (drop->dtype != ACL_UINT8 || drop->ndim != 1 || drop->strides[0] != 1)
            return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "dropMask must be a contiguous 1-D UINT8 tensor");
        if (numel(drop) < (g->b * g->n * g->s1 * g->s2 + 7) / 8)
            return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "dropMask must hold a bit per (B, N, S1, S2) element");
    }
    return 0;
}

/* softmaxMax and softmaxSum: FLOAT (B, N, S1, 8). */
static int fa_stats_ok(const aclTensor *t, const FaGeom *g) {
    return t->dtype == ACL_FLOAT && t->ndim == 4 && t->dims[0] == g->b && t->dims[1] == g->n && t->dims[2] == g->s1 &&
           t->dims[3] == 8;
}

static void fa_store(aclOpExecutor *e, const FaGeom *g, const aclTensor *mask, const aclTensor *drop,
                     const aclTensor *pse) {
    int64_t dims[6] = {g->b, g->n, g->s1, g->s2, g->d, g->layout};
    memcpy(e->dims, dims, sizeof dims);
    e->ndims = 6;
    if (mask) e->t[6] = *mask;
    else e->t[6].ndim = 0;
    if (drop) e->t[7] = *drop;
    else e->t[7].ndim = 0;
    if (pse) e->t[8] = *pse;
    else e->t[8].ndim = 0;
}

SIM_EXPORT aclnnStatus aclnnFlashAttentionScoreGetWorkspaceSize(
    const aclTensor *q, const aclTensor *k, const aclTensor *v, const aclTensor *pse, const aclTensor *drop,
    const aclTensor *pad, const aclTensor *mask, const aclIntArray *prefix, double scale, double keep, int64_t pre,
    int64_t next, int64_t heads, char *layout, int64_t inner_precise, int64_t sparse, const aclTensor *softmax_max,
    const aclTensor *softmax_sum, const aclTensor *softmax_out, const aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnFlashAttentionScore";
    (void)softmax_out; /* unused by the operator (FA L2: "l0SoftmaxOutOut not used now") */
    int r;
    if (!softmax_max || !softmax_sum || !out) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "softmaxMaxOut, softmaxSumOut or attentionOutOut is null");
    FaGeom g;
    if ((r = fa_check(op, q, k, v, pse, drop, pad, mask, prefix, keep, pre, next, heads, layout, sparse, &g))) return r;
    if ((r = check(op, softmax_max, "softmaxMaxOut")) || (r = check(op, softmax_sum, "softmaxSumOut")) ||
        (r = check(op, out, "attentionOutOut")))
        return r;
    if (!fa_stats_ok(softmax_max, &g) || !fa_stats_ok(softmax_sum, &g))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "softmaxMaxOut and softmaxSumOut must be FLOAT (B, N, S1, 8)");
    if (!same_shape(out, q) || out->dtype != q->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "attentionOutOut must be like query");
    aclnnStatus s = make(op, q->dtype, run_flash_attention, 0, ws, e);
    if (s) return s;
    const aclTensor *ts[6] = {out, q, k, v, softmax_max, softmax_sum};
    for (int c = 0; c < 6; c++) (*e)->t[c] = *ts[c];
    fa_store(*e, &g, mask, drop, pse);
    (*e)->f[0] = scale;
    (*e)->f[1] = keep;
    (*e)->i[0] = inner_precise;
    return 0;
}
PHASE2(FlashAttentionScore)

/* Backward. t[0] = dq, t[1] = q, t[2] = k, t[3] = v, t[4] = softmaxMax, t[5] = softmaxSum,
 * t[6] = attenMask, t[7] = dropMask; the executor's second half is not enough for dy, attentionIn,
 * dk and dv, so they ride in a side block (FaGradExtra) that the executor owns via workspace 0. */
typedef struct { aclTensor dy, out, dk, dv; } FaGradExtra;

static void run_flash_attention_grad(aclOpExecutor *e) {
    FaGeom g;
    fa_geom_load(e, &g);
    FaGradExtra *x = (FaGradExtra *)(intptr_t)e->i[1];
    Flat dq = flat_of(&e->t[0]), q = flat_of(&e->t[1]), k = flat_of(&e->t[2]), v = flat_of(&e->t[3]);
    Flat mx = flat_of(&e->t[4]), sm = flat_of(&e->t[5]), m = flat_of(&e->t[6]), p = flat_of(&e->t[8]);
    Flat dy = flat_of(&x->dy), out = flat_of(&x->out), dk = flat_of(&x->dk), dv = flat_of(&x->dv);
    const aclTensor *mt = e->t[6].ndim ? &e->t[6] : NULL, *pt = e->t[8].ndim ? &e->t[8] : NULL;
    const uint8_t *drop = e->t[7].ndim ? (const uint8_t *)host_base(&e->t[7]) + e->t[7].offset : NULL;
    size_t kv = (size_t)(g.s2 * g.d);
    float *s = malloc(sizeof(float) * (size_t)g.s2);
    double *acc_k = malloc(sizeof(double) * kv), *acc_v = malloc(sizeof(double) * kv), *acc_q = malloc(sizeof(double) * (size_t)g.d);
    if (!s || !acc_k || !acc_v || !acc_q) {
        aclsimKernelFault("aclnnFlashAttentionScoreGrad: out of host memory");
        goto done;
    }
    for (int64_t b = 0; b < g.b; b++)
        for (int64_t n = 0; n < g.n; n++) {
            memset(acc_k, 0, sizeof(double) * kv);
            memset(acc_v, 0, sizeof(double) * kv);
            for (int64_t i = 0; i < g.s1; i++) {
                fa_scores(&q, &k, &m, mt, &p, pt, &g, e->f[0], b, n, i, s);
                double max = ld_flat(&mx, ((b * g.n + n) * g.s1 + i) * 8), sum = ld_flat(&sm, ((b * g.n + n) * g.s1 + i) * 8);
                double row = 0; /* D_i = dy_i · out_i */
                for (int64_t d = 0; d < g.d; d++)
                    row += ld_flat(&dy, fa_index(&g, b, n, i, g.s1, d)) * ld_flat(&out, fa_index(&g, b, n, i, g.s1, d));
                memset(acc_q, 0, sizeof(double) * (size_t)g.d);
                for (int64_t j = 0; j < g.s2; j++) {
                    double p = exp((double)s[j] - max) / sum, z = fa_drop(drop, &g, e->f[1], b, n, i, j), dp = 0;
                    for (int64_t d = 0; d < g.d; d++) {
                        double gy = ld_flat(&dy, fa_index(&g, b, n, i, g.s1, d));
                        dp += gy * ld_flat(&v, fa_index(&g, b, n, j, g.s2, d));
                        acc_v[j * g.d + d] += p * z * gy;
                    }
                    double ds = fa_masked(&m, mt, &g, b, n, i, j) ? 0 : p * (dp * z - row) * e->f[0];
                    for (int64_t d = 0; d < g.d; d++) {
                        acc_q[d] += ds * ld_flat(&k, fa_index(&g, b, n, j, g.s2, d));
                        acc_k[j * g.d + d] += ds * ld_flat(&q, fa_index(&g, b, n, i, g.s1, d));
                    }
                }
                for (int64_t d = 0; d < g.d; d++) st_flat(&dq, fa_index(&g, b, n, i, g.s1, d), acc_q[d]);
            }
            for (int64_t j = 0; j < g.s2; j++)
                for (int64_t d = 0; d < g.d; d++) {
                    st_flat(&dk, fa_index(&g, b, n, j, g.s2, d), acc_k[j * g.d + d]);
                    st_flat(&dv, fa_index(&g, b, n, j, g.s2, d), acc_v[j * g.d + d]);
                }
        }
done:
    free(s);
    free(acc_k);
    free(acc_v);
    free(acc_q);
    free(x);
}

SIM_EXPORT aclnnStatus aclnnFlashAttentionScoreGradGetWorkspaceSize(
    const aclTensor *q, const aclTensor *k, const aclTensor *v, const aclTensor *dy, const aclTensor *pse,
    const aclTensor *drop, const aclTensor *pad, const aclTensor *mask, const aclTensor *softmax_max,
    const aclTensor *softmax_sum, const aclTensor *softmax_in, const aclTensor *attention_in, const aclIntArray *prefix,
    double scale, double keep, int64_t pre, int64_t next, int64_t heads, char *layout, int64_t inner_precise,
    int64_t sparse, const aclTensor *dq, const aclTensor *dk, const aclTensor *dv, const aclTensor *dpse, uint64_t *ws,
    aclOpExecutor **e) {
    const char *op = "aclnnFlashAttentionScoreGrad";
    (void)softmax_in, (void)dpse, (void)inner_precise; /* unused by the operator */
    int r;
    if (!dy || !attention_in || !dq || !dk || !dv) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "dy, attentionIn, dqOut, dkOut or dvOut is null");
    FaGeom g;
    if ((r = fa_check(op, q, k, v, pse, drop, pad, mask, prefix, keep, pre, next, heads, layout, sparse, &g))) return r;
    if ((r = check(op, dy, "dy")) || (r = check(op, attention_in, "attentionIn")) || (r = check(op, dq, "dqOut")) ||
        (r = check(op, dk, "dkOut")) || (r = check(op, dv, "dvOut")))
        return r;
    if (!softmax_max || !softmax_sum) return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "softmax_max or softmax_sum is nullptr.");
    if ((r = check(op, softmax_max, "softmaxMax")) || (r = check(op, softmax_sum, "softmaxSum"))) return r;
    if (!fa_stats_ok(softmax_max, &g) || !fa_stats_ok(softmax_sum, &g))
        return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "softmaxMax and softmaxSum must be FLOAT (B, N, S1, 8)");
    if (keep < 1 && !drop) return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "keepProb < 1 needs dropMask");
    if (!same_shape(dy, q) || !same_shape(attention_in, q) || attention_in->dtype != q->dtype || dy->dtype != q->dtype)
        return bad(ACLNN_ERR_INNER_TILING_ERROR, op, "dy and attentionIn must be like query");
    if (!same_shape(dq, q) || !same_shape(dk, k) || !same_shape(dv, v) || dq->dtype != q->dtype || dk->dtype != q->dtype ||
        dv->dtype != q->dtype)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "dqOut, dkOut and dvOut must be like query, key and value");
    FaGradExtra *x = malloc(sizeof *x);
    if (!x) return bad(ACLNN_ERR_INNER, op, "out of host memory");
    aclnnStatus s = make(op, q->dtype, run_flash_attention_grad, 0, ws, e);
    if (s) {
        free(x);
        return s;
    }
    x->dy = *dy, x->out = *attention_in, x->dk = *dk, x->dv = *dv;
    const aclTensor *ts[6] = {dq, q, k, v, softmax_max, softmax_sum};
    for (int c = 0; c < 6; c++) (*e)->t[c] = *ts[c];
    fa_store(*e, &g, mask, drop, pse);
    (*e)->f[0] = scale;
    (*e)->f[1] = keep;
    (*e)->i[1] = (int64_t)(intptr_t)x;
    return 0;
}
PHASE2(FlashAttentionScoreGrad)
