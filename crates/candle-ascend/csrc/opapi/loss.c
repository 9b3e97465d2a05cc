/* Loss operators: NLLLoss and NLLLossBackward. */
#include "aclnn.h"

/* The NLL operands' shared checks (op_api aclnn_nll_loss.cpp, aclnn_nll_loss_backward.cpp at
 * ops-nn e5c3fa932): weight required, of self's dtype and (C,); target INT64, INT32 or UINT8;
 * self (N, C) with target (N,), or self (C,) with target (); reduction 0 none, 1 mean, 2 sum. */
static int nll_check(const char *op, const aclTensor *x, const aclTensor *target, const aclTensor *weight,
                     int64_t reduction) {
    int r;
    if ((r = check(op, x, "self")) || (r = check(op, target, "target")) || (r = check(op, weight, "weight"))) return r;
    if (weight->dtype != x->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "weight must have self's dtype");
    if (target->dtype != ACL_INT64 && target->dtype != ACL_INT32 && target->dtype != ACL_UINT8)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "target must be INT64, INT32 or UINT8");
    if (reduction < 0 || reduction > 2) return bad(ACLNN_ERR_PARAM_INVALID, op, "reduction must be 0, 1 or 2");
    int two_d = x->ndim == 2 && target->ndim == 1 && target->dims[0] == x->dims[0];
    int one_d = x->ndim == 1 && target->ndim == 0;
    if (!two_d && !one_d) return bad(ACLNN_ERR_PARAM_INVALID, op, "self must be (N, C) with target (N,), or (C,) with target ()");
    int64_t classes = x->dims[x->ndim - 1];
    if (weight->ndim != 1 || weight->dims[0] != classes) return bad(ACLNN_ERR_PARAM_INVALID, op, "weight must be (C,)");
    return 0;
}

/* The class of row i, or −1 for an ignored row; a class outside 0..C is a kernel fault. */
static int64_t nll_class(aclOpExecutor *e, const char *op, const aclTensor *target, int64_t i, int64_t classes) {
    Flat t = flat_of(target);
    int64_t c = (int64_t)ld_flat(&t, i);
    if (c == e->i[1]) return -1;
    if (c < 0 || c >= classes) {
        aclsimKernelFault("%s: target %lld out of range 0..%lld", op, (long long)c, (long long)classes);
        return -1;
    }
    return c;
}

/* t[0] = out, t[1] = totalWeightOut, t[2] = self, t[3] = target, t[4] = weight; i[0] = reduction,
 * i[1] = ignoreIndex. Ignored rows add nothing to the loss or the total weight, so a mean over
 * no row is 0/0 = NaN, as torch (ops-nn e5c3fa932 loss/nll_loss: Ascend950 kernel, golden.py). */
static void run_nll_loss(aclOpExecutor *e) {
    const aclTensor *x = &e->t[2], *target = &e->t[3];
    Flat out = flat_of(&e->t[0]), total = flat_of(&e->t[1]), xs = flat_of(x), w = flat_of(&e->t[4]);
    int64_t classes = x->dims[x->ndim - 1], rows = x->ndim == 2 ? x->dims[0] : 1;
    double loss = 0, weight = 0;
    for (int64_t i = 0; i < rows; i++) {
        int64_t c = nll_class(e, "aclnnNLLLoss", target, i, classes);
        double v = c < 0 ? 0 : -ld_flat(&w, c) * ld_flat(&xs, i * classes + c);
        if (c >= 0) weight += ld_flat(&w, c);
        if (e->i[0] == 0) st_flat(&out, i, v);
        loss += v;
    }
    if (e->i[0] == 0) return;
    st_flat(&out, 0, e->i[0] == 1 ? loss / weight : loss);
    st_flat(&total, 0, weight);
}

