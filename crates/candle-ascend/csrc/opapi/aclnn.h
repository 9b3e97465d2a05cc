/* Emulated libopapi.so: what every aclnn operator shares. The operators follow CANN's two-phase
 * convention: phase 1 validates the views and dtypes and captures the op in a single-use
 * executor; phase 2 checks the workspace and enqueues the executor on the stream, whose worker
 * runs and frees it. Arithmetic goes through double and is stored back in the output dtype.
 * Each operator family has its own file beside this header; aclnn.c holds what they share. */
#ifndef CANDLE_ASCEND_OPAPI_ACLNN_H
#define CANDLE_ASCEND_OPAPI_ACLNN_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "sim.h"
/* The vendor's phase-1 prototypes (generated from soc/cann/aclnn_prototypes.tsv): every operator
 * file includes them, so a definition that differs from its declaration does not compile. */
#include "aclnn_prototypes.h"

/* ---- element access (aclnn.c); the iterators are inline, being every kernel's inner loop ----- */

double ld(const void *base, int dt, int64_t i);
void st(void *base, int dt, int64_t i, double v);

static inline int is_float(int dt) { return dt == ACL_FLOAT || dt == ACL_FLOAT16 || dt == ACL_BF16 || dt == ACL_DOUBLE; }

static inline int64_t numel(const aclTensor *t) {
    int64_t n = 1;
    for (uint64_t d = 0; d < t->ndim; d++) n *= t->dims[d];
    return n;
}

void *host_base(const aclTensor *t);
int bcast(const aclTensor *in, const aclTensor *out, int64_t *strides);

/* Iterate an output view and up to three inputs broadcast to it. */
typedef struct { void *base; int dt; int64_t st[SIM_MAX_DIMS]; int64_t off; } It;

static inline void it_init(It *it, const aclTensor *t, const aclTensor *out) {
    it->base = host_base(t);
    it->dt = t->dtype;
    it->off = t->offset;
    if (out) bcast(t, out, it->st);
    else memcpy(it->st, t->strides, sizeof it->st);
}

/* Element offsets of flat index `k` of `out`'s shape for each iterator. */
static inline void offsets(const aclTensor *out, int64_t k, It *its, int n, int64_t *offs) {
    for (int j = 0; j < n; j++) offs[j] = its[j].off;
    for (int64_t d = (int64_t)out->ndim - 1; d >= 0; d--) {
        int64_t idx = k % out->dims[d];
        k /= out->dims[d];
        for (int j = 0; j < n; j++) offs[j] += idx * its[j].st[d];
    }
}

/* Element access by flat index of a tensor's own shape; the host base is resolved once. */
typedef struct { const aclTensor *t; It it; } Flat;

Flat flat_of(const aclTensor *t);
double ld_flat(Flat *f, int64_t k);
void st_flat(Flat *f, int64_t k, double v);

/* ---- phase 1's checks and the executors (aclnn.c) -------------------------------------------- */

/* Sets the last error to "op: why" and returns code. */
int bad(aclnnStatus code, const char *op, const char *why);
/* 0 for a live tensor in device memory; 161001 for a null one, 161002 otherwise. */
int check(const char *op, const aclTensor *t, const char *name);
int same_shape(const aclTensor *a, const aclTensor *b);
/* A host scalar's value; a null scalar reads as 1. */
double scalar_value(const aclScalar *s);
int soc_dtype(const char *op, const char *param, int dtype);
int soc_cube_math_type(const char *op, int dtype, int8_t cube_math_type);
int scalar_castable(const char *op, const char *name, const aclScalar *s, int to);
/* Phase 1's end: the self dtype's support check, then a fresh executor running `run` with a
 * workspace of ws bytes. */
aclnnStatus make(const char *op, int dtype, void (*run)(aclOpExecutor *), uint64_t ws, uint64_t *ws_out,
                 aclOpExecutor **exec);
aclnnStatus launch(const char *op, void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream);

/* Phase 2 of an op: every op's is the same launch. */
#define PHASE2(Name)                                                                                      \
    SIM_EXPORT aclnnStatus aclnn##Name(void *ws, uint64_t ws_size, aclOpExecutor *e, aclrtStream stream) { \
        return launch("aclnn" #Name, ws, ws_size, e, stream);                                             \
    }

#endif
