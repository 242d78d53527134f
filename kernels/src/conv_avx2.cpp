// The direct convolution's tile kernels for AVX2: 8 floats or 4 doubles per ymm,
// up to 12 accumulators (16 registers less the weight vectors and a broadcast).
#include <immintrin.h>

#include <utility>

#define D5K_CONV_TARGET __attribute__((target("avx2,fma")))
#include "conv_direct_tile.h"

namespace d5k {

namespace {

struct Avx2F32 {
    using T = float;
    using V = __m256;
    static constexpr int L = 8;
    D5K_CONV_TARGET static V load(const T* p) { return _mm256_loadu_ps(p); }
    D5K_CONV_TARGET static void store(T* p, V v) { _mm256_storeu_ps(p, v); }
    D5K_CONV_TARGET static V prepare(const T* p) { return _mm256_set1_ps(*p); }
    D5K_CONV_TARGET static V fma_bcast(V x, V w, V acc) { return _mm256_fmadd_ps(x, w, acc); }
};

struct Avx2F64 {
    using T = double;
    using V = __m256d;
    static constexpr int L = 4;
    D5K_CONV_TARGET static V load(const T* p) { return _mm256_loadu_pd(p); }
    D5K_CONV_TARGET static void store(T* p, V v) { _mm256_storeu_pd(p, v); }
    D5K_CONV_TARGET static V prepare(const T* p) { return _mm256_set1_pd(*p); }
    D5K_CONV_TARGET static V fma_bcast(V x, V w, V acc) { return _mm256_fmadd_pd(x, w, acc); }
};

constexpr int kBudget = 12;

DirectTile<float> tile_f32(int s, int nb, int r) {
    return pick_tile<Avx2F32, kBudget>(s, nb, r, std::make_integer_sequence<int, kBudget>());
}

DirectTile<double> tile_f64(int s, int nb, int r) {
    return pick_tile<Avx2F64, kBudget>(s, nb, r, std::make_integer_sequence<int, kBudget>());
}

}  // namespace

const DirectKernels<float>& direct_kernels_avx2_f32() {
    static const DirectKernels<float> k{8, 2, kBudget, kBudget, tile_f32, nullptr};
    return k;
}

const DirectKernels<double>& direct_kernels_avx2_f64() {
    static const DirectKernels<double> k{4, 2, kBudget, kBudget, tile_f64, nullptr};
    return k;
}

}  // namespace d5k
