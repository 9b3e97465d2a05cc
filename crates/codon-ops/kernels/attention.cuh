#pragma once
#include "common.cuh"

// ---- block attention, flash style (codon-ops attention/block_attention.rs) ----
// softmax(q·kᵀ·scale + key penalty + range penalty) (⊙ dropout) · v, each query block over its
// list of key ranges, with no score in memory: the forward pass keeps two numbers per row (the
// softmax's shift and 1/Σ), the backward pass recomputes the probabilities from them. q, k, v, the output and the gradients
// are (batch, n, heads·d) as the projections leave them (a head is a column range). Two threads
// share a row (or, in the key gradients, a key), each holding every other column, so d is at
// most ATTN_MAX_D. The plan (query blocks, key ranges, penalties, query mask) is the CPU op's,
// flattened: the ranges of head h's query block j are range_offsets[h·blocks + j] up to the next.

#define ATTN_MAX_D 64
#define ATTN_COLS (ATTN_MAX_D / 2)
#define ATTN_ROWS 64     // query rows (or keys) per CUDA block, two threads each
#define ATTN_THREADS (2 * ATTN_ROWS)
#define ATTN_KEYS 32     // keys per shared tile of the forward and query-gradient passes
#define ATTN_QUERIES 32  // query rows per shared tile of the key-gradient pass

// The plan and dropout arguments every attention kernel takes.
struct AttentionArgs {
    uint32_t n, heads, d, blocks;
    const uint32_t *block_start, *block_len, *range_offsets, *range_start, *range_len;
    const float *range_penalty, *key_penalty, *query_mask;
    float scale;
    uint32_t dropout;
    uint64_t seed, offset, threshold;
    float dropout_scale;
};

#define ATTENTION_PARAMS                                                                                               \
    uint32_t n, uint32_t heads, uint32_t d, uint32_t blocks, const uint32_t *block_start, const uint32_t *block_len,   \
        const uint32_t *range_offsets, const uint32_t *range_start, const uint32_t *range_len,                         \
        const float *range_penalty, const float *key_penalty, const float *query_mask, float scale, uint32_t dropout,  \
        uint64_t seed, uint64_t offset, uint64_t threshold, float dropout_scale
#define ATTENTION_ARGS                                                                                                 \
    AttentionArgs{n, heads, d, blocks, block_start, block_len, range_offsets, range_start, range_len, range_penalty,  \
                  key_penalty, query_mask, scale, dropout, seed, offset, threshold, dropout_scale}

// `count` rows of `src` (this head's d columns, from token `first` of sequence b) into a
// (rows × ATTN_MAX_D) shared tile in f32; rows whose query mask is 0 are zeroed when `mask`.
template <typename T>
__device__ __forceinline__ void load_rows(const AttentionArgs &a, const T *src, uint32_t b, uint32_t h, uint32_t first,
                                          uint32_t count, float (*tile)[ATTN_MAX_D], const float *mask) {
    const uint64_t hd = (uint64_t)a.heads * a.d;
    for (uint32_t e = threadIdx.x; e < count * a.d; e += blockDim.x) {
        const uint32_t r = e / a.d, c = e % a.d;
        const uint64_t token = (uint64_t)b * a.n + first + r;
        const bool zero = mask && mask[token] == 0.0f;
        tile[r][c] = zero ? 0.0f : to_f32(src[token * hd + (uint64_t)h * a.d + c]);
    }
}

// This thread's columns (2i + half) of a row, in f32; 0 past d.
template <typename T>
__device__ __forceinline__ void load_cols(const AttentionArgs &a, const T *row, uint32_t half, bool live, float *dst) {
#pragma unroll
    for (int i = 0; i < ATTN_COLS; i++) {
        const uint32_t c = 2 * i + half;
        dst[i] = live && c < a.d ? to_f32(row[c]) : 0.0f;
    }
}

// Σ over this thread's columns of x[i]·tile_row[2i + half]; the pair's halves add to the dot.
__device__ __forceinline__ float half_dot(const AttentionArgs &a, const float *x, const float *tile_row, uint32_t half) {
    float part = 0.0f;
#pragma unroll
    for (int i = 0; i < ATTN_COLS; i++) {
        const uint32_t c = 2 * i + half;
        if (c < a.d) part = fmaf(x[i], tile_row[c], part);
    }
    return part;
}

// The pair's two halves summed (every thread of the warp takes part).
__device__ __forceinline__ float pair_sum(float part) { return part + __shfl_xor_sync(0xffffffffu, part, 1); }

