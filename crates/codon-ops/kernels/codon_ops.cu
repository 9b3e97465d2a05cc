// The CUDA bodies of codon-ops' fused ops: each replaces a chain of candle's single-pass kernels
// (a dozen passes and launches for a GELU or layer-norm backward pass) with one. Compiled to PTX
// by build.rs (nvcc --ptx) and loaded through candle's custom-module cache. Every kernel computes
// in f32 and rounds its result once to the storage dtype; inputs are contiguous.
#include "common.cuh"
#include "attention.cuh"

#define GRID_STRIDE(i, n) for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (n); i += (uint64_t)blockDim.x * gridDim.x)

// ---- reductions over one block (blockDim.x a multiple of 32, at most 1024) ----

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The block's sum (or max) of v, returned to every thread. `scratch` holds 32 floats; the
// leading barrier lets a caller reuse it for consecutive reductions.
template <bool MAX> __device__ float block_reduce(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < warps ? scratch[lane] : (MAX ? -INFINITY : 0.0f);
    return MAX ? warp_max(r) : warp_sum(r);
}

// ---- gelu_new: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) ----

__device__ __forceinline__ float gelu_new(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float gelu_new_derivative(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    const float t = tanhf(u);
    const float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// y = gelu_new(x + bias[i % cols]); bias may be null (then cols is unused).
template <typename T> __device__ void gelu_new_fwd(uint64_t n, const T *x, const T *bias, uint32_t cols, T *y) {
    GRID_STRIDE(i, n) y[i] = from_f32<T>(gelu_new(to_f32(x[i]) + (bias ? to_f32(bias[i % cols]) : 0.0f)));
}

// dx = g · gelu_new'(x + bias[i % cols]).
template <typename T> __device__ void gelu_new_bwd(uint64_t n, const T *x, const T *bias, uint32_t cols, const T *g, T *dx) {
    GRID_STRIDE(i, n) {
        const float v = to_f32(x[i]) + (bias ? to_f32(bias[i % cols]) : 0.0f);
        dx[i] = from_f32<T>(to_f32(g[i]) * gelu_new_derivative(v));
    }
}

// y = x + bias[i % cols] (+ residual[i] when not null), rounded once.
template <typename T> __device__ void add_bias(uint64_t n, const T *x, const T *bias, uint32_t cols, const T *residual, T *y) {
    GRID_STRIDE(i, n) {
        float v = to_f32(x[i]) + to_f32(bias[i % cols]);
        if (residual) v += to_f32(residual[i]);
        y[i] = from_f32<T>(v);
    }
}

// Column sums of a (rows × cols) matrix, in f32: block k sums rows k, k + gridDim.x, … into row k
// of `partial` (gridDim.x × cols); column_sum_f32 adds those rows in a fixed order.
template <typename T> __device__ void sum_rows_partial(uint32_t rows, uint32_t cols, const T *x, float *partial) {
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float s = 0.0f;
        for (uint64_t r = blockIdx.x; r < rows; r += gridDim.x) s += to_f32(x[r * cols + c]);
        partial[(uint64_t)blockIdx.x * cols + c] = s;
    }
}

// Σ x² in f32: block k sums a fixed share into partial[k]; column_sum_f32 adds the shares.
template <typename T> __device__ void sum_squares_partial(uint64_t n, const T *x, float *partial) {
    __shared__ float scratch[32];
    float s = 0.0f;
    GRID_STRIDE(i, n) {
        const float v = to_f32(x[i]);
        s += v * v;
    }
    s = block_reduce<false>(s, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// ---- block-sparse attention's key blocks ----

// out block (s, j) = src block (s, index[j]): blocks of `block_vecs` 16-byte vectors, sequences of
// src_blocks and out_blocks blocks. One thread block per output block.
extern "C" __global__ void gather_blocks(uint32_t block_vecs, uint32_t src_blocks, uint32_t out_blocks, const uint32_t *index,
                                         const uint4 *src, uint4 *out) {
    const uint64_t s = blockIdx.x / out_blocks, j = blockIdx.x % out_blocks;
    const uint4 *from = src + (s * src_blocks + index[j]) * block_vecs;
    uint4 *to = out + (uint64_t)blockIdx.x * block_vecs;
    for (uint32_t v = threadIdx.x; v < block_vecs; v += blockDim.x) to[v] = from[v];
}

// The gathered blocks' gradients added back: out block (s, t) = base block (s, t) + Σ gathered
// blocks (s, sources[offsets[t]] … sources[offsets[t + 1] − 1]), in that order, in f32. Blocks of
// block_elems elements; sequences of blocks (base, out) and gathered_blocks (gathered) blocks.
template <typename T>
__device__ void scatter_add_blocks(uint32_t block_elems, uint32_t blocks, uint32_t gathered_blocks, const uint32_t *offsets,
                                   const uint32_t *sources, const T *base, const T *gathered, T *out) {
    const uint64_t s = blockIdx.x / blocks, t = blockIdx.x % blocks;
    const uint64_t at = (uint64_t)blockIdx.x * block_elems;
    const uint32_t first = offsets[t], last = offsets[t + 1];
    for (uint32_t e = threadIdx.x; e < block_elems; e += blockDim.x) {
        float v = to_f32(base[at + e]);
        for (uint32_t k = first; k < last; k++) v += to_f32(gathered[(s * gathered_blocks + sources[k]) * block_elems + e]);
        out[at + e] = from_f32<T>(v);
    }
}

// ---- dropout: the mask of draw (seed, offset) in the CPU's layout (`DropoutWords`, common.cuh) ----
// Kept elements are multiplied by `scale`. The backward pass draws the same mask again.

template <typename T>
__device__ void dropout(uint64_t n, const T *x, T *y, uint64_t seed, uint64_t offset, uint64_t threshold, float scale) {
    const uint2 key = make_uint2((uint32_t)seed, (uint32_t)(seed >> 32));
    // One thread per group of four elements: one Philox call each.
    GRID_STRIDE(group, (n + 3) / 4) {
        DropoutWords mask;
        for (int j = 0; j < 4; j++) {
            const uint64_t i = group * 4 + j;
            // x·0 as the CPU's multipliers give it: a dropped NaN or infinity stays NaN.
            if (i < n) y[i] = from_f32<T>(to_f32(x[i]) * mask.multiplier(i, key, offset, threshold, scale));
        }
    }
}

// ---- softmax over the last dimension: one block per row ----
// y = softmax(x·scale + bias[row / rows_per_bias]) with f32 accumulation; bias (f32, one row of
// `cols` per group of rows_per_bias consecutive rows) may be null.

// Rows of at most CACHED_PER_THREAD · blockDim.x values are read once into registers; longer
// rows are read again for each pass.
#define CACHED_PER_THREAD 8

template <typename T>
__device__ void softmax_fwd(uint32_t cols, const T *x, const float *bias, uint32_t rows_per_bias, float scale, T *y) {
    __shared__ float scratch[32];
    const uint64_t row = blockIdx.x;
    const T *xr = x + row * cols;
    T *yr = y + row * cols;
    const float *br = bias ? bias + (row / rows_per_bias) * cols : nullptr;
    if (cols <= CACHED_PER_THREAD * blockDim.x) {
        float v[CACHED_PER_THREAD];
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < CACHED_PER_THREAD; k++) {
            const uint32_t c = threadIdx.x + k * blockDim.x;
            v[k] = c < cols ? to_f32(xr[c]) * scale + (br ? br[c] : 0.0f) : -INFINITY;
            m = fmaxf(m, v[k]);
        }
        m = block_reduce<true>(m, scratch);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < CACHED_PER_THREAD; k++) {
            const uint32_t c = threadIdx.x + k * blockDim.x;
            v[k] = c < cols ? expf(v[k] - m) : 0.0f;
            s += v[k];
        }
        const float inv = 1.0f / block_reduce<false>(s, scratch);
#pragma unroll
        for (int k = 0; k < CACHED_PER_THREAD; k++) {
            const uint32_t c = threadIdx.x + k * blockDim.x;
            if (c < cols) yr[c] = from_f32<T>(v[k] * inv);
        }
        return;
    }
    float m = -INFINITY;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, to_f32(xr[c]) * scale + (br ? br[c] : 0.0f));
    m = block_reduce<true>(m, scratch);
    float s = 0.0f;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf(to_f32(xr[c]) * scale + (br ? br[c] : 0.0f) - m);
    const float inv = 1.0f / block_reduce<false>(s, scratch);
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = from_f32<T>(expf(to_f32(xr[c]) * scale + (br ? br[c] : 0.0f) - m) * inv);
}

