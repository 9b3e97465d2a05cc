/* Emulated libnnopbase.so: tensor views, scalars and arrays. Dims and strides are copied. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

SIM_EXPORT aclTensor *aclCreateTensor(const int64_t *view_dims, uint64_t ndim, int32_t dtype, const int64_t *stride,
                                      int64_t offset, int32_t format, const int64_t *storage_dims,
                                      uint64_t storage_ndim, void *data) {
    if ((ndim > 0 && !view_dims) || (storage_ndim > 0 && !storage_dims) || ndim > SIM_MAX_DIMS || offset < 0) {
        aclsimSetError("aclCreateTensor: invalid view (ndim %llu, offset %lld)", (unsigned long long)ndim,
                       (long long)offset);
        return NULL;
    }
    if (sim_dtype_size(dtype) == 0) {
        aclsimSetError("aclCreateTensor: unsupported aclDataType %d", dtype);
        return NULL;
    }
    aclTensor *t = calloc(1, sizeof *t);
    t->magic = SIM_TENSOR_MAGIC;
    t->dtype = dtype;
    t->format = format;
    t->ndim = ndim;
    t->offset = offset;
    t->data = data;
    int64_t contiguous = 1;
    for (int64_t d = (int64_t)ndim - 1; d >= 0; d--) {
        if (view_dims[d] < 0 || (stride && stride[d] < 0)) {
            free(t);
            aclsimSetError("aclCreateTensor: negative dim or stride at %lld", (long long)d);
            return NULL;
        }
        t->dims[d] = view_dims[d];
        t->strides[d] = stride ? stride[d] : contiguous; /* NULL strides: contiguous */
        contiguous *= view_dims[d];
    }
    int64_t elems = 1;
    for (uint64_t d = 0; d < storage_ndim; d++) elems *= storage_dims[d];
    t->storage_elems = storage_ndim ? elems : 0;
    return t;
}

SIM_EXPORT aclnnStatus aclDestroyTensor(const aclTensor *t) {
    if (t) {
        ((aclTensor *)t)->magic = 0;
        free((void *)t);
    }
    return ACLNN_SUCCESS;
}

SIM_EXPORT aclScalar *aclCreateScalar(void *value, int32_t dtype) {
    if (!value) return NULL;
    aclScalar *s = calloc(1, sizeof *s);
    s->magic = SIM_SCALAR_MAGIC;
    s->dtype = dtype;
    switch (dtype) {
    case ACL_FLOAT: s->value = *(float *)value; break;
    case ACL_DOUBLE: s->value = *(double *)value; break;
    case ACL_INT64: s->value = (double)*(int64_t *)value; break;
    case ACL_INT32: s->value = *(int32_t *)value; break;
    case ACL_BOOL: s->value = *(bool *)value; break;
    default:
        free(s);
        aclsimSetError("aclCreateScalar: unsupported aclDataType %d", dtype);
        return NULL;
    }
    return s;
}

SIM_EXPORT aclnnStatus aclDestroyScalar(const aclScalar *s) {
    free((void *)s);
    return ACLNN_SUCCESS;
}

SIM_EXPORT aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size) {
    if ((size && !value) || size > SIM_MAX_DIMS * 4) return NULL;
    aclIntArray *a = calloc(1, sizeof *a);
    a->magic = SIM_ARRAY_MAGIC;
    a->size = size;
    if (size) memcpy(a->values, value, size * sizeof *value);
    return a;
}

SIM_EXPORT aclnnStatus aclDestroyIntArray(const aclIntArray *a) {
    free((void *)a);
    return ACLNN_SUCCESS;
}

SIM_EXPORT aclBoolArray *aclCreateBoolArray(const bool *value, uint64_t size) {
    if ((size && !value) || size > SIM_MAX_DIMS * 4) return NULL;
    aclBoolArray *a = calloc(1, sizeof *a);
    a->magic = SIM_ARRAY_MAGIC;
    a->size = size;
    if (size) memcpy(a->values, value, size * sizeof *value);
    return a;
}