// The query row a thread of the forward and query-gradient kernels takes. Their grid is
// (blocks · tiles, batch · heads) of ATTN_THREADS threads: query block blockIdx.x / tiles, rows
// from ATTN_ROWS · (blockIdx.x % tiles), two threads a row.
struct QueryRow {
    uint32_t qb, bh, b, h, half, row;
    bool tile_has_rows;  // the same for the whole block: the block leaves when false
    bool live;           // a row of the tile (others load zeros and write nothing)
    uint64_t token, at;  // b·n + row, and the row's first column of head h

    __device__ QueryRow(const AttentionArgs &a, uint32_t tiles) {
        qb = blockIdx.x / tiles;
        const uint32_t first = (blockIdx.x % tiles) * ATTN_ROWS, rows = a.block_len[qb];
        bh = blockIdx.y, b = bh / a.heads, h = bh % a.heads, half = threadIdx.x & 1;
        tile_has_rows = first < rows;
        live = first + (threadIdx.x >> 1) < rows;
        row = a.block_start[qb] + (live ? first + (threadIdx.x >> 1) : first);
        token = (uint64_t)b * a.n + row;
        at = token * a.heads * a.d + (uint64_t)h * a.d;
    }

    // Index of the row's dropout element of key `key`: (batch, heads, n, n).
    __device__ uint64_t drop_index(const AttentionArgs &a, uint32_t key) const {
        return ((uint64_t)bh * a.n + row) * a.n + key;
    }
};

// `body(k0, kn, range_penalty)` on each tile of keys k0..k0 + kn of the row's query block, with
// their keys and values loaded into `ks` and `vs`; every thread of the block takes part.
template <typename T, typename F>
__device__ __forceinline__ void for_each_key_tile(const AttentionArgs &a, const QueryRow &r, const T *k, const T *v,
                                                  float (*ks)[ATTN_MAX_D], float (*vs)[ATTN_MAX_D], F body) {
    const uint32_t list = r.h * a.blocks + r.qb;
    for (uint32_t ri = a.range_offsets[list]; ri < a.range_offsets[list + 1]; ri++) {
        const uint32_t rs = a.range_start[ri], rl = a.range_len[ri];
        for (uint32_t t0 = 0; t0 < rl; t0 += ATTN_KEYS) {
            const uint32_t kn = min((uint32_t)ATTN_KEYS, rl - t0), k0 = rs + t0;
            __syncthreads();  // the last tile's readers are done
            load_rows(a, k, r.b, r.h, k0, kn, ks, nullptr);
            load_rows(a, v, r.b, r.h, k0, kn, vs, nullptr);
            __syncthreads();
            body(k0, kn, a.range_penalty[ri]);
        }
    }
}

// The forward pass: the output, and each row's softmax shift and 1/Σ, (batch, heads, n, 2):
// p = e^(s − shift) · (1/Σ). They stay apart because shift + log Σ loses log Σ beside a score of
// f32::MIN (a row whose keys are all masked).
template <typename T>
__device__ void attention_fwd(const AttentionArgs a, uint32_t tiles, const T *q, const T *k, const T *v, T *out, float *stats) {
    __shared__ float ks[ATTN_KEYS][ATTN_MAX_D];
    __shared__ float vs[ATTN_KEYS][ATTN_MAX_D];
    const QueryRow r(a, tiles);
    if (!r.tile_has_rows) return;  // the whole block leaves
    const uint32_t half = r.half;
    float qr[ATTN_COLS], acc[ATTN_COLS];
    load_cols(a, q + r.at, half, r.live, qr);
#pragma unroll
    for (int i = 0; i < ATTN_COLS; i++) acc[i] = 0.0f;
    const uint2 key = make_uint2((uint32_t)a.seed, (uint32_t)(a.seed >> 32));
    DropoutWords mask;
    float m = -INFINITY, l = 0.0f;
    for_each_key_tile(a, r, k, v, ks, vs, [&](uint32_t k0, uint32_t kn, float rp) {
        float s[ATTN_KEYS];
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < ATTN_KEYS; j++) {
            const float dot = pair_sum(j < kn ? half_dot(a, qr, ks[j], half) : 0.0f);
            s[j] = j < kn ? dot * a.scale + a.key_penalty[(uint64_t)r.b * a.n + k0 + j] + rp : -INFINITY;
            tile_max = fmaxf(tile_max, s[j]);
        }
        // Online softmax: rescale what the earlier tiles summed to the new maximum.
        const float m_new = fmaxf(m, tile_max), shift = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = expf(m - shift);
        l *= alpha;
#pragma unroll
        for (int i = 0; i < ATTN_COLS; i++) acc[i] *= alpha;
#pragma unroll
        for (int j = 0; j < ATTN_KEYS; j++) {
            if (j < kn) {
                const float p = expf(s[j] - shift);
                l += p;
                const float kept = a.dropout ? p * mask.multiplier(r.drop_index(a, k0 + j), key, a.offset, a.threshold, a.dropout_scale) : p;
#pragma unroll
                for (int i = 0; i < ATTN_COLS; i++) {
                    const uint32_t c = 2 * i + half;
                    if (c < a.d) acc[i] = fmaf(kept, vs[j][c], acc[i]);
                }
            }
        }
        m = m_new;
    });
    if (!r.live) return;
    const bool zero = a.query_mask && a.query_mask[r.token] == 0.0f;
    const float inv = l > 0.0f && !zero ? 1.0f / l : 0.0f;
