// attention.cuh's flash attention kernels (attention_fwd, attention_bwd_dq, attention_bwd_dkv),
// run on the CPU through cuda_runtime_emulation.h, against a dense double-precision reference
// written here from the definition: softmax(q·kᵀ·scale + penalties) ⊙ dropout · v per query
// block over its key ranges, masked query rows zeroed, and its gradients. It checks the kernels'
// indexing, tiling, online softmax, dropout draws and gradient sums wherever no GPU is at hand;
// speed and the GPU's own arithmetic are for crates/codon-ops/tests/cuda_bodies.rs on a GPU.
//
//   g++ -std=c++20 -O1 -pthread -I crates/codon-ops/kernels/emulate \
//       crates/codon-ops/kernels/emulate/attention_check.cpp -o attention_check && ./attention_check
#include "cuda_runtime_emulation.h"
#include "../attention.cuh"

#include <cstdio>
#include <random>
#include <string>

struct Range {
    uint32_t start, len;
    float penalty;
};

struct Plan {
    uint32_t batch, heads, n, d;
    std::vector<std::pair<uint32_t, uint32_t>> blocks;  // (start, len)
    std::vector<std::vector<Range>> keys;               // per head · block
    std::vector<float> key_penalty, query_mask;         // (batch, n); query_mask may be empty
    float scale;
    bool dropout;
    double p;
    uint64_t seed, offset;
};

// Philox4x32-10 written again from the published constants (not the kernel file's).
static void philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        const uint64_t a = (uint64_t)0xD2511F53u * c[0], b = (uint64_t)0xCD9E8D57u * c[2];
        const uint32_t n0 = (uint32_t)(b >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(a >> 32) ^ c[3] ^ k1;
        c[0] = n0, c[1] = (uint32_t)b, c[2] = n2, c[3] = (uint32_t)a;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
}

// The CPU's mask multiplier of element i (codon-ops dropout.rs): kept when (w + ½)/2³² < 1 − p.
static double multiplier(const Plan &p, uint64_t i) {
    const uint64_t g = i / 4;
    uint32_t c[4] = {(uint32_t)g, (uint32_t)(g >> 32), (uint32_t)p.offset, (uint32_t)(p.offset >> 32)};
    philox(c, (uint32_t)p.seed, (uint32_t)(p.seed >> 32));
    const double keep = (double)(float)(1.0 - p.p);
    return ((double)c[i % 4] + 0.5) / 4294967296.0 < keep ? 1.0 / (float)keep : 0.0;
}

struct Grads {
    std::vector<double> out, dq, dk, dv;
};

static Grads reference(const Plan &p, const std::vector<float> &q, const std::vector<float> &k,
                       const std::vector<float> &v, const std::vector<float> &g) {
    const size_t hd = (size_t)p.heads * p.d, total = (size_t)p.batch * p.n * hd;
    Grads r{std::vector<double>(total), std::vector<double>(total), std::vector<double>(total), std::vector<double>(total)};
    auto at = [&](uint32_t b, uint32_t t, uint32_t h, uint32_t c) { return ((size_t)b * p.n + t) * hd + (size_t)h * p.d + c; };
    for (uint32_t b = 0; b < p.batch; b++)
        for (uint32_t h = 0; h < p.heads; h++)
            for (size_t j = 0; j < p.blocks.size(); j++)
                for (uint32_t row = p.blocks[j].first; row < p.blocks[j].first + p.blocks[j].second; row++) {
                    std::vector<uint32_t> keys;
                    std::vector<double> s;
                    for (const Range &rg : p.keys[h * p.blocks.size() + j])
                        for (uint32_t key = rg.start; key < rg.start + rg.len; key++) {
                            double dot = 0;
                            for (uint32_t c = 0; c < p.d; c++) dot += (double)q[at(b, row, h, c)] * k[at(b, key, h, c)];
                            keys.push_back(key);
                            s.push_back(dot * p.scale + p.key_penalty[b * p.n + key] + rg.penalty);
                        }
                    const double mx = *std::max_element(s.begin(), s.end());
                    double sum = 0;
                    for (double &x : s) sum += (x = std::exp(x - mx));
                    std::vector<double> prob(s.size()), m(s.size(), 1.0), dp(s.size());
                    const bool live = p.query_mask.empty() || p.query_mask[b * p.n + row] != 0.0f;
                    for (size_t i = 0; i < s.size(); i++) {
                        prob[i] = s[i] / sum;
                        if (p.dropout) m[i] = multiplier(p, (((uint64_t)b * p.heads + h) * p.n + row) * p.n + keys[i]);
                    }
                    for (uint32_t c = 0; c < p.d; c++) {
                        double o = 0;
                        for (size_t i = 0; i < s.size(); i++) o += prob[i] * m[i] * v[at(b, keys[i], h, c)];
                        r.out[at(b, row, h, c)] = live ? o : 0.0;
                    }
                    if (!live) continue;  // a constant 0 row passes no gradient back
                    double dot_pdp = 0;
                    for (size_t i = 0; i < s.size(); i++) {
                        double x = 0;
                        for (uint32_t c = 0; c < p.d; c++) x += (double)g[at(b, row, h, c)] * v[at(b, keys[i], h, c)];
                        dp[i] = x * m[i];
                        dot_pdp += prob[i] * dp[i];
                    }
                    for (size_t i = 0; i < s.size(); i++) {
                        const double ds = prob[i] * (dp[i] - dot_pdp) * p.scale;
                        for (uint32_t c = 0; c < p.d; c++) {
                            r.dq[at(b, row, h, c)] += ds * k[at(b, keys[i], h, c)];
                            r.dk[at(b, keys[i], h, c)] += ds * q[at(b, row, h, c)];
                            r.dv[at(b, keys[i], h, c)] += prob[i] * m[i] * g[at(b, row, h, c)];
                        }
                    }
                }
    return r;
}