// dx = scale·y ⊙ (g − Σ g⊙y) per row.
template <typename T> __device__ void softmax_bwd(uint32_t cols, const T *y, const T *g, float scale, T *dx) {
    __shared__ float scratch[32];
    const uint64_t row = blockIdx.x;
    const T *yr = y + row * cols, *gr = g + row * cols;
    T *dr = dx + row * cols;
    if (cols <= CACHED_PER_THREAD * blockDim.x) {
        float yv[CACHED_PER_THREAD], gv[CACHED_PER_THREAD];
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < CACHED_PER_THREAD; k++) {
            const uint32_t c = threadIdx.x + k * blockDim.x;
            yv[k] = c < cols ? to_f32(yr[c]) : 0.0f;
            gv[k] = c < cols ? to_f32(gr[c]) : 0.0f;
            dot += yv[k] * gv[k];
        }
        dot = block_reduce<false>(dot, scratch);
#pragma unroll
        for (int k = 0; k < CACHED_PER_THREAD; k++) {
            const uint32_t c = threadIdx.x + k * blockDim.x;
            if (c < cols) dr[c] = from_f32<T>(scale * yv[k] * (gv[k] - dot));
        }
        return;
    }
    float dot = 0.0f;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) dot += to_f32(gr[c]) * to_f32(yr[c]);
    dot = block_reduce<false>(dot, scratch);
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) dr[c] = from_f32<T>(scale * to_f32(yr[c]) * (to_f32(gr[c]) - dot));
}

