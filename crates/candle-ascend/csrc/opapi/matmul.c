/* Matmul operators (BatchMatMul, Addmm): the cube unit's products, accumulated in FP32 in the
 * workspace. */
#include "aclnn.h"

/* How the cube unit reads its inputs (i[0]): as they are, rounded to FP16, or rounded to HF32
 * (FP32 with a 10-bit mantissa, round to nearest even). */
enum { CUBE_NATIVE, CUBE_FP16, CUBE_HF32 };

static float cube_input(double v, int mode) {
    float f = (float)v;
    if (mode == CUBE_FP16) return f16_to_f32(f32_to_f16(f));
    if (mode == CUBE_HF32 && isfinite(f)) {
        uint32_t x;
        memcpy(&x, &f, 4);
        x = (x + 0xfff + ((x >> 13) & 1)) & ~0x1fffu;
        memcpy(&f, &x, 4);
    }
    return f;
}

/* How the cube reads an FP32/BF16/FP16 matmul's inputs under cubeMathType, which must be in the
 * part's table row (ops-nn cube_util.cpp): a warning, not a refusal, for USE_FP16 with BF16. */
static int cube_mode(const char *op, int dtype, int8_t cube_math_type, int *mode) {
    int r;
    if ((r = soc_cube_math_type(op, dtype, cube_math_type))) return r;
    *mode = CUBE_NATIVE;
    if (dtype == ACL_FLOAT && (cube_math_type == 2 || (cube_math_type == 1 && aclsimSocFamily() == SIM_SOC_910)))
        *mode = CUBE_FP16;
    else if (dtype == ACL_FLOAT && (cube_math_type == 1 || cube_math_type == 3))
        *mode = CUBE_HF32;
    else if (dtype == ACL_BF16 && cube_math_type == 2) {
        fprintf(stderr, "[WARNING] %s: cubeMathType USE_FP16 with BF16 input computes in FP16\n", op);
        *mode = CUBE_FP16;
    }
    return 0;
}

/* t[0] = out (b, m, n), t[1] = self (b, m, k), t[2] = mat2 (b, k, n); batch dims broadcast. */
static void run_bmm(aclOpExecutor *e) {
    const aclTensor *o = &e->t[0], *a = &e->t[1], *b = &e->t[2];
    int64_t bs = o->dims[0], m = o->dims[1], n = o->dims[2], k = a->dims[2];
    void *pa = host_base(a), *pb = host_base(b), *po = host_base(o);
    float *acc = e->workspace;
    int mode = (int)e->i[0];
    int64_t sab = a->dims[0] == 1 ? 0 : a->strides[0], sbb = b->dims[0] == 1 ? 0 : b->strides[0];
    for (int64_t z = 0; z < bs; z++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                float s = 0;
                for (int64_t l = 0; l < k; l++)
                    s += cube_input(ld(pa, a->dtype, a->offset + z * sab + i * a->strides[1] + l * a->strides[2]), mode) *
                         cube_input(ld(pb, b->dtype, b->offset + z * sbb + l * b->strides[1] + j * b->strides[2]), mode);
                acc[(z * m + i) * n + j] = s;
            }
    for (int64_t z = 0; z < bs; z++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                st(po, o->dtype, o->offset + z * o->strides[0] + i * o->strides[1] + j * o->strides[2],
                   acc[(z * m + i) * n + j]);
}

SIM_EXPORT aclnnStatus aclnnBatchMatMulGetWorkspaceSize(const aclTensor *a, const aclTensor *b, aclTensor *out,
                                                        int8_t cube_math_type, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnBatchMatMul";
    int r;
    if ((r = check(op, a, "self")) || (r = check(op, b, "mat2")) || (r = check(op, out, "out"))) return r;
    if (a->ndim != 3 || b->ndim != 3 || out->ndim != 3) return bad(ACLNN_ERR_PARAM_INVALID, op, "operands must be 3-D");
    if (a->dims[2] != b->dims[1] || out->dims[1] != a->dims[1] || out->dims[2] != b->dims[2] ||
        (a->dims[0] != out->dims[0] && a->dims[0] != 1) || (b->dims[0] != out->dims[0] && b->dims[0] != 1))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "shapes are not (b, m, k) x (b, k, n) -> (b, m, n)");
    if (a->dtype != b->dtype || a->dtype != out->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "mixed dtypes are not inferable");
    if ((r = soc_dtype(op, "self", a->dtype))) return r;
    int mode;
    if ((r = cube_mode(op, a->dtype, cube_math_type, &mode))) return r;
    aclnnStatus s = make(op, a->dtype, run_bmm, (uint64_t)numel(out) * sizeof(float), ws, e);
    if (s) return s;
    (*e)->i[0] = mode;
    (*e)->t[0] = *out;
    (*e)->t[1] = *a;
    (*e)->t[2] = *b;
    return 0;
}
PHASE2(BatchMatMul)

