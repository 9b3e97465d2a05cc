/* Optimizer operators: ApplyAdamWV2. */
#include "aclnn.h"

/* aclnnApplyAdamWV2 (ops-nn e5c3fa932 optim/apply_adam_w_v2: op_api/aclnn_apply_adam_w_v2.cpp,
 * op_kernel/apply_adam_w_v2_fp.h). In place on var, m, v (and maxGradNorm under amsgrad), with
 * t = step + 1 (the kernel adds the 1; torch_npu passes step − 1):
 *   g = maximize ? −grad : grad;  var ← var·(1 − lr·wd);  m ← m + (1 − β1)(g − m);
 *   v ← β2·v + (1 − β2)·g²;  denom = √(amsgrad ? max(maxGradNorm, v) : v) / √(1 − β2ᵗ) + eps;
 *   var ← var − lr/(1 − β1ᵗ) · m / denom.
 * 16-bit tensors are computed in FP32. t[0..4] = var, m, v, grad, step; t[5] = maxGradNorm when
 * i[0] (amsgrad); f = lr, β1, β2, wd, eps; i[1] = maximize. */
static void run_apply_adamw(aclOpExecutor *e) {
    It its[5];
    int amsgrad = (int)e->i[0], n_it = amsgrad ? 5 : 4;
    for (int j = 0; j < 4; j++) it_init(&its[j], &e->t[j], &e->t[0]);
    if (amsgrad) it_init(&its[4], &e->t[5], &e->t[0]);
    double t = ld(host_base(&e->t[4]), e->t[4].dtype, e->t[4].offset) + 1.0;
    float lr = (float)e->f[0], b1 = (float)e->f[1], b2 = (float)e->f[2], wd = (float)e->f[3], eps = (float)e->f[4];
    float step_size = lr / (1.0f - powf(b1, (float)t)), bias2_sqrt = sqrtf(1.0f - powf(b2, (float)t));
    int64_t n = numel(&e->t[0]), offs[5];
    for (int64_t k = 0; k < n; k++) {
        offsets(&e->t[0], k, its, n_it, offs);
        float g = (float)ld(its[3].base, its[3].dt, offs[3]);
        if (e->i[1]) g = -g;
        float var = (float)ld(its[0].base, its[0].dt, offs[0]) * (1.0f - lr * wd);
        float m = (float)ld(its[1].base, its[1].dt, offs[1]);
        float v = (float)ld(its[2].base, its[2].dt, offs[2]);
        m = m + (1.0f - b1) * (g - m);
        v = b2 * v + (1.0f - b2) * g * g;
        float second = v;
        if (amsgrad) {
            float mx = (float)ld(its[4].base, its[4].dt, offs[4]);
            second = mx > v ? mx : v;
            st(its[4].base, its[4].dt, offs[4], second);
        }
        float denom = sqrtf(second) / bias2_sqrt + eps;
        st(its[0].base, its[0].dt, offs[0], var - step_size * m / denom);
        st(its[1].base, its[1].dt, offs[1], m);
        st(its[2].base, its[2].dt, offs[2], v);
    }
}

SIM_EXPORT aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(aclTensor *var, aclTensor *m, aclTensor *v,
                                                         aclTensor *max_grad_norm, const aclTensor *grad,
                                                         const aclTensor *step, float lr, float beta1, float beta2,
                                                         float weight_decay, float eps, bool amsgrad, bool maximize,
                                                         uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnApplyAdamWV2";
    int r;
    if ((r = check(op, var, "varRef")) || (r = check(op, m, "mRef")) || (r = check(op, v, "vRef")) ||
        (r = check(op, grad, "grad")) || (r = check(op, step, "step")))
        return r;
    if (amsgrad && (r = check(op, max_grad_norm, "maxGradNormOptionalRef"))) return r;
    /* CheckParams: every tensor's dtype in the part's list; step FLOAT or INT64 with one element. */
    if ((r = soc_dtype(op, "mRef", m->dtype)) || (r = soc_dtype(op, "vRef", v->dtype)) ||
        (r = soc_dtype(op, "grad", grad->dtype)))
        return r;
    if (max_grad_norm && (r = soc_dtype(op, "maxGradNormOptionalRef", max_grad_norm->dtype))) return r;
    if (step->dtype != ACL_FLOAT && step->dtype != ACL_INT64) return bad(ACLNN_ERR_PARAM_INVALID, op, "step must be FLOAT or INT64");
    if (numel(step) != 1) return bad(ACLNN_ERR_PARAM_INVALID, op, "step must have exactly one element");
    /* CheckShape: m, v, grad (and a given maxGradNorm) have var's shape. */
    if (!same_shape(m, var) || !same_shape(v, var) || !same_shape(grad, var) ||
        (max_grad_norm && !same_shape(max_grad_norm, var)))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "mRef, vRef, grad and maxGradNormOptionalRef must have varRef's shape");
    aclnnStatus s = make(op, var->dtype, run_apply_adamw, 0, ws, e);
    if (s) return s;
    aclOpExecutor *x = *e;
    x->t[0] = *var;
    x->t[1] = *m;
    x->t[2] = *v;
    x->t[3] = *grad;
    x->t[4] = *step;
    x->i[0] = amsgrad;
    x->i[1] = maximize;
    if (amsgrad) x->t[5] = *max_grad_norm;
    x->f[0] = lr;
    x->f[1] = beta1;
    x->f[2] = beta2;
    x->f[3] = weight_decay;
    x->f[4] = eps;
    return 0;
}
PHASE2(ApplyAdamWV2)
