/* Emulated libopapi.so: aclnn operators with CANN's two-phase convention. Phase 1 validates
 * the views and dtypes and captures the op in a single-use executor; phase 2 checks the
 * workspace and enqueues the executor on the stream, whose worker runs and frees it.
 * Arithmetic goes through double and is stored back in the output dtype. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "sim.h"
/* The vendor's phase-1 prototypes (generated from soc/cann/aclnn_prototypes.tsv): every definition
 * below must match its declaration, or this file does not compile. */
#include "aclnn_prototypes.h"

/* ---- element access --------------------------------------------------------------------- */

static double ld(const void *base, int dt, int64_t i) {
    switch (dt) {
    case ACL_FLOAT: return ((const float *)base)[i];
    case ACL_FLOAT16: return f16_to_f32(((const uint16_t *)base)[i]);
    case ACL_BF16: return bf16_to_f32(((const uint16_t *)base)[i]);
    case ACL_DOUBLE: return ((const double *)base)[i];
    case ACL_INT64: return (double)((const int64_t *)base)[i];
    case ACL_INT32: return ((const int32_t *)base)[i];
    case ACL_UINT32: return ((const uint32_t *)base)[i];
    case ACL_UINT8: case ACL_BOOL: return ((const uint8_t *)base)[i];
    case ACL_INT8: return ((const int8_t *)base)[i];
    default: return 0;
    }
}

static void st(void *base, int dt, int64_t i, double v) {
    switch (dt) {
    case ACL_FLOAT: ((float *)base)[i] = (float)v; break;
    case ACL_FLOAT16: ((uint16_t *)base)[i] = f32_to_f16((float)v); break;
    case ACL_BF16: ((uint16_t *)base)[i] = f32_to_bf16((float)v); break;
    case ACL_DOUBLE: ((double *)base)[i] = v; break;
    case ACL_INT64: ((int64_t *)base)[i] = (int64_t)v; break;
    case ACL_INT32: ((int32_t *)base)[i] = (int32_t)v; break;
    case ACL_UINT32: ((uint32_t *)base)[i] = (uint32_t)v; break;
    case ACL_UINT8: ((uint8_t *)base)[i] = (uint8_t)v; break;
    case ACL_BOOL: ((uint8_t *)base)[i] = v != 0; break;
    case ACL_INT8: ((int8_t *)base)[i] = (int8_t)v; break;
    }
}

static int is_float(int dt) { return dt == ACL_FLOAT || dt == ACL_FLOAT16 || dt == ACL_BF16 || dt == ACL_DOUBLE; }

static int64_t numel(const aclTensor *t) {
    int64_t n = 1;
    for (uint64_t d = 0; d < t->ndim; d++) n *= t->dims[d];
    return n;
}

/* Host base of a view (the storage start): valid while the device memory is. */
static void *host_base(const aclTensor *t) {
    int64_t extent = t->offset + 1;
    for (uint64_t d = 0; d < t->ndim; d++)
        if (t->dims[d] > 0) extent += (t->dims[d] - 1) * t->strides[d];
    if (numel(t) == 0) extent = 1;
    return aclsimHostPtr(t->data, (uint64_t)extent * sim_dtype_size(t->dtype));
}

/* ---- validation --------------------------------------------------------------------- */

static int bad(aclnnStatus code, const char *op, const char *why) {
    aclsimSetError("%s: %s", op, why);
    return code;
}