// ---- layer norm over the last dimension ----

// μ and 1/√(σ² + eps) of one row, to every thread of the block.
template <typename T> __device__ float2 row_moments(const T *xr, uint32_t cols, float eps, float *scratch) {
    float s = 0.0f;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) s += to_f32(xr[c]);
    const float mu = block_reduce<false>(s, scratch) / cols;
    float q = 0.0f;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = to_f32(xr[c]) - mu;
        q += d * d;
    }
    return make_float2(mu, 1.0f / sqrtf(block_reduce<false>(q, scratch) / cols + eps));
}

// One block per row: y = (x − μ)·rstd·w + b.
template <typename T> __device__ void layer_norm_fwd(uint32_t cols, const T *x, const T *w, const T *b, float eps, T *y) {
    __shared__ float scratch[32];
    const uint64_t row = blockIdx.x;
    const T *xr = x + row * cols;
    T *yr = y + row * cols;
    const float2 m = row_moments(xr, cols, eps, scratch);
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = from_f32<T>((to_f32(xr[c]) - m.x) * m.y * to_f32(w[c]) + to_f32(b[c]));
}

// One block per row: dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ⊙x̂)), ĝ = dy⊙w, x̂ = (x − μ)·rstd.
template <typename T>
__device__ void layer_norm_input_grad(uint32_t cols, const T *x, const T *w, const T *dy, float eps, T *dx) {
    __shared__ float scratch[32];
    const uint64_t row = blockIdx.x;
    const T *xr = x + row * cols, *gr = dy + row * cols;
    T *dr = dx + row * cols;
    const float2 m = row_moments(xr, cols, eps, scratch);
    float s1 = 0.0f, s2 = 0.0f;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float gw = to_f32(gr[c]) * to_f32(w[c]);
        s1 += gw;
        s2 += gw * (to_f32(xr[c]) - m.x) * m.y;
    }
    const float mean_g = block_reduce<false>(s1, scratch) / cols;
    const float mean_gx = block_reduce<false>(s2, scratch) / cols;
    for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float xh = (to_f32(xr[c]) - m.x) * m.y;
        dr[c] = from_f32<T>(m.y * (to_f32(gr[c]) * to_f32(w[c]) - mean_g - xh * mean_gx));
    }
}

