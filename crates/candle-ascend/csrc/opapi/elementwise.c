/* Element-wise operators: binary (with broadcasting), tensor-scalar (Muls, Adds), unary (with
 * GeluV2 and PowTensorScalar) and SWhere. */
#include "aclnn.h"

enum { B_ADD, B_SUB, B_MUL, B_DIV, B_MAX, B_MIN, B_EQ, B_NE, B_LT, B_LE, B_GT, B_GE };

static double binop(int k, double a, double b, double alpha) {
    switch (k) {
    case B_ADD: return a + alpha * b;
    case B_SUB: return a - alpha * b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_MAX: return a > b || isnan(a) ? a : b;
    case B_MIN: return a < b || isnan(a) ? a : b;
    case B_EQ: return a == b;
    case B_NE: return a != b;
    case B_LT: return a < b;
    case B_LE: return a <= b;
    case B_GT: return a > b;
    default: return a >= b;
    }
}

/* t[0] = out, t[1] = self, t[2] = other; i[0] = kind; f[0] = alpha. */
static void run_binary(aclOpExecutor *e) {
    It its[3];
    for (int j = 0; j < 3; j++) it_init(&its[j], &e->t[j], &e->t[0]);
    int64_t n = numel(&e->t[0]), offs[3];
    int integral = !is_float(e->t[0].dtype) && e->i[0] == B_DIV;
    for (int64_t k = 0; k < n; k++) {
        offsets(&e->t[0], k, its, 3, offs);
        double v = binop((int)e->i[0], ld(its[1].base, its[1].dt, offs[1]), ld(its[2].base, its[2].dt, offs[2]), e->f[0]);
        st(its[0].base, its[0].dt, offs[0], integral ? trunc(v) : v);
    }
}

static aclnnStatus binary(const char *op, int kind, const aclTensor *a, const aclTensor *b, double alpha,
                          const aclTensor *out, uint64_t *ws, aclOpExecutor **exec) {
    int r;
    if ((r = check(op, a, "self")) || (r = check(op, b, "other")) || (r = check(op, out, "out"))) return r;
    int64_t tmp[SIM_MAX_DIMS];
    if (!bcast(a, out, tmp) || !bcast(b, out, tmp))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "shapes do not broadcast to out");
    int cmp = kind >= B_EQ;
    if (a->dtype != b->dtype || (!cmp && a->dtype != out->dtype))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "mixed dtypes are not inferable");
    if (cmp && out->dtype != ACL_BOOL && out->dtype != ACL_UINT8)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "out must be BOOL or UINT8");
    aclnnStatus s = make(op, a->dtype, run_binary, 0, ws, exec);
    if (s) return s;
    (*exec)->t[0] = *out;
    (*exec)->t[1] = *a;
    (*exec)->t[2] = *b;
    (*exec)->i[0] = kind;
    (*exec)->f[0] = alpha;
    return 0;
}

