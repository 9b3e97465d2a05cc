/* Indexing operators: IndexSelect, IndexAdd, Gather, ScatterAdd, Embedding and
 * EmbeddingDenseBackward. */
#include "aclnn.h"

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

/* ---- embedding (ops-nn e5c3fa932 index/embedding, index/embedding_dense_grad_v2) ------------- */

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