// The weight and bias gradients' partial sums: block k takes rows k, k + gridDim.x, … and writes
// Σ dy⊙x̂ then Σ dy over them to row k of `partial` (gridDim.x × 2·cols, f32); column_sum_f32
// adds the rows. Dynamic shared memory: 2·cols floats, each thread owning its columns.
template <typename T>
__device__ void layer_norm_param_grad(uint32_t rows, uint32_t cols, const T *x, const T *dy, float eps, float *partial) {
    __shared__ float scratch[32];
    extern __shared__ float acc[];
    for (uint32_t c = threadIdx.x; c < 2 * cols; c += blockDim.x) acc[c] = 0.0f;
    for (uint64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *xr = x + row * cols, *gr = dy + row * cols;
        const float2 m = row_moments(xr, cols, eps, scratch);
        for (uint32_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const float g = to_f32(gr[c]);
            acc[c] += g * (to_f32(xr[c]) - m.x) * m.y;
            acc[cols + c] += g;
        }
    }
    __syncthreads();
    for (uint32_t c = threadIdx.x; c < 2 * cols; c += blockDim.x) partial[(uint64_t)blockIdx.x * 2 * cols + c] = acc[c];
}

// out[j] = Σ_k partial[k·width + j], k < parts: one thread per column, a fixed order.
extern "C" __global__ void column_sum_f32(uint32_t parts, uint32_t width, const float *partial, float *out) {
    GRID_STRIDE(j, width) {
        float s = 0.0f;
        for (uint32_t k = 0; k < parts; k++) s += partial[(uint64_t)k * width + j];
        out[j] = s;
    }
}

// ---- AdamW on a flat f32 group, in place, in the CPU body's order (codon-ops optim.rs) ----

// m ← m + rest·(g − m); squared: m ← β·m + rest·g² (rest = 1 − β, from the host).
extern "C" __global__ void adamw_moment_f32(uint64_t n, float *m, const float *g, float beta, float rest, uint32_t squared) {
    GRID_STRIDE(i, n) {
        const float gi = g[i];
        m[i] = squared ? m[i] * beta + gi * gi * rest : m[i] + (gi - m[i]) * rest;
    }
}

// θ ← θ·decay − m / (√v / bias2_sqrt + eps) · step_size.
extern "C" __global__ void adamw_parameter_f32(uint64_t n, float *theta, const float *m, const float *v, float decay,
                                              float step_size, float bias2_sqrt, float eps) {
    GRID_STRIDE(i, n) theta[i] = theta[i] * decay - m[i] / (sqrtf(v[i]) / bias2_sqrt + eps) * step_size;
}

// ---- the exported entry points, one per dtype ----

#define FOR_DTYPES(M) M(f32, float) M(bf16, __nv_bfloat16) M(f16, __half)

