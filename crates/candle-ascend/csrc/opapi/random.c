/* Random operators: InplaceUniform and InplaceNormal, and dropout's DropoutGenMaskV2 and
 * DropoutDoMask. */
#include "aclnn.h"

/* ---- random fills: a counter-based generator keyed by (seed, offset, element) ---------------- */

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double unit(uint64_t seed, uint64_t offset, int64_t k, int stream) {
    return ((double)(mix(mix(seed ^ mix(offset)) + (uint64_t)k * 2 + (uint64_t)stream) >> 11) + 0.5) / 9007199254740992.0;
}

/* t[0] = selfRef; i[0] = 0 uniform / 1 normal; f[0], f[1] = from/to or mean/std; i[2], i[3] = seed, offset. */
static void run_random(aclOpExecutor *e) {
    It it;
    it_init(&it, &e->t[0], NULL);
    int64_t n = numel(&e->t[0]), off;
    for (int64_t k = 0; k < n; k++) {
        offsets(&e->t[0], k, &it, 1, &off);
        double u = unit((uint64_t)e->i[2], (uint64_t)e->i[3], k, 0), v;
        if (e->i[0] == 0) v = e->f[0] + (e->f[1] - e->f[0]) * u;
        else v = e->f[0] + e->f[1] * sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * unit((uint64_t)e->i[2], (uint64_t)e->i[3], k, 1));
        st(it.base, it.dt, off, v);
    }
}

static aclnnStatus random_op(const char *op, int kind, const aclTensor *t, double a, double b, uint64_t seed,
                             uint64_t offset, uint64_t *ws, aclOpExecutor **e) {
    int r;
    if ((r = check(op, t, "selfRef"))) return r;
    aclnnStatus s = make(op, t->dtype, run_random, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *t;
    (*e)->i[0] = kind;
    (*e)->f[0] = a;
    (*e)->f[1] = b;
    (*e)->i[2] = (int64_t)seed;
    (*e)->i[3] = (int64_t)offset;
    return 0;
}

SIM_EXPORT aclnnStatus aclnnInplaceUniformGetWorkspaceSize(const aclTensor *t, double from, double to, uint64_t seed,
                                                           uint64_t offset, uint64_t *ws, aclOpExecutor **e) {
    return random_op("aclnnInplaceUniform", 0, t, from, to, seed, offset, ws, e);
}
PHASE2(InplaceUniform)

SIM_EXPORT aclnnStatus aclnnInplaceNormalGetWorkspaceSize(const aclTensor *t, float mean, float std, int64_t seed,
                                                          int64_t offset, uint64_t *ws, aclOpExecutor **e) {
    return random_op("aclnnInplaceNormal", 1, t, mean, std, (uint64_t)seed, (uint64_t)offset, ws, e);
}
PHASE2(InplaceNormal)

/* ---- dropout (ops-math c41933244 random/dsa_gen_bit_mask, random/drop_out_do_mask) ----------- */

/* Mask bytes for n elements: one bit per element, padded to 128 bits (InferDSAOutShapeV2). */
static int64_t dropout_mask_bytes(int64_t n) { return (n + 127) / 128 * 128 / 8; }

/* Philox4x32-10 (Salmon et al., SC'11): 10 rounds over a 128-bit counter with a 64-bit key. */
static void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        c[0] = n0, c[1] = (uint32_t)p1, c[2] = n2, c[3] = (uint32_t)p0;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
}

/* t[0] = out (UINT8 mask); i[0] = seed, i[1] = offset, i[2] = elements; f[0] = drop prob.
 * The real parts draw from generators no source publishes (910B: the DSA engine, given seed and
 * the 128-bit counter {0, offset}; 910: an AICPU kernel). The emulator uses the one published
 * layout, ops-math's Ascend 950 kernel (stateless_drop_out_gen_mask_pt.h): Philox4x32-10 keyed
 * by the seed, counter {group, offset} (offset in the high 64 bits), element i taking word i % 4
 * of group i / 4, kept (bit 1, LSB first) when (word + ½)/2³² < the FLOAT keep probability 1 − p.
 * p = 0 keeps every bit, p = 1 none (FillScalar 0xFF / 0). */
static void run_gen_mask(aclOpExecutor *e) {
    uint8_t *m = (uint8_t *)host_base(&e->t[0]) + e->t[0].offset;
    int64_t bytes = numel(&e->t[0]), bits = bytes * 8;
    double p = e->f[0], keep = (double)(float)(1.0 - p);
    if (p == 0 || p == 1) {
        memset(m, p == 0 ? 0xFF : 0, (size_t)bytes);
        return;
    }
    uint64_t seed = (uint64_t)e->i[0], offset = (uint64_t)e->i[1];
    memset(m, 0, (size_t)bytes);
    for (int64_t g = 0; g < bits / 4; g++) {
        uint32_t c[4] = {(uint32_t)g, (uint32_t)((uint64_t)g >> 32), (uint32_t)offset, (uint32_t)(offset >> 32)};
        philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
        for (int w = 0; w < 4; w++) {
            int64_t i = g * 4 + w;
            if (((double)c[w] + 0.5) / 4294967296.0 < keep) m[i / 8] |= (uint8_t)(1u << (i % 8));
        }
    }
}