static int check(const char *op, const aclTensor *t, const char *name) {
    if (!t) {
        aclsimSetError("%s: %s is null", op, name);
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    if (t->magic != SIM_TENSOR_MAGIC) {
        aclsimSetError("%s: %s is not a live aclTensor", op, name);
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (!host_base(t)) {
        aclsimSetError("%s: %s does not lie in device memory (data %p, offset %lld)", op, name, t->data,
                       (long long)t->offset);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return 0;
}

static int same_shape(const aclTensor *a, const aclTensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (uint64_t d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return 1;
}

/* Strides of `in` broadcast (NumPy rules) to `out`'s shape; 0 when incompatible. */
static int bcast(const aclTensor *in, const aclTensor *out, int64_t *strides) {
    if (in->ndim > out->ndim) return 0;
    uint64_t lead = out->ndim - in->ndim;
    for (uint64_t d = 0; d < out->ndim; d++) {
        if (d < lead) { strides[d] = 0; continue; }
        int64_t n = in->dims[d - lead];
        if (n == out->dims[d]) strides[d] = n == 1 ? 0 : in->strides[d - lead];
        else if (n == 1) strides[d] = 0;
        else return 0;
    }
    return 1;
}


/* ---- the per-SoC support table (soc/op_support.tsv) ------------------------------------- */

#include "op_support.h"

static const char *dtype_name(int dt) {
    switch (dt) {
    case ACL_FLOAT: return "FLOAT";
    case ACL_FLOAT16: return "FLOAT16";
    case ACL_BF16: return "BF16";
    case ACL_DOUBLE: return "DOUBLE";
    case ACL_INT8: return "INT8";
    case ACL_INT16: return "INT16";
    case ACL_INT32: return "INT32";
    case ACL_INT64: return "INT64";
    case ACL_UINT8: return "UINT8";
    case ACL_UINT16: return "UINT16";
    case ACL_UINT32: return "UINT32";
    case ACL_UINT64: return "UINT64";
    case ACL_BOOL: return "BOOL";
    default: return "UNDEFINED";
    }
}

static const char *family_name(void) {
    return aclsimSocFamily() == SIM_SOC_910 ? "Atlas training series" : "Atlas A2 training series";
}

static const SimOpRow *op_row(const char *op) {
    int family = aclsimSocFamily();
    for (size_t i = 0; i < sizeof SIM_OP_TABLE / sizeof *SIM_OP_TABLE; i++)
        if (SIM_OP_TABLE[i].family == family && strcmp(SIM_OP_TABLE[i].op, op) == 0) return &SIM_OP_TABLE[i];
    return NULL;
}

/* Phase 1 refuses, with 161002, an op or a dtype outside the part's row of the table. */
static int soc_dtype(const char *op, const char *param, int dtype) {
    const SimOpRow *r = op_row(op);
    if (!r || !r->dtypes) {
        aclsimSetError("%s is not supported on %s (%s)%s%s", op, aclrtGetSocName(), family_name(), r ? ": " : "",
                       r ? r->source : "");
        return ACLNN_ERR_PARAM_INVALID;
    }
    if (dtype < 0 || dtype > 63 || !(r->dtypes & (1ull << dtype))) {
        aclsimSetError("%s: %s dtype %s is not supported on %s (%s; %s)", op, param, dtype_name(dtype),
                       aclrtGetSocName(), family_name(), r->source);
        return ACLNN_ERR_PARAM_INVALID;
    }
    return 0;
}

/* opbase CanCast (data_type_utils.h): a floating value never casts to an integral or BOOL type,
 * nor a non-BOOL value to BOOL. aclnnAdd/Adds/Sub check alpha this way (aclnn_add.cpp), and so
 * does aclnnPowTensorScalar's promoted result; IndexAdd's doc states the same rule for alpha. The
 * Muls/Adds scalar and the fill value are not checked by the vendor. */
static int scalar_castable(const char *op, const char *name, const aclScalar *s, int to) {
    int ok = !(is_float(s->dtype) && !is_float(to)) && !(to == ACL_BOOL && s->dtype != ACL_BOOL);
    if (ok) return 0;
    aclsimSetError("%s: %s of dtype %s cannot be cast to %s (opbase CanCast)", op, name, dtype_name(s->dtype),
                   dtype_name(to));
    return ACLNN_ERR_PARAM_INVALID;
}

/* ---- executors (kept by libnnopbase) --------------------------------------------------- */

static aclnnStatus make(const char *op, int dtype, void (*run)(aclOpExecutor *), uint64_t ws, uint64_t *ws_out,
                        aclOpExecutor **exec) {
    if (!ws_out || !exec) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "workspaceSize or executor is null");
    int r;
    if ((r = soc_dtype(op, "self", dtype))) return r;
    if (aclsimFailOp(op)) return bad(ACLNN_ERR_INNER, op, "failure injected by CANDLE_ASCEND_SIM_FAIL_OP");
    *exec = aclsimNewExecutor(op, run, ws);
    if (*exec) (*exec)->aicpu = (op_row(op)->aicpu >> dtype) & 1;
    *ws_out = ws;
    return ACLNN_SUCCESS;
}

/* opbase's phase 2 (op_executor.cpp): a NULL executor, or a positive size with a NULL
 * workspace, is 161001; the size is not compared with phase 1's, so a short workspace is an
 * AI Core fault when the kernel runs; a NULL stream is the default stream. */
static aclnnStatus launch(const char *op, void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream) {
    if (!e) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "executor is null");
    if (ws_size > 0 && !ws) {
        aclDestroyAclOpExecutor(e); /* opbase destroys it on this path, even a repeatable one */
        return bad(ACLNN_ERR_PARAM_NULLPTR, op, "workspaceSize > 0 with a null workspace");
    }
    aclsimTakeExecutor(op, e);
    if (strcmp(e->op, op) != 0) return bad(ACLNN_ERR_PARAM_INVALID, op, "executor was created by another op");
    if (e->workspace_size) e->workspace = ws_size >= e->workspace_size ? aclsimHostPtr(ws, e->workspace_size) : NULL;
    aclsimCountLaunch(op, e->aicpu);
    if (aclsimEnqueue(stream, aclsimRunExecutor, e) != 0) return bad(ACLNN_ERR_RUNTIME_ERROR, op, "no stream");
    return ACLNN_SUCCESS;
}

#define PHASE2(Name)                                                                                      \
    SIM_EXPORT aclnnStatus aclnn##Name(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream) { \
        return launch("aclnn" #Name, ws, ws_size, e, stream);                                             \
    }

/* Iterate an output view and up to three inputs broadcast to it. */
typedef struct { void *base; int dt; int64_t st[SIM_MAX_DIMS]; int64_t off; } It;

static void it_init(It *it, const aclTensor *t, const aclTensor *out) {
    it->base = host_base(t);
    it->dt = t->dtype;
    it->off = t->offset;
    if (out) bcast(t, out, it->st);
    else memcpy(it->st, t->strides, sizeof it->st);
}

/* Element offsets of flat index `k` of `out`'s shape for each iterator. */
static void offsets(const aclTensor *out, int64_t k, It *its, int n, int64_t *offs) {
    for (int j = 0; j < n; j++) offs[j] = its[j].off;
    for (int64_t d = (int64_t)out->ndim - 1; d >= 0; d--) {
        int64_t idx = k % out->dims[d];
        k /= out->dims[d];
        for (int j = 0; j < n; j++) offs[j] += idx * its[j].st[d];
    }
}

/* ---- element-wise ops ----------------------------------------------------------------- */

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

static double scalar_value(const aclScalar *s) { return s ? s->value : 1.0; }

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

/* ---- reductions: accumulate in the workspace (one double pair per output element) ------ */

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

/* ---- matmul: f32 accumulation in the workspace ----------------------------------------- */

/* t[0] = out (b, m, n), t[1] = self (b, m, k), t[2] = mat2 (b, k, n); batch dims broadcast. */
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
    const SimOpRow *row = op_row(op);
    if (cube_math_type < 0 || cube_math_type > 3 || !(row->cube[dtype] & (1u << cube_math_type))) {
        aclsimSetError("%s: cubeMathType %d is not supported for %s input on %s (%s; %s)", op, cube_math_type,
                       dtype_name(dtype), aclrtGetSocName(), family_name(), row->source);
        return ACLNN_ERR_PARAM_INVALID;
    }
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

/* ---- indexing ------------------------------------------------------------------------- */

static int index_dtype(const char *op, const aclTensor *idx) {
    if (idx->dtype != ACL_INT32 && idx->dtype != ACL_INT64) return bad(ACLNN_ERR_PARAM_INVALID, op, "index must be INT32 or INT64");
    return 0;
}

/* For flat index k over `walk`'s shape: the element offset in `walk`, and the offset in `other`
 * of the same position with coordinate `dim` replaced by index[coordinate]. An index out of
 * range is reported as a kernel fault and read as 0. */
static void index_walk(const aclTensor *walk, const aclTensor *other, const aclTensor *ix, const void *pi, int64_t dim,
                       const char *op, int64_t k, int64_t *off_walk, int64_t *off_other) {
    int64_t rem = k, limit = other->dims[dim];
    *off_walk = walk->offset;
    *off_other = other->offset;
    for (int64_t d = (int64_t)walk->ndim - 1; d >= 0; d--) {
        int64_t idx = rem % walk->dims[d];
        rem /= walk->dims[d];
        *off_walk += idx * walk->strides[d];
        if (d == dim) {
            int64_t v = (int64_t)ld(pi, ix->dtype, ix->offset + idx * ix->strides[0]);
            if (v < 0 || v >= limit) {
                aclsimKernelFault("%s: index %lld out of range 0..%lld", op, (long long)v, (long long)limit);
                v = 0;
            }
            idx = v;
        }
        *off_other += idx * other->strides[d];
    }
}

/* out = self, element by element (same shapes, any strides). */
static void copy_self(const aclTensor *o, const aclTensor *s) {
    It ito, its;
    it_init(&ito, o, NULL);
    it_init(&its, s, NULL);
    int64_t n = numel(o), off_o, off_s;
    for (int64_t k = 0; k < n; k++) {
        offsets(o, k, &ito, 1, &off_o);
        offsets(s, k, &its, 1, &off_s);
        st(ito.base, o->dtype, off_o, ld(its.base, s->dtype, off_s));
    }
}

/* IndexSelect (i[1] = 0): out[..., j, ...] = self[..., index[j], ...]. IndexAdd (i[1] = 1):
 * out = self; out[..., index[j], ...] += alpha * source[..., j, ...].
 * t[0] = out, t[1] = self, t[2] = index (1-D), t[3] = source; i[0] = dim; f[0] = alpha. */
static void run_index(aclOpExecutor *e) {
    const aclTensor *o = &e->t[0], *s = &e->t[1], *ix = &e->t[2], *src = &e->t[3];
    void *po = host_base(o), *pi = host_base(ix);
    int64_t off_a, off_b;
    if (e->i[1] == 0) {
        void *ps = host_base(s);
        for (int64_t k = 0, n = numel(o); k < n; k++) {
            index_walk(o, s, ix, pi, e->i[0], e->op, k, &off_a, &off_b);
            st(po, o->dtype, off_a, ld(ps, s->dtype, off_b));
        }
        return;
    }
    copy_self(o, s);
    void *pr = host_base(src);
    for (int64_t k = 0, n = numel(src); k < n; k++) {
        index_walk(src, o, ix, pi, e->i[0], e->op, k, &off_a, &off_b);
        st(po, o->dtype, off_b, ld(po, o->dtype, off_b) + e->f[0] * ld(pr, src->dtype, off_a));
    }
}

SIM_EXPORT aclnnStatus aclnnIndexSelectGetWorkspaceSize(const aclTensor *a, int64_t dim, const aclTensor *index,
                                                        aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnIndexSelect";
    int r;
    if ((r = check(op, a, "self")) || (r = check(op, index, "index")) || (r = check(op, out, "out")) ||
        (r = index_dtype(op, index)))
        return r;
    if (dim < 0) dim += (int64_t)a->ndim;
    if (dim < 0 || dim >= (int64_t)a->ndim || index->ndim != 1 || out->ndim != a->ndim || out->dtype != a->dtype)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "bad dim, index rank or out");
    for (uint64_t d = 0; d < a->ndim; d++)
        if (out->dims[d] != ((int64_t)d == dim ? index->dims[0] : a->dims[d])) return bad(ACLNN_ERR_PARAM_INVALID, op, "out has the wrong shape");
    aclnnStatus s = make(op, a->dtype, run_index, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *a;
    (*e)->t[2] = *index;
    (*e)->i[0] = dim;
    (*e)->i[1] = 0;
    return 0;
}
PHASE2(IndexSelect)

SIM_EXPORT aclnnStatus aclnnIndexAddGetWorkspaceSize(const aclTensor *a, int64_t dim, const aclTensor *index,
                                                     const aclTensor *source, const aclScalar *alpha, aclTensor *out,
                                                     uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnIndexAdd";
    int r;
    if ((r = check(op, a, "self")) || (r = check(op, index, "index")) || (r = check(op, source, "source")) ||
        (r = check(op, out, "out")) || (r = index_dtype(op, index)))
        return r;
    if (!alpha) return bad(ACLNN_ERR_PARAM_NULLPTR, op, "alpha is null");
    if ((r = scalar_castable(op, "alpha", alpha, out->dtype))) return r;
    if (dim < 0) dim += (int64_t)a->ndim;
    if (dim < 0 || dim >= (int64_t)a->ndim || index->ndim != 1 || !same_shape(a, out) || source->ndim != a->ndim ||
        source->dims[dim] != index->dims[0] || source->dtype != a->dtype || out->dtype != a->dtype)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "bad dim, index, source or out");
    aclnnStatus s = make(op, a->dtype, run_index, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *a;
    (*e)->t[2] = *index;
    (*e)->t[3] = *source;
    (*e)->i[0] = dim;
    (*e)->i[1] = 1;
    (*e)->f[0] = alpha->value;
    return 0;
}
PHASE2(IndexAdd)

/* Gather (i[1] = 0): out[p] = self[p with dim replaced by index[p]]. ScatterAdd (i[1] = 1):
 * out = self; out[p with dim replaced by index[p]] += src[p] for p over index.
 * t[0] = out, t[1] = self, t[2] = index, t[3] = src. */
static void run_gather(aclOpExecutor *e) {
    const aclTensor *o = &e->t[0], *s = &e->t[1], *ix = &e->t[2], *src = &e->t[3];
    int64_t dim = e->i[0], limit = (e->i[1] ? o : s)->dims[dim];
    void *po = host_base(o), *ps = host_base(s), *pi = host_base(ix);
    if (e->i[1]) copy_self(o, s);
    void *pr = e->i[1] ? host_base(src) : NULL;
    int64_t n = numel(ix);
    for (int64_t k = 0; k < n; k++) {
        int64_t rem = k, off_i = ix->offset, off_a = 0, off_b = 0, v = 0;
        int64_t idxs[SIM_MAX_DIMS];
        for (int64_t d = (int64_t)ix->ndim - 1; d >= 0; d--) {
            idxs[d] = rem % ix->dims[d];
            rem /= ix->dims[d];
            off_i += idxs[d] * ix->strides[d];
        }
        v = (int64_t)ld(pi, ix->dtype, off_i);
        if (v < 0 || v >= limit) {
            aclsimKernelFault("%s: index %lld out of range 0..%lld", e->op, (long long)v, (long long)limit);
            continue;
        }
        if (!e->i[1]) { /* gather: a = self at (idx with dim = v), b = out at idx */
            off_a = s->offset;
            off_b = o->offset;
            for (uint64_t d = 0; d < ix->ndim; d++) {
                off_a += ((int64_t)d == dim ? v : idxs[d]) * s->strides[d];
                off_b += idxs[d] * o->strides[d];
            }
            st(po, o->dtype, off_b, ld(ps, s->dtype, off_a));
        } else { /* scatter-add: a = out at (idx with dim = v), b = src at idx */
            off_a = o->offset;
            off_b = src->offset;
            for (uint64_t d = 0; d < ix->ndim; d++) {
                off_a += ((int64_t)d == dim ? v : idxs[d]) * o->strides[d];
                off_b += idxs[d] * src->strides[d];
            }
            st(po, o->dtype, off_a, ld(po, o->dtype, off_a) + ld(pr, src->dtype, off_b));
        }
    }
}

SIM_EXPORT aclnnStatus aclnnGatherGetWorkspaceSize(const aclTensor *a, const int64_t dim, const aclTensor *index,
                                                   aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnGather";
    int r;
    if ((r = check(op, a, "self")) || (r = check(op, index, "index")) || (r = check(op, out, "out")) ||
        (r = index_dtype(op, index)))
        return r;
    int64_t d = dim < 0 ? dim + (int64_t)a->ndim : dim;
    if (d < 0 || d >= (int64_t)a->ndim || index->ndim != a->ndim || !same_shape(index, out) || out->dtype != a->dtype)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "bad dim, index rank or out");
    aclnnStatus s = make(op, a->dtype, run_gather, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *a;
    (*e)->t[2] = *index;
    (*e)->i[0] = d;
    (*e)->i[1] = 0;
    return 0;
}
PHASE2(Gather)

SIM_EXPORT aclnnStatus aclnnScatterAddGetWorkspaceSize(const aclTensor *a, int64_t dim, const aclTensor *index,
                                                       const aclTensor *src, aclTensor *out, uint64_t *ws,
                                                       aclOpExecutor **e) {
    const char *op = "aclnnScatterAdd";
    int r;
    if ((r = check(op, a, "self")) || (r = check(op, index, "index")) || (r = check(op, src, "src")) ||
        (r = check(op, out, "out")) || (r = index_dtype(op, index)))
        return r;
    if (dim < 0) dim += (int64_t)a->ndim;
    if (dim < 0 || dim >= (int64_t)a->ndim || index->ndim != a->ndim || src->ndim != a->ndim || !same_shape(a, out) ||
        src->dtype != a->dtype || out->dtype != a->dtype)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "bad dim, index, src or out");
    aclnnStatus s = make(op, a->dtype, run_gather, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *a;
    (*e)->t[2] = *index;
    (*e)->t[3] = *src;
    (*e)->i[0] = dim;
    (*e)->i[1] = 1;
    return 0;
}
PHASE2(ScatterAdd)

/* ---- random: a counter-based generator keyed by (seed, offset, element) --------------- */

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

/* ---- optimizers ------------------------------------------------------------------------ */

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

/* ---- layer norm --------------------------------------------------------------------------- */

/* ops-nn e5c3fa932 norm/layer_norm_v4 (op_api/aclnn_layer_norm.cpp) and norm/layer_norm_grad_v3
 * (op_api/aclnn_layer_norm_backward.cpp). Rows of N = Π normalizedShape elements; mean and
 * rstd = 1/√(biased var + eps) per row (tiling coefficient 1/rowSize; kernel_layer_norm.h). */

/* Element access by flat index of a tensor's own shape; the host base is resolved once. */
typedef struct { const aclTensor *t; It it; } Flat;

static Flat flat_of(const aclTensor *t) {
    Flat f = {t, {0}};
    it_init(&f.it, t, NULL);
    return f;
}

static double ld_flat(Flat *f, int64_t k) {
    int64_t off;
    offsets(f->t, k, &f->it, 1, &off);
    return ld(f->it.base, f->it.dt, off);
}

static void st_flat(Flat *f, int64_t k, double v) {
    int64_t off;
    offsets(f->t, k, &f->it, 1, &off);
    st(f->it.base, f->it.dt, off, v);
}

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

/* ---- softmax, log-softmax, NLL loss and the gelu gradient ------------------------------ */

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

/* ---- embedding (ops-nn e5c3fa932 index/embedding, index/embedding_dense_grad_v2) --------- */

/* t[0] = out (indices' shape + (dim,)), t[1] = weight (rows, dim), t[2] = indices. The doc: a
 * negative index is an error and one past the table "outputs random values"; both are kernel
 * faults here, the stricter reading. */
static void run_embedding(aclOpExecutor *e) {
    Flat out = flat_of(&e->t[0]), w = flat_of(&e->t[1]), ix = flat_of(&e->t[2]);
    int64_t rows = e->t[1].dims[0], dim = e->t[1].dims[1], n = numel(&e->t[2]);
    for (int64_t r = 0; r < n; r++) {
        int64_t i = (int64_t)ld_flat(&ix, r);
        if (i < 0 || i >= rows) {
            aclsimKernelFault("aclnnEmbedding: index %lld outside 0..%lld", (long long)i, (long long)rows);
            return;
        }
        for (int64_t c = 0; c < dim; c++) st_flat(&out, r * dim + c, ld_flat(&w, i * dim + c));
    }
}

/* aclnn_embedding.cpp CheckParams: weight of the SoC's dtypes and 2-D (doc), out of weight's
 * dtype, indices INT32 or INT64, at most 8 dims, out = indices' shape + one dim; out's last dim
 * is also required to be weight's (the doc's rule, which the source leaves to the kernel). */
SIM_EXPORT aclnnStatus aclnnEmbeddingGetWorkspaceSize(const aclTensor *weight, const aclTensor *indices,
                                                      const aclTensor *out, uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnEmbedding";
    int r;
    if ((r = check(op, weight, "weight")) || (r = check(op, indices, "indices")) || (r = check(op, out, "out"))) return r;
    if (weight->ndim != 2) return bad(ACLNN_ERR_PARAM_INVALID, op, "weight must be 2-D");
    if (out->dtype != weight->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must have weight's dtype");
    if ((r = index_dtype(op, indices))) return r;
    if (indices->ndim > 7) return bad(ACLNN_ERR_PARAM_INVALID, op, "indices has more than 7 dims (out at most 8)");
    int shape_ok = out->ndim == indices->ndim + 1 && out->dims[out->ndim - 1] == weight->dims[1];
    for (uint64_t d = 0; shape_ok && d < indices->ndim; d++) shape_ok = out->dims[d] == indices->dims[d];
    if (!shape_ok) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must have indices' shape plus weight's last dim");
    aclnnStatus s = make(op, weight->dtype, run_embedding, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *weight;
    (*e)->t[2] = *indices;
    return 0;
}
PHASE2(Embedding)

/* t[0] = out (numWeights, dim), t[1] = grad (…, dim), t[2] = indices; i[0] = paddingIdx (< 0:
 * none), i[1] = scaleGradByFreq. out[i] = Σ grad rows whose index is i (÷ i's count when
 * scaling), the paddingIdx row 0. An index outside 0..numWeights is a kernel fault. */
static void run_embedding_grad(aclOpExecutor *e) {
    Flat out = flat_of(&e->t[0]), g = flat_of(&e->t[1]), ix = flat_of(&e->t[2]);
    int64_t rows = e->t[0].dims[0], dim = e->t[0].dims[1], n = numel(&e->t[2]);
    double *acc = calloc((size_t)(rows * dim) + 1, sizeof(double));
    int64_t *count = calloc((size_t)rows + 1, sizeof(int64_t));
    if (!acc || !count) {
        aclsimKernelFault("aclnnEmbeddingDenseBackward: out of host memory");
        goto done;
    }
    for (int64_t r = 0; r < n; r++) {
        int64_t i = (int64_t)ld_flat(&ix, r);
        if (i < 0 || i >= rows) {
            aclsimKernelFault("aclnnEmbeddingDenseBackward: index %lld outside 0..%lld", (long long)i, (long long)rows);
            goto done;
        }
        count[i]++;
        for (int64_t c = 0; c < dim; c++) acc[i * dim + c] += ld_flat(&g, r * dim + c);
    }
    for (int64_t i = 0; i < rows; i++) {
        double scale = (e->i[1] && count[i] > 0) ? 1.0 / (double)count[i] : 1.0;
        if (i == e->i[0]) scale = 0;
        for (int64_t c = 0; c < dim; c++) st_flat(&out, i * dim + c, acc[i * dim + c] * scale);
    }
done:
    free(acc);
    free(count);
}

/* aclnn_embedding_dense_backward.cpp CheckParams: grad FLOAT/FLOAT16 (BF16 from DAV_2201),
 * indices of its list, 2-8 dims for grad and 1-8 for indices (doc), grad's rows = indices'
 * elements, out (numWeights, grad's last dim) of grad's dtype (doc: "与grad类型相同"). */
SIM_EXPORT aclnnStatus aclnnEmbeddingDenseBackwardGetWorkspaceSize(const aclTensor *grad, const aclTensor *indices,
                                                                   uint64_t num_weights, uint64_t padding_idx,
                                                                   bool scale_grad_by_freq, const aclTensor *out,
                                                                   uint64_t *ws, aclOpExecutor **e) {
    const char *op = "aclnnEmbeddingDenseBackward";
    int r;
    if ((r = check(op, grad, "grad")) || (r = check(op, indices, "indices")) || (r = check(op, out, "out"))) return r;
    switch (indices->dtype) {
    case ACL_FLOAT16: case ACL_FLOAT: case ACL_DOUBLE: case ACL_INT8: case ACL_UINT8: case ACL_INT16:
    case ACL_INT32: case ACL_INT64: case ACL_BOOL: break;
    default: return bad(ACLNN_ERR_PARAM_INVALID, op, "indices has an unsupported dtype");
    }
    if (out->dtype != grad->dtype) return bad(ACLNN_ERR_PARAM_INVALID, op, "out must have grad's dtype");
    if (grad->ndim < 2 || grad->ndim > 8 || indices->ndim < 1 || indices->ndim > 8)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "grad must have 2 to 8 dims and indices 1 to 8");
    int64_t dim = grad->dims[grad->ndim - 1];
    if (dim == 0) return bad(ACLNN_ERR_PARAM_INVALID, op, "grad's last dim is 0");
    if (numel(grad) / dim != numel(indices)) return bad(ACLNN_ERR_PARAM_INVALID, op, "grad's rows must match indices' elements");
    if (out->ndim != 2 || (uint64_t)out->dims[0] != num_weights || out->dims[1] != dim)
        return bad(ACLNN_ERR_PARAM_INVALID, op, "out must be (numWeights, grad's last dim)");
    aclnnStatus s = make(op, grad->dtype, run_embedding_grad, 0, ws, e);
    if (s) return s;
    (*e)->t[0] = *out;
    (*e)->t[1] = *grad;
    (*e)->t[2] = *indices;
    (*e)->i[0] = (int64_t)padding_idx; /* the doc's negative "none" arrives as a huge uint64 */
    (*e)->i[1] = scale_grad_by_freq;
    return 0;
}
PHASE2(EmbeddingDenseBackward)

/* ---- dropout (ops-math c41933244 random/dsa_gen_bit_mask, random/drop_out_do_mask) -------- */

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

/* ---- AddLayerNorm (ops-nn e5c3fa932 norm/add_layer_norm) --------------------------------- */

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

/* ---- FlashAttentionScore (ops-transformer c29bc10 attention/flash_attention_score[_grad]) --- */

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