#define EXPORT(S, T)                                                                                                   \
    extern "C" __global__ void gelu_new_fwd_##S(uint64_t n, const T *x, const T *bias, uint32_t cols, T *y) {          \
        gelu_new_fwd(n, x, bias, cols, y);                                                                             \
    }                                                                                                                  \
    extern "C" __global__ void gelu_new_bwd_##S(uint64_t n, const T *x, const T *bias, uint32_t cols, const T *g,       \
                                                T *dx) {                                                               \
        gelu_new_bwd(n, x, bias, cols, g, dx);                                                                         \
    }                                                                                                                  \
    extern "C" __global__ void add_bias_##S(uint64_t n, const T *x, const T *bias, uint32_t cols, const T *residual,    \
                                            T *y) {                                                                    \
        add_bias(n, x, bias, cols, residual, y);                                                                       \
    }                                                                                                                  \
    extern "C" __global__ void sum_rows_partial_##S(uint32_t rows, uint32_t cols, const T *x, float *partial) {         \
        sum_rows_partial(rows, cols, x, partial);                                                                      \
    }                                                                                                                  \
    extern "C" __global__ void sum_squares_partial_##S(uint64_t n, const T *x, float *partial) {                       \
        sum_squares_partial(n, x, partial);                                                                            \
    }                                                                                                                  \
    extern "C" __global__ void scatter_add_blocks_##S(uint32_t block_elems, uint32_t blocks, uint32_t gathered_blocks,  \
                                                      const uint32_t *offsets, const uint32_t *sources, const T *base,  \
                                                      const T *gathered, T *out) {                                      \
        scatter_add_blocks(block_elems, blocks, gathered_blocks, offsets, sources, base, gathered, out);               \
    }                                                                                                                  \
    extern "C" __global__ void dropout_##S(uint64_t n, const T *x, T *y, uint64_t seed, uint64_t offset,               \
                                           uint64_t threshold, float scale) {                                         \
        dropout(n, x, y, seed, offset, threshold, scale);                                                              \
    }                                                                                                                  \
    extern "C" __global__ void softmax_fwd_##S(uint32_t cols, const T *x, const float *bias, uint32_t rows_per_bias,  \
                                               float scale, T *y) {                                                    \
        softmax_fwd(cols, x, bias, rows_per_bias, scale, y);                                                           \
    }                                                                                                                  \
    extern "C" __global__ void softmax_bwd_##S(uint32_t cols, const T *y, const T *g, float scale, T *dx) { softmax_bwd(cols, y, g, scale, dx); } \
    extern "C" __global__ void layer_norm_fwd_##S(uint32_t cols, const T *x, const T *w, const T *b, float eps, T *y) { \
        layer_norm_fwd(cols, x, w, b, eps, y);                                                                         \
    }                                                                                                                  \
    extern "C" __global__ void layer_norm_input_grad_##S(uint32_t cols, const T *x, const T *w, const T *dy, float eps, \
                                                         T *dx) {                                                      \
        layer_norm_input_grad(cols, x, w, dy, eps, dx);                                                                \
    }                                                                                                                  \
    extern "C" __global__ void layer_norm_param_grad_##S(uint32_t rows, uint32_t cols, const T *x, const T *dy,         \
                                                         float eps, float *partial) {                                  \
        layer_norm_param_grad(rows, cols, x, dy, eps, partial);                                                        \
    }

FOR_DTYPES(EXPORT)

#define EXPORT_ATTENTION(S, T)                                                                                         \
    extern "C" __global__ void __launch_bounds__(ATTN_THREADS) attention_fwd_##S(ATTENTION_PARAMS, uint32_t tiles,      \
                                                                                 const T *q, const T *k, const T *v,    \
                                                                                 T *out, float *stats) {                \
        attention_fwd(ATTENTION_ARGS, tiles, q, k, v, out, stats);                                                       \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(ATTN_THREADS)                                                         \
        attention_bwd_dq_##S(ATTENTION_PARAMS, uint32_t tiles, const T *q, const T *k, const T *v, const T *out,       \
                             const T *grad, const float *stats, float *delta, T *dq) {                                 \
        attention_bwd_dq(ATTENTION_ARGS, tiles, q, k, v, out, grad, stats, delta, dq);                                   \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(ATTN_THREADS)                                                         \
        attention_bwd_dkv_##S(ATTENTION_PARAMS, const uint32_t *inverse_offsets, const uint32_t *inverse_block,        \
                              const uint32_t *inverse_range, const T *q, const T *k, const T *v, const T *grad,        \
                              const float *stats, const float *delta, T *dk, T *dv) {                                  \
        attention_bwd_dkv(ATTENTION_ARGS, inverse_offsets, inverse_block, inverse_range, q, k, v, grad, stats, delta, dk, \
                          dv);                                                                                         \
    }

FOR_DTYPES(EXPORT_ATTENTION)
