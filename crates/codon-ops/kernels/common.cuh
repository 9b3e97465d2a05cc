// What codon_ops.cu's kernels share with the files it includes: the storage dtypes' conversions
// to and from f32, the Philox4x32-10 generator and the dropout masks' layout.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// Philox4x32-10 (ten rounds) at counter c under key k: four 32-bit words.
__device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint2 k) {
    for (int round = 0; round < 10; round++) {
        const uint32_t hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        const uint32_t hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k.x += 0x9E3779B9u;
        k.y += 0xBB67AE85u;
    }
    return c;
}

// The dropout mask of draw (seed, offset) at element i as a multiplier (codon-ops dropout.rs):
// word i % 4 of Philox4x32-10 at counter {i/4, offset} under the seed keeps the element when it
// is below `threshold` (the host's exact integer form of (w + ½)/2³² < 1 − p). One Philox call
// serves four consecutive elements: the last group's words are kept.
struct DropoutWords {
    uint64_t group = ~0ull;
    uint4 words;

    __device__ __forceinline__ float multiplier(uint64_t i, uint2 key, uint64_t offset, uint64_t threshold, float scale) {
        if (i >> 2 != group) {
            group = i >> 2;
            words = philox4x32_10(make_uint4((uint32_t)group, (uint32_t)(group >> 32), (uint32_t)offset, (uint32_t)(offset >> 32)), key);
        }
        const uint32_t lane = (uint32_t)(i & 3);
        const uint32_t word = lane == 0 ? words.x : lane == 1 ? words.y : lane == 2 ? words.z : words.w;
        return (uint64_t)word < threshold ? scale : 0.0f;
    }
};
