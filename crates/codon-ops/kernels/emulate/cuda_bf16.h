// The bf16 type of CUDA's cuda_bf16.h, for the CPU emulation (cuda_runtime_emulation.h).
#pragma once
#include <cstdint>
#include <cstring>
struct __nv_bfloat16 {
    uint16_t bits;
};
inline float __bfloat162float(__nv_bfloat16 x) {
    uint32_t u = (uint32_t)x.bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40)};  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1);
    return {(uint16_t)(u >> 16)};
}