// The kernels over the plan, in T, as codon-ops' cuda_launch module launches them.
template <typename T>
static Grads kernels(const Plan &p, const std::vector<float> &qf, const std::vector<float> &kf,
                     const std::vector<float> &vf, const std::vector<float> &gf) {
    auto cast = [](const std::vector<float> &x) {
        std::vector<T> y(x.size());
        for (size_t i = 0; i < x.size(); i++) y[i] = from_f32<T>(x[i]);
        return y;
    };
    const std::vector<T> q = cast(qf), k = cast(kf), v = cast(vf), g = cast(gf);
    std::vector<uint32_t> bs, bl, ro{0}, rs, rl, io{0}, ib, ir;
    std::vector<float> rp;
    for (auto [s, l] : p.blocks) bs.push_back(s), bl.push_back(l);
    for (const auto &list : p.keys) {
        for (const Range &r : list) rs.push_back(r.start), rl.push_back(r.len), rp.push_back(r.penalty);
        ro.push_back((uint32_t)rs.size());
    }
    const uint32_t nq = (uint32_t)p.blocks.size(), key_tiles = (p.n + ATTN_ROWS - 1) / ATTN_ROWS;
    for (uint32_t h = 0; h < p.heads; h++)
        for (uint32_t t = 0; t < key_tiles; t++) {
            for (uint32_t j = 0; j < nq; j++)
                for (uint32_t i = 0; i < p.keys[h * nq + j].size(); i++) {
                    const Range &r = p.keys[h * nq + j][i];
                    if (r.len > 0 && r.start < (t + 1) * ATTN_ROWS && r.start + r.len > t * ATTN_ROWS)
                        ib.push_back(j), ir.push_back(ro[h * nq + j] + i);
                }
            io.push_back((uint32_t)ib.size());
        }
    uint32_t longest = 0;
    for (auto [s, l] : p.blocks) longest = std::max(longest, l);
    const uint32_t tiles = std::max(1u, (longest + ATTN_ROWS - 1) / ATTN_ROWS);
    const double keep_p = (double)(float)(1.0 - p.p);
    const uint64_t threshold = (uint64_t)std::ceil(keep_p * 4294967296.0 - 0.5);
    const float drop_scale = 1.0f / (float)keep_p;
    const AttentionArgs a{p.n, p.heads, p.d, nq, bs.data(), bl.data(), ro.data(), rs.data(), rl.data(), rp.data(),
                          p.key_penalty.data(), p.query_mask.empty() ? nullptr : p.query_mask.data(), p.scale,
                          p.dropout ? 1u : 0u, p.seed, p.offset, threshold, drop_scale};
    const size_t total = q.size(), rows = (size_t)p.batch * p.heads * p.n;
    std::vector<T> out(total), dq(total), dk(total), dv(total);
    std::vector<float> stats(2 * rows), delta(rows);
    const dim3 threads{ATTN_THREADS, 1, 1};
    launch({nq * tiles, p.batch * p.heads, 1}, threads, [&] { attention_fwd<T>(a, tiles, q.data(), k.data(), v.data(), out.data(), stats.data()); });
    launch({nq * tiles, p.batch * p.heads, 1}, threads, [&] {
        attention_bwd_dq<T>(a, tiles, q.data(), k.data(), v.data(), out.data(), g.data(), stats.data(), delta.data(), dq.data());
    });
    launch({key_tiles, p.batch * p.heads, 1}, threads, [&] {
        attention_bwd_dkv<T>(a, io.data(), ib.data(), ir.data(), q.data(), k.data(), v.data(), g.data(), stats.data(),
                             delta.data(), dk.data(), dv.data());
    });
    auto wide = [](const std::vector<T> &x) {
        std::vector<double> y(x.size());
        for (size_t i = 0; i < x.size(); i++) y[i] = to_f32(x[i]);
        return y;
    };
    return {wide(out), wide(dq), wide(dk), wide(dv)};
}