/* aclnn_dropout_gen_mask.cpp (V2): shape 1-8 entries, prob in [0, 1], out UINT8 of exactly
 * align(numel, 128)/8 elements; probDataType FLOAT, FLOAT16 or BF16 on 910B (others 561103) and
 * FLOAT or FLOAT16 per the 910 doc (its code ignores it: the doc is followed). The table's dtype
 * column is probDataType's. */
SIM_EXPORT aclnnStatus aclnnDropoutGenMaskV2GetWorkspaceSize(const aclIntArray *shape, double prob, int64_t seed,
                                                             int64_t offset, int32_t prob_dtype, aclTensor *out,
                                                             uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnDropoutGenMaskV2";
    int r;
    if (!shape) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "shape is null");
    if ((r = check(op, out, "out"))) return r;
    if (shape->size < 1 || shape->size > 8) return bad(ACLNN_ERR_PARAM_INVALID, op, "shape must have 1 to 8 entries");
    int64_t n = 1;
    for (uint64_t d = 0; d < shape->size; d++) {
        if (shape->values[d] < 0) return bad(ACLNN_ERR_PARAM_INVALID, op, "shape has a negative entry");
        n *= shape->values[d];
    }
    if (!(prob >= 0 && prob <= 1)) return bad(ACLNN_ERR_PARAM_INVALID, op, "prob must lie in [0, 1]");
    if (out->dtype != ACL_UINT8 || out->ndim != 1 || out->strides[0] != 1)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "out must be a contiguous 1-D UINT8 tensor");
    if (numel(out) != dropout_mask_bytes(n)) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must hold align(numel, 128)/8 bytes");
    if (prob_dtype != ACL_FLOAT && prob_dtype != ACL_FLOAT16 && prob_dtype != ACL_BF16)
        return bad(ACLNN_ERR_INNER_NULLPTR, op, "probDataType must be FLOAT, FLOAT16 or BF16");
    aclnnStatus s = make(op, prob_dtype, run_gen_mask, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->i[0] = seed;
    (*e)->i[1] = offset;
    (*e)->f[0] = prob;
    return 0;
}
PHASE2(DropoutGenMaskV2)

/* The keep probability 1 − p as the kernel gets it: a tensor of self's dtype (dropout_common.h). */
static float keep_in(int dt, double p) {
    float k = (float)(1.0 - p);
    if (dt == ACL_FLOAT16) return f16_to_f32(f32_to_f16(k));
    if (dt == ACL_BF16) return bf16_to_f32(f32_to_bf16(k));
    return k;
}

/* t[0] = out, t[1] = self, t[2] = mask; f[0] = drop prob. out = self·(1/keep) where the mask bit
 * is 1, else 0; p = 0 copies self, p = 1 gives zeros (dropout_common.h DoMask). */
static void run_do_mask(aclOpExecutor *e) {
    Flat out = flat_of(&e->t[0]), x = flat_of(&e->t[1]);
    const uint8_t *m = (const uint8_t *)host_base(&e->t[2]) + e->t[2].offset;
    double p = e->f[0];
    float scale = p == 1 ? 0 : 1.0f / keep_in(e->t[1].dtype, p);
    for (int64_t i = 0, n = numel(&e->t[1]); i < n; i++) {
        float v = (float)ld_flat(&x, i);
        int kept = p == 0 || (p != 1 && (m[i / 8] >> (i % 8) & 1));
        st_flat(&out, i, kept ? (p == 0 ? v : v * scale) : 0.0);
    }
}

/* aclnn_dropout_do_mask.cpp: self FLOAT/FLOAT16 (BF16 from DAV_2201), out of self's shape and a
 * dtype self casts to, mask UINT8 (and contiguous here) of at least align(numel, 128)/8
 * elements, prob in [0, 1], at most 8 dims; an empty self succeeds before the other checks. */
SIM_EXPORT aclnnStatus aclnnDropoutDoMaskGetWorkspaceSize(const aclTensor *x, const aclTensor *mask, double prob,
                                                          aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnDropoutDoMask";
    int r;
    if ((r = check(op, x, "self")) || (r = check(op, mask, "mask")) || (r = check(op, out, "out"))) return r;
    if (!is_float(out->dtype)) return bad(ACLNN_ERR_PARAM_INVALID, op, "self cannot be cast to out's dtype");
    if (!(prob >= 0 && prob <= 1)) return bad(ACLNN_ERR_PARAM_INVALID, op, "prob must lie in [0, 1]");
    if (x->ndim > 8 || !same_shape(x, out)) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must have self's shape (at most 8 dims)");
    if (mask->dtype != ACL_UINT8 || mask->ndim != 1 || mask->strides[0] != 1)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "mask must be a contiguous 1-D UINT8 tensor");
    if (numel(mask) < dropout_mask_bytes(numel(x))) return bad(ACLNN_ERR_PARAM_INVALID, op, "mask must hold align(numel, 128)/8 bytes");
    aclnnStatus s = make(op, x->dtype, run_do_mask, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *x;
    (*e)->t[2] = *mask;
    (*e)->f[0] = prob;
    return 0;
}
PHASE2(DropoutDoMask)