#pragma unroll
    for (int i = 0; i < ATTN_COLS; i++) {
        const uint32_t c = 2 * i + half;
        if (c < a.d) out[r.at + c] = from_f32<T>(zero ? 0.0f : acc[i] * inv);
    }
    // No key at all (every score −∞): shift 0 and 1/Σ = 0, so the backward pass's probabilities are 0.
    if (half == 0) {
        float *st = stats + 2 * ((uint64_t)r.bh * a.n + r.row);
        st[0] = m == -INFINITY ? 0.0f : m;
        st[1] = l > 0.0f ? 1.0f / l : 0.0f;
    }
}

// The query gradient, and delta = Σ dO·O per row (batch, heads, n) for the key gradients; the
// same grid as the forward pass. dO is zero on masked query rows (their output is a constant 0).
template <typename T>
__device__ void attention_bwd_dq(const AttentionArgs a, uint32_t tiles, const T *q, const T *k, const T *v, const T *out,
                                 const T *grad, const float *stats, float *delta, T *dq) {
    __shared__ float ks[ATTN_KEYS][ATTN_MAX_D];
    __shared__ float vs[ATTN_KEYS][ATTN_MAX_D];
    const QueryRow r(a, tiles);
    if (!r.tile_has_rows) return;
    const uint32_t half = r.half;
    const bool masked = a.query_mask && a.query_mask[r.token] == 0.0f;
    float qr[ATTN_COLS], g[ATTN_COLS], acc[ATTN_COLS];
    load_cols(a, q + r.at, half, r.live, qr);
    load_cols(a, grad + r.at, half, r.live && !masked, g);
    load_cols(a, out + r.at, half, r.live, acc);  // the output, for delta
    float part = 0.0f;
#pragma unroll
    for (int i = 0; i < ATTN_COLS; i++) part = fmaf(g[i], acc[i], part);  // 0 past d
    const float dsum = pair_sum(part);
    const uint64_t stat = (uint64_t)r.bh * a.n + r.row;
    if (r.live && half == 0) delta[stat] = dsum;
    const float shift = r.live ? stats[2 * stat] : 0.0f, inv_sum = r.live ? stats[2 * stat + 1] : 0.0f;
#pragma unroll
    for (int i = 0; i < ATTN_COLS; i++) acc[i] = 0.0f;
    const uint2 key = make_uint2((uint32_t)a.seed, (uint32_t)(a.seed >> 32));
    DropoutWords mask;
    for_each_key_tile(a, r, k, v, ks, vs, [&](uint32_t k0, uint32_t kn, float rp) {
        for (uint32_t j = 0; j < kn; j++) {
            const float dot = pair_sum(half_dot(a, qr, ks[j], half));
            const float dp = pair_sum(half_dot(a, g, vs[j], half));
            const float s = dot * a.scale + a.key_penalty[(uint64_t)r.b * a.n + k0 + j] + rp;
            const float p = expf(s - shift) * inv_sum;
            const float mult = a.dropout ? mask.multiplier(r.drop_index(a, k0 + j), key, a.offset, a.threshold, a.dropout_scale) : 1.0f;
            const float ds = p * (dp * mult - dsum);
#pragma unroll
            for (int i = 0; i < ATTN_COLS; i++) {
                const uint32_t c = 2 * i + half;
                if (c < a.d) acc[i] = fmaf(ds, ks[j][c], acc[i]);
            }
        }
    });
    if (!r.live) return;
#pragma unroll
    for (int i = 0; i < ATTN_COLS; i++) {
        const uint32_t c = 2 * i + half;
        if (c < a.d) dq[r.at + c] = from_f32<T>(acc[i] * a.scale);
    }
}