SIM_EXPORT aclnnStatus aclnnNLLLossGetWorkspaceSize(const aclTensor *x, const aclTensor *target, const aclTensor *weight,
                                                    int64_t reduction, int64_t ignore_index, aclTensor *out,
                                                    aclTensor *total_weight, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnNLLLoss";
    int r;
    if ((r = nll_check(op, x, target, weight, reduction))) return r;
    if ((r = check(op, out, "out")) || (r = check(op, total_weight, "totalWeightOut"))) return r;
    /* Outputs take any floating dtype self casts to (opbase CanCast). */
    if (!is_float(out->dtype) || !is_float(total_weight->dtype))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "out and totalWeightOut must be floating dtypes");
    int64_t want = reduction == 0 && x->ndim == 2 ? x->dims[0] : 1;
    if (numel(out) != want || (reduction == 0 && x->ndim == 2 && out->ndim != 1))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "out must be (N,) with reduction none, one element otherwise");
    if (numel(total_weight) != 1) return bad(ACLNN_ERR_PARAM_INVALID, op, "totalWeightOut must hold one element");
    aclnnStatus st = make(op, x->dtype, run_nll_loss, 0, ws, e);
    if (st) return st;
    (*e)->t[0] = *out;
    (*e)->t[1] = *total_weight;
    (*e)->t[2] = *x;
    (*e)->t[3] = *target;
    (*e)->t[4] = *weight;
    (*e)->i[0] = reduction;
    (*e)->i[1] = ignore_index;
    return 0;
}
PHASE2(NLLLoss)

/* t[0] = out, t[1] = gradOutput, t[2] = self, t[3] = target, t[4] = weight, t[5] = totalWeight;
 * i[0] = reduction, i[1] = ignoreIndex. out is 0 but at (i, target[i]): −w·g, divided by the
 * total weight for mean (ops-nn e5c3fa932 loss/nll_loss_grad). */
static void run_nll_loss_grad(aclOpExecutor *e) {
    const aclTensor *x = &e->t[2], *target = &e->t[3];
    Flat out = flat_of(&e->t[0]), g = flat_of(&e->t[1]), w = flat_of(&e->t[4]), total = flat_of(&e->t[5]);
    int64_t classes = x->dims[x->ndim - 1], rows = x->ndim == 2 ? x->dims[0] : 1;
    for (int64_t k = 0; k < rows * classes; k++) st_flat(&out, k, 0);
    double scale = e->i[0] == 1 ? 1.0 / ld_flat(&total, 0) : 1.0;
    for (int64_t i = 0; i < rows; i++) {
        int64_t c = nll_class(e, "aclnnNLLLossBackward", target, i, classes);
        if (c < 0) continue;
        double gi = ld_flat(&g, e->i[0] == 0 ? i : 0);
        st_flat(&out, i * classes + c, -ld_flat(&w, c) * gi * scale);
    }
}

SIM_EXPORT aclnnStatus aclnnNLLLossBackwardGetWorkspaceSize(const aclTensor *grad, const aclTensor *x,
                                                            const aclTensor *target, const aclTensor *weight,
                                                            int64_t reduction, int64_t ignore_index,
                                                            const aclTensor *total_weight, aclTensor *out, uint64_t *ws,
                                                            aclOpExecutor **e) {
    const char *op = "aclnnNLLLossBackward";
    int r;
    if ((r = nll_check(op, x, target, weight, reduction))) return r;
    if ((r = check(op, grad, "gradOutput")) || (r = check(op, total_weight, "totalWeight")) || (r = check(op, out, "out")))
        return r;
    if (grad->dtype != x->dtype || total_weight->dtype != x->dtype || out->dtype != x->dtype)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "gradOutput, totalWeight and out must have self's dtype");
    int64_t want = reduction == 0 && x->ndim == 2 ? x->dims[0] : 1;
    if (numel(grad) != want) return bad(ACLNN_ERR_PARAM_INVALID, op, "gradOutput must be (N,) with reduction none, one element otherwise");
    if (numel(total_weight) != 1) return bad(ACLNN_ERR_PARAM_INVALID, op, "totalWeight must hold one element");
    if (!same_shape(x, out)) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must have self's shape");
    aclnnStatus st = make(op, x->dtype, run_nll_loss_grad, 0, ws, e);
    if (st) return st;
    (*e)->t[0] = *out;
    (*e)->t[1] = *grad;
    (*e)->t[2] = *x;
    (*e)->t[3] = *target;
    (*e)->t[4] = *weight;
    (*e)->t[5] = *total_weight;
    (*e)->i[0] = reduction;
    (*e)->i[1] = ignore_index;
    return 0;
}
PHASE2(NLLLossBackward)
