// Just enough of CUDA to run the attention kernels (attention.cuh) on the CPU, for
// attention_check.cpp: each CUDA thread of a block is a fiber (ucontext), and the block's fibers
// take turns, blocks one after another, so `__shared__` can be a function-local static.
// __syncthreads switches to the next fiber until all have reached it, and __shfl_xor_sync is an
// exchange through memory between two such barriers: both need every thread of the block to
// reach them, which the attention kernels do (their early returns are block-wide or after the
// last barrier).
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct uint2 {
    uint32_t x, y;
};
struct uint4 {
    uint32_t x, y, z, w;
};
inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }

inline dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __device__
#define __global__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(n)

namespace emulation {
inline ucontext_t scheduler;
inline std::vector<ucontext_t> fibers;
inline std::vector<float> slots;
inline const std::function<void()> *body = nullptr;
inline unsigned current = 0;
// Whether the fiber that ran last has returned (set before each switch to it, cleared when it
// yields: a fiber that returns comes back through uc_link).
inline bool finished = false;

// Back to the scheduler, which runs the block's next fiber.
inline void yield() {
    finished = false;
    swapcontext(&fibers[current], &scheduler);
}

inline void run_fiber() { (*body)(); }
}  // namespace emulation

// The scheduler runs fibers 0, 1, … in turn, each up to its next barrier: after one round every
// fiber has reached the same barrier.
inline void __syncthreads() { emulation::yield(); }
inline float __shfl_xor_sync(unsigned, float v, int lane) {
    emulation::slots[threadIdx.x] = v;
    __syncthreads();
    const float other = emulation::slots[threadIdx.x ^ lane];
    __syncthreads();
    return other;
}
inline uint32_t __umulhi(uint32_t a, uint32_t b) { return (uint32_t)(((uint64_t)a * b) >> 32); }
using std::min;

// Run `kernel` over grid × block, blocks one after another.
inline void launch(dim3 grid, dim3 block, const std::function<void()> &kernel) {
    using namespace emulation;
    gridDim = grid;
    blockDim = block;
    slots.assign(block.x, 0.0f);
    body = &kernel;
    const size_t stack = 256 * 1024;
    std::vector<std::vector<char>> stacks(block.x, std::vector<char>(stack));
    fibers.assign(block.x, ucontext_t{});
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            std::vector<bool> done(block.x, false);
            for (unsigned t = 0; t < block.x; t++) {
                getcontext(&fibers[t]);
                fibers[t].uc_stack.ss_sp = stacks[t].data();
                fibers[t].uc_stack.ss_size = stack;
                fibers[t].uc_link = &scheduler;
                makecontext(&fibers[t], run_fiber, 0);
            }
            for (unsigned left = block.x; left > 0;) {
                for (unsigned t = 0; t < block.x; t++) {
                    if (done[t]) continue;
                    current = t;
                    blockIdx = {bx, by, 0};
                    threadIdx = {t, 0, 0};
                    finished = true;
                    swapcontext(&scheduler, &fibers[t]);
                    if (finished) done[t] = true, left--;
                }
            }
        }
}