#define BINARY_ALPHA(Name, kind)                                                                             \
    SIM_EXPORT aclnnStatus aclnn##Name##GetWorkspaceSize(const aclTensor *a, const aclTensor *b,             \
                                                         const aclScalar *alpha, aclTensor *out, uint64_t *ws, \
                                                         aclOpExecutor **e) {                                \
        if (!alpha) return bad(ACLNN_ERR_PARAM_NULLPTR, "aclnn" #Name, "alpha is null");                    \
        int r = a && out ? scalar_castable("aclnn" #Name, "alpha", alpha, out->dtype) : 0;                   \
        return r ? r : binary("aclnn" #Name, kind, a, b, scalar_value(alpha), out, ws, e);                   \
    }                                                                                                        \
    PHASE2(Name)
#define BINARY(Name, kind)                                                                                   \
    SIM_EXPORT aclnnStatus aclnn##Name##GetWorkspaceSize(const aclTensor *a, const aclTensor *b,             \
                                                         aclTensor *out, uint64_t *ws, aclOpExecutor **e) {  \
        return binary("aclnn" #Name, kind, a, b, 1.0, out, ws, e);                                           \
    }                                                                                                        \
    PHASE2(Name)

BINARY_ALPHA(Add, B_ADD)
BINARY_ALPHA(Sub, B_SUB)
BINARY(Mul, B_MUL)
BINARY(Div, B_DIV)
BINARY(Maximum, B_MAX)
BINARY(Minimum, B_MIN)
BINARY(EqTensor, B_EQ)
BINARY(NeTensor, B_NE)
BINARY(LtTensor, B_LT)
BINARY(LeTensor, B_LE)
BINARY(GtTensor, B_GT)
BINARY(GeTensor, B_GE)

/* Muls / Adds: a tensor and a host scalar. t[0] = out, t[1] = self; f[0] = scalar, f[1] = alpha. */
static void run_scalar(aclOpExecutor *e) {
    It its[2];
    for (int j = 0; j < 2; j++) it_init(&its[j], &e->t[j], &e->t[0]);
    int64_t n = numel(&e->t[0]), offs[2];
    for (int64_t k = 0; k < n; k++) {
        offsets(&e->t[0], k, its, 2, offs);
        double x = ld(its[1].base, its[1].dt, offs[1]);
        st(its[0].base, its[0].dt, offs[0], e->i[0] == B_MUL ? x * e->f[0] : x + e->f[1] * e->f[0]);
    }
}

static aclnnStatus scalar_op(const char *op, int kind, const aclTensor *a, const aclScalar *s, double alpha,
                             const aclTensor *out, uint64_t *ws, aclOpExecutor **exec) {
    int r;
    if ((r = check(op, a, "self")) || (r = check(op, out, "out"))) return r;
    if (!s) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "scalar is null");
    if (!same_shape(a, out) || a->dtype != out->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must match self");
    aclnnStatus st_ = make(op, a->dtype, run_scalar, 0, ws, exec);
    if (st_) return st_;
    (*exec)->t[0] = *out;
    (*exec)->t[1] = *a;
    (*exec)->i[0] = kind;
    (*exec)->f[0] = s->value;
    (*exec)->f[1] = alpha;
    return 0;
}

SIM_EXPORT aclnnStatus aclnnMulsGetWorkspaceSize(const aclTensor *a, const aclScalar *s, aclTensor *out, uint64_t *ws,
                                                 aclOpExecutor **e) {
    return scalar_op("aclnnMuls", B_MUL, a, s, 1.0, out, ws, e);
}
PHASE2(Muls)

SIM_EXPORT aclnnStatus aclnnAddsGetWorkspaceSize(const aclTensor *a, const aclScalar *s, const aclScalar *alpha,
                                                 aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    if (!alpha) return bad(ACLNN_ERR_PARAM_NULLPTR, "aclnnAdds", "alpha is null");
    int r = a && out ? scalar_castable("aclnnAdds", "alpha", alpha, out->dtype) : 0;
    if (r) return r;
    return scalar_op("aclnnAdds", B_ADD, a, s, alpha->value, out, ws, e);
}
PHASE2(Adds)

/* Unary ops. t[0] = out, t[1] = self; i[0] = kind; f[0] = parameter. */
enum { U_EXP, U_LOG, U_SQRT, U_RSQRT, U_TANH, U_NEG, U_ABS, U_ERF, U_SIN, U_COS, U_SIGMOID, U_SILU, U_RELU,
       U_RECIP, U_FLOOR, U_CEIL, U_ROUND, U_SIGN, U_SQUARE, U_GELU, U_POW };

static double unop(int k, double x, double p) {
    switch (k) {
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_RSQRT: return 1.0 / sqrt(x);
    case U_TANH: return tanh(x);
    case U_NEG: return -x;
    case U_ABS: return fabs(x);
    case U_ERF: return erf(x);
    case U_SIN: return sin(x);
    case U_COS: return cos(x);
    case U_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case U_SILU: return x / (1.0 + exp(-x));
    case U_RELU: return x > 0 ? x : 0;
    case U_RECIP: return 1.0 / x;
    case U_FLOOR: return floor(x);
    case U_CEIL: return ceil(x);
    case U_ROUND: return nearbyint(x); /* half to even, like torch.round */
    case U_SIGN: return (x > 0) - (x < 0);
    case U_SQUARE: return x * x;
    case U_GELU: /* p = approximate: 0 erf, 1 tanh */
        return p == 0 ? 0.5 * x * (1.0 + erf(x / sqrt(2.0)))
                      : 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    default: return pow(x, p);
    }
}

static void run_unary(aclOpExecutor *e) {
    It its[2];
    for (int j = 0; j < 2; j++) it_init(&its[j], &e->t[j], &e->t[0]);
    int64_t n = numel(&e->t[0]), offs[2];
    for (int64_t k = 0; k < n; k++) {
        offsets(&e->t[0], k, its, 2, offs);
        st(its[0].base, its[0].dt, offs[0], unop((int)e->i[0], ld(its[1].base, its[1].dt, offs[1]), e->f[0]));
    }
}

static aclnnStatus unary(const char *op, int kind, const aclTensor *a, double p, const aclTensor *out,
                         uint64_t *ws, aclOpExecutor **exec) {
    int r;
    if ((r = check(op, a, "self")) || (r = check(op, out, "out"))) return r;
    if (!same_shape(a, out) || a->dtype != out->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must match self");
    aclnnStatus s = make(op, a->dtype, run_unary, 0, ws, exec);
    if (s) return s;
    (*exec)->t[0] = *out;
    (*exec)->t[1] = *a;
    (*exec)->i[0] = kind;
    (*exec)->f[0] = p;
    return 0;
}

#define UNARY(Name, kind)                                                                         \
    SIM_EXPORT aclnnStatus aclnn##Name##GetWorkspaceSize(const aclTensor *a, aclTensor *out, uint64_t *ws, \
                                                         aclOpExecutor **e) {                              \
        return unary("aclnn" #Name, kind, a, 0, out, ws, e);                                      \
    }                                                                                                      \
    PHASE2(Name)

UNARY(Exp, U_EXP)
UNARY(Log, U_LOG)
UNARY(Sqrt, U_SQRT)
UNARY(Rsqrt, U_RSQRT)
UNARY(Tanh, U_TANH)
UNARY(Neg, U_NEG)
UNARY(Abs, U_ABS)
UNARY(Erf, U_ERF)
UNARY(Sin, U_SIN)
UNARY(Cos, U_COS)
UNARY(Sigmoid, U_SIGMOID)
UNARY(Silu, U_SILU)
/* aclnn_relu.h declares the output const; the kernel writes through its data pointer. */
SIM_EXPORT aclnnStatus aclnnReluGetWorkspaceSize(const aclTensor *a, const aclTensor *out, uint64_t *ws,
                                                 aclOpExecutor **e) {
    return unary("aclnnRelu", U_RELU, a, 0, (aclTensor *)out, ws, e);
}
PHASE2(Relu)
UNARY(Reciprocal, U_RECIP)
UNARY(Floor, U_FLOOR)
UNARY(Ceil, U_CEIL)
UNARY(Round, U_ROUND)
UNARY(Sign, U_SIGN)
UNARY(Square, U_SQUARE)

SIM_EXPORT aclnnStatus aclnnGeluV2GetWorkspaceSize(const aclTensor *x, int64_t approximate, aclTensor *y,
                                                   uint64_t *ws, aclOpExecutor **e) {
    if (approximate != 0 && approximate != 1) return bad(ACLNN_ERR_PARAM_INVALID, "aclnnGeluV2", "approximate must be 0 or 1");
    return unary("aclnnGeluV2", U_GELU, x, (double)approximate, y, ws, e);
}
PHASE2(GeluV2)

/* aclnn_pow.h declares the output const; the kernel writes through its data pointer. */
SIM_EXPORT aclnnStatus aclnnPowTensorScalarGetWorkspaceSize(const aclTensor *a, const aclScalar *exponent,
                                                            const aclTensor *out_, uint64_t *ws, aclOpExecutor **e) {
    aclTensor *out = (aclTensor *)out_;
    if (!exponent) return bad(ACLNN_ERR_PARAM_NULLPTR, "aclnnPowTensorScalar", "exponent is null");
    int r = a && out ? scalar_castable("aclnnPowTensorScalar", "exponent", exponent, out->dtype) : 0;
    if (r) return r;
    return unary("aclnnPowTensorScalar", U_POW, a, exponent->value, out, ws, e);
}
PHASE2(PowTensorScalar)

/* SWhere: t[0] = out, t[1] = condition (BOOL), t[2] = self, t[3] = other. */
static void run_where(aclOpExecutor *e) {
    It its[4];
    for (int j = 0; j < 4; j++) it_init(&its[j], &e->t[j], &e->t[0]);
    int64_t n = numel(&e->t[0]), offs[4];
    for (int64_t k = 0; k < n; k++) {
        offsets(&e->t[0], k, its, 4, offs);
        int c = ld(its[1].base, its[1].dt, offs[1]) != 0;
        st(its[0].base, its[0].dt, offs[0], c ? ld(its[2].base, its[2].dt, offs[2]) : ld(its[3].base, its[3].dt, offs[3]));
    }
}

SIM_EXPORT aclnnStatus aclnnSWhereGetWorkspaceSize(const aclTensor *cond, const aclTensor *a, const aclTensor *b,
                                                   aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnSWhere";
    int r;
    if ((r = check(op, cond, "condition")) || (r = check(op, a, "self")) || (r = check(op, b, "other")) ||
        (r = check(op, out, "out")))
        return r;
    if (cond->dtype != ACL_BOOL) return bad(ACLNN_ERR_PARAM_INVALID, op, "condition must be BOOL");
    if (a->dtype != b->dtype || a->dtype != out->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "mixed dtypes");
    int64_t tmp[SIM_MAX_DIMS];
    if (!bcast(cond, out, tmp) || !bcast(a, out, tmp) || !bcast(b, out, tmp))
        return bad(ACLNN_ERR_PARAM_INVALID, op, "shapes do not broadcast to out");
    aclnnStatus s = make(op, a->dtype, run_where, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *cond;
    (*e)->t[2] = *a;
    (*e)->t[3] = *b;
    return 0;
}
PHASE2(SWhere)