/* t[0] = out (m, n), t[1] = self (broadcast to (m, n); strides in dims[]), t[2] = mat1 (m, k),
 * t[3] = mat2 (k, n); f[0] = beta, f[1] = alpha; i[0] = the cube's input mode. FP32
 * accumulation in the workspace, then out = beta·self + alpha·mat1·mat2. */
static void run_addmm(aclOpExecutor *e) {
    const aclTensor *o = &e->t[0], *c = &e->t[1], *a = &e->t[2], *b = &e->t[3];
    int64_t m = o->dims[0], n = o->dims[1], k = a->dims[1];
    void *pa = host_base(a), *pb = host_base(b), *pc = host_base(c), *po = host_base(o);
    float *acc = e->workspace;
    int mode = (int)e->i[0];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0;
            for (int64_t l = 0; l < k; l++)
                s += cube_input(ld(pa, a->dtype, a->offset + i * a->strides[0] + l * a->strides[1]), mode) *
                     cube_input(ld(pb, b->dtype, b->offset + l * b->strides[0] + j * b->strides[1]), mode);
            acc[i * n + j] = s;
        }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double self = ld(pc, c->dtype, c->offset + i * e->dims[0] + j * e->dims[1]);
            st(po, o->dtype, o->offset + i * o->strides[0] + j * o->strides[1], e->f[0] * self + e->f[1] * acc[i * n + j]);
        }
}

/* ops-nn e5c3fa932 matmul/mat_mul_v3 (aclnnAddmm.md, op_api aclnn_addmm.cpp, matmul_util.cpp
 * BuildRule): mat1 (m, k) and mat2 (k, n) 2-D of one dtype; self 0-, 1- or 2-D, broadcast to
 * (m, n); each dtype in the part's list; cubeMathType 0..3 per the table (CANN 8.0 refused 4). */
SIM_EXPORT aclnnStatus aclnnAddmmGetWorkspaceSize(const aclTensor *self, const aclTensor *a, const aclTensor *b,
                                                  const aclScalar *beta, const aclScalar *alpha, aclTensor *out,
                                                  int8_t cube_math_type, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnAddmm";
    int r;
    if ((r = check(op, self, "self")) || (r = check(op, a, "mat1")) || (r = check(op, b, "mat2")) ||
        (r = check(op, out, "out")))
        return r;
    if (!beta || !alpha) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "beta or alpha is null");
    if ((r = soc_dtype(op, "mat1", a->dtype)) || (r = soc_dtype(op, "mat2", b->dtype)) ||
        (r = soc_dtype(op, "self", self->dtype)) || (r = soc_dtype(op, "out", out->dtype)))
        return r;
    if (a->dtype != b->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "mat1 and mat2 must share a dtype");
    int mode;
    if ((r = cube_mode(op, a->dtype, cube_math_type, &mode))) return r;
    if (a->ndim != 2 || b->ndim != 2 || a->dims[1] != b->dims[0])
        return bad(ACLNN_ERR_PARAM_INVALID, op, "mat1 and mat2 must be (m, k) and (k, n)");
    if (out->ndim != 2 || out->dims[0] != a->dims[0] || out->dims[1] != b->dims[1])
        return bad(ACLNN_ERR_PARAM_INVALID, op, "out must be (m, n)");
    int64_t st_self[SIM_MAX_DIMS];
    if (self->ndim > 2 || !bcast(self, out, st_self)) return bad(ACLNN_ERR_PARAM_INVALID, op, "self must broadcast to (m, n)");
    aclnnStatus s = make(op, a->dtype, run_addmm, (uint64_t)numel(out) * sizeof(float), ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *self;
    (*e)->t[2] = *a;
    (*e)->t[3] = *b;
    (*e)->dims[0] = st_self[0];
    (*e)->dims[1] = st_self[1];
    (*e)->f[0] = scalar_value(beta);
    (*e)->f[1] = scalar_value(alpha);
    (*e)->i[0] = mode;
    return 0;
}
PHASE2(Addmm)