// The reference computed from the inputs rounded to T, as the kernels see them.
template <typename T> static std::vector<float> rounded(const std::vector<float> &x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); i++) y[i] = to_f32(from_f32<T>(x[i]));
    return y;
}

template <typename T> static int check(const char *what, const char *dtype, const Plan &p, double tolerance) {
    std::mt19937_64 rng(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const size_t total = (size_t)p.batch * p.n * p.heads * p.d;
    auto random = [&] {
        std::vector<float> x(total);
        for (float &e : x) e = normal(rng);
        return rounded<T>(x);
    };
    const std::vector<float> q = random(), k = random(), v = random(), g = random();
    const Grads want = reference(p, q, k, v, g), got = kernels<T>(p, q, k, v, g);
    int failed = 0;
    const char *names[4] = {"output", "dq", "dk", "dv"};
    const std::vector<double> *w[4] = {&want.out, &want.dq, &want.dk, &want.dv}, *o[4] = {&got.out, &got.dq, &got.dk, &got.dv};
    for (int t = 0; t < 4; t++) {
        double largest = 0, diff = 0;
        for (size_t i = 0; i < total; i++) {
            largest = std::max(largest, std::fabs((*w[t])[i]));
            const double e = std::fabs((*w[t])[i] - (*o[t])[i]);
            diff = std::isnan(e) ? INFINITY : std::max(diff, e);
        }
        const double rel = diff / std::max(largest, 1e-30);
        const bool ok = rel <= tolerance && largest > 0;
        std::printf("%-8s %-4s n=%u d=%u %-6s: %.3e of the largest (%.3g)%s\n", what, dtype, p.n, p.d, names[t], rel, largest, ok ? "" : "  FAILED");
        failed += !ok;
    }
    return failed;
}

static Plan full(uint32_t n, uint32_t d) {
    Plan p{2, 2, n, d, {}, {}, {}, {}, 0.125f, true, 0.1, 11, 2};
    for (uint32_t s = 0; s < n; s += 64) p.blocks.push_back({s, std::min(64u, n - s)});
    p.keys.assign(p.heads * p.blocks.size(), {Range{0, n, 0.0f}});
    for (uint32_t i = 0; i < p.batch * n; i++) p.key_penalty.push_back(i >= 2 * n - 20 ? -10000.0f : 0.0f);
    return p;
}

// Full attention where the second sequence is all padding, masked with f32::MIN as the model's
// full attention masks it: every score of its rows is f32::MIN, so each row's probabilities are
// uniform, and the backward pass must see 1/n, not 1.
static Plan all_padding(uint32_t n, uint32_t d) {
    Plan p = full(n, d);
    p.dropout = false;
    for (uint32_t i = 0; i < p.batch * n; i++) p.key_penalty[i] = i >= n ? -3.4028235e38f : 0.0f;
    return p;
}

static Plan sparse(uint32_t blocks, uint32_t w, uint32_t d) {
    const uint32_t n = blocks * w;
    Plan p{2, 2, n, d, {}, {}, {}, {}, 0.125f, false, 0.0, 0, 0};
    for (uint32_t j = 0; j < blocks; j++) p.blocks.push_back({j * w, w});
    auto range = [&](uint32_t b, float pen) { return Range{b * w, w, pen}; };
    for (uint32_t h = 0; h < p.heads; h++)
        for (uint32_t j = 0; j < blocks; j++) {
            if (j == 0 || j == blocks - 1) {
                p.keys.push_back({Range{0, n, 0.0f}});
                continue;
            }
            // An absent slot (BigBird's edge blocks), a block listed twice, a random block per head.
            p.keys.push_back({range(0, 0.0f), range(j - 1, j == 1 ? -3.0e4f : 0.0f), range(j, 0.0f), range(j + 1, 0.0f),
                              range(blocks - 1, 0.0f), range((j + h + 2) % blocks, 0.0f)});
        }
    for (uint32_t i = 0; i < p.batch * n; i++) {
        const bool padded = i / n == 1 && i % n >= n - 10;
        p.key_penalty.push_back(padded ? -10000.0f : 0.0f);
        p.query_mask.push_back(padded ? 0.0f : 1.0f);
    }
    return p;
}

int main() {
    int failed = 0;
    // Lengths that are not multiples of the tiles; heads of 64 dimensions (CodonTransformer's)
    // and of fewer (a partial register row); key blocks smaller and larger than a tile.
    for (const auto &[what, plan] : {std::pair<const char *, Plan>{"full", full(100, 64)}, {"full", full(70, 20)},
                                     {"padding", all_padding(40, 16)}, {"sparse", sparse(5, 32, 64)},
                                     {"sparse", sparse(4, 64, 24)}}) {
        failed += check<float>(what, "f32", plan, 2e-5);
        failed += check<__nv_bfloat16>(what, "bf16", plan, 1.5e-2);
    }
    std::printf(failed ? "%d checks FAILED\n" : "all attention kernels match the reference\n", failed);
    return failed ? 1 : 0;
}