// The key and value gradients. Grid (key tiles, batch · heads), ATTN_THREADS threads, two per
// key of tile blockIdx.x (ATTN_ROWS keys). The (query block, range) pairs whose range overlaps
// head h's key tile t are inverse_block/inverse_range[inverse_offsets[h·tiles + t] ..]: each key
// adds its terms in that fixed order, so the sums are the same on every run.
template <typename T>
__device__ void attention_bwd_dkv(const AttentionArgs a, const uint32_t *inverse_offsets, const uint32_t *inverse_block,
                                  const uint32_t *inverse_range, const T *q, const T *k, const T *v, const T *grad,
                                  const float *stats, const float *delta, T *dk, T *dv) {
    __shared__ float qs[ATTN_QUERIES][ATTN_MAX_D];
    __shared__ float gs[ATTN_QUERIES][ATTN_MAX_D];
    __shared__ float shift_s[ATTN_QUERIES], inv_sum_s[ATTN_QUERIES], delta_s[ATTN_QUERIES];
    const uint32_t tile = blockIdx.x, bh = blockIdx.y, b = bh / a.heads, h = bh % a.heads;
    const uint32_t half = threadIdx.x & 1, kr = tile * ATTN_ROWS + (threadIdx.x >> 1);
    const bool live = kr < a.n;
    const uint32_t key_row = live ? kr : 0;
    const uint64_t hd = (uint64_t)a.heads * a.d, at = ((uint64_t)b * a.n + key_row) * hd + (uint64_t)h * a.d;
    float kreg[ATTN_COLS], vreg[ATTN_COLS], dka[ATTN_COLS], dva[ATTN_COLS];
    load_cols(a, k + at, half, live, kreg);
    load_cols(a, v + at, half, live, vreg);
#pragma unroll
    for (int i = 0; i < ATTN_COLS; i++) dka[i] = dva[i] = 0.0f;
    const float kp = live ? a.key_penalty[(uint64_t)b * a.n + key_row] : 0.0f;
    const uint2 key = make_uint2((uint32_t)a.seed, (uint32_t)(a.seed >> 32));
    const uint32_t list = h * gridDim.x + tile;
    for (uint32_t e = inverse_offsets[list]; e < inverse_offsets[list + 1]; e++) {
        const uint32_t qb = inverse_block[e], ri = inverse_range[e];
        const uint32_t rs = a.range_start[ri], rl = a.range_len[ri];
        const bool in = live && key_row >= rs && key_row < rs + rl;
        const float rp = a.range_penalty[ri];
        const uint32_t q0 = a.block_start[qb], qn = a.block_len[qb];
        for (uint32_t t0 = 0; t0 < qn; t0 += ATTN_QUERIES) {
            const uint32_t rows = min((uint32_t)ATTN_QUERIES, qn - t0);
            __syncthreads();
            load_rows(a, q, b, h, q0 + t0, rows, qs, nullptr);
            load_rows(a, grad, b, h, q0 + t0, rows, gs, a.query_mask);
            for (uint32_t i = threadIdx.x; i < rows; i += blockDim.x) {
                const uint64_t r = (uint64_t)bh * a.n + q0 + t0 + i;
                shift_s[i] = stats[2 * r];
                inv_sum_s[i] = stats[2 * r + 1];
                delta_s[i] = delta[(uint64_t)bh * a.n + q0 + t0 + i];
            }
            __syncthreads();
            for (uint32_t i = 0; i < rows; i++) {
                const float dot = pair_sum(half_dot(a, kreg, qs[i], half));
                const float dp = pair_sum(half_dot(a, vreg, gs[i], half));
                if (!in) continue;
                const float p = expf(dot * a.scale + kp + rp - shift_s[i]) * inv_sum_s[i];
                // Each key's elements lie n apart: one Philox call per element here.
                DropoutWords words;
                const float mult = a.dropout ? words.multiplier(((uint64_t)bh * a.n + q0 + t0 + i) * a.n + key_row, key,
                                                                a.offset, a.threshold, a.dropout_scale)
                                             : 1.0f;
                const float ds = p * (dp * mult - delta_s[i]);
#pragma unroll
                for (int c2 = 0; c2 < ATTN_COLS; c2++) {
                    const uint32_t c = 2 * c2 + half;
                    if (c < a.d) {
                        dva[c2] = fmaf(p * mult, gs[i][c], dva[c2]);
                        dka[c2] = fmaf(ds, qs[i][c], dka[c2]);
                    }
                }
            }
        }
    }
    if (!live) return;
#pragma unroll
    for (int i = 0; i < ATTN_COLS; i++) {
        const uint32_t c = 2 * i + half;
        if (c < a.d) {
            dk[at + c] = from_f32<T>(dka[i] * a.scale);
            dv[at + c] = from_f32<T>(dva[i]);
        }
    }
}