SIM_EXPORT aclnnStatus aclDestroyBoolArray(const aclBoolArray *a) {
    free((void *)a);
    return ACLNN_SUCCESS;
}

/* A tensor list owns its members. */
SIM_EXPORT aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size) {
    if (size && !value) return NULL;
    aclTensorList *l = calloc(1, sizeof *l);
    l->magic = SIM_ARRAY_MAGIC;
    l->size = size;
    l->values = calloc(size ? size : 1, sizeof *l->values);
    for (uint64_t i = 0; i < size; i++) l->values[i] = (aclTensor *)value[i];
    return l;
}

SIM_EXPORT aclnnStatus aclDestroyTensorList(const aclTensorList *l) {
    if (!l) return ACLNN_SUCCESS;
    for (uint64_t i = 0; i < l->size; i++) aclDestroyTensor(l->values[i]);
    free(l->values);
    free((void *)l);
    return ACLNN_SUCCESS;
}

SIM_EXPORT aclnnStatus aclnnInit(const char *config) {
    (void)config;
    return ACLNN_SUCCESS;
}

/* ---- executors: made by phase 1, consumed by phase 2 (opbase op_executor.cpp) ---------- */

static pthread_mutex_t g_live_lock = PTHREAD_MUTEX_INITIALIZER;
static aclOpExecutor **g_live;
static size_t g_nlive, g_caplive;

SIM_EXPORT aclOpExecutor *aclsimNewExecutor(const char *op, void (*run)(aclOpExecutor *), uint64_t workspace_size) {
    aclOpExecutor *e = calloc(1, sizeof *e);
    e->magic = SIM_EXEC_MAGIC;
    e->op = op;
    e->run = run;
    e->workspace_size = workspace_size;
    pthread_mutex_lock(&g_live_lock);
    if (g_nlive == g_caplive) {
        g_caplive = g_caplive ? 2 * g_caplive : 256;
        g_live = realloc(g_live, g_caplive * sizeof *g_live);
    }
    g_live[g_nlive++] = e;
    pthread_mutex_unlock(&g_live_lock);
    return e;
}

static int take_live(aclOpExecutor *e) {
    pthread_mutex_lock(&g_live_lock);
    size_t i = 0;
    while (i < g_nlive && g_live[i] != e) i++;
    int live = i < g_nlive;
    if (live) g_live[i] = g_live[--g_nlive];
    pthread_mutex_unlock(&g_live_lock);
    return live;
}

/* A non-repeatable executor is freed once it has run, so reusing one is a use after free on
 * real CANN: undefined, with no status code to return. The emulator stops the process. */
SIM_EXPORT void aclsimTakeExecutor(const char *op, aclOpExecutor *e) {
    if (take_live(e)) return;
    fprintf(stderr, "%s: executor %p is not live: it already ran or was destroyed (a use after free on real CANN)\n",
            op, (void *)e);
    abort();
}

/* Runs on the stream: a workspace that phase 2 did not provide in full is an AI Core fault. */
SIM_EXPORT void aclsimRunExecutor(void *arg) {
    aclOpExecutor *e = arg;
    if (e->workspace_size && !e->workspace)
        aclsimKernelFault("%s: the kernel needs a %llu-byte device workspace, which phase 2 did not provide", e->op,
                          (unsigned long long)e->workspace_size);
    else if (!aclsimNoMath())
        e->run(e);
    e->magic = SIM_EXEC_DEAD;
    free(e);
}

/* An executor that phase 1 made and nobody launched. */
SIM_EXPORT aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *e) {
    if (!e) return ACLNN_ERR_PARAM_NULLPTR;
    if (!take_live(e)) return ACLNN_ERR_PARAM_INVALID;
    e->magic = SIM_EXEC_DEAD;
    free(e);
    return ACLNN_SUCCESS;
}
