// AVX2 + FMA micro-kernels: 6 x 16 floats (12 ymm accumulators) and 6 x 8 doubles.
#include <immintrin.h>

#include "gemm_kernels.h"

#define D5K_AVX2 __attribute__((target("avx2,fma")))

namespace d5k {

namespace {

constexpr int MR = 6;

D5K_AVX2 inline void store_f32(float* c, __m256 acc, __m256 va, __m256 vb, bool beta0) {
    __m256 out = _mm256_mul_ps(va, acc);
    if (!beta0) out = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c), out);
    _mm256_storeu_ps(c, out);
}

D5K_AVX2 inline void store_f64(double* c, __m256d acc, __m256d va, __m256d vb, bool beta0) {
    __m256d out = _mm256_mul_pd(va, acc);
    if (!beta0) out = _mm256_fmadd_pd(vb, _mm256_loadu_pd(c), out);
    _mm256_storeu_pd(c, out);
}

}  // namespace

D5K_AVX2 void ukr_avx2_f32(long kc, const float* a, const float* b, float* c,
                           std::ptrdiff_t ldc, float alpha, float beta) {
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
    for (long k = 0; k < kc; ++k) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        _mm_prefetch(reinterpret_cast<const char*>(b + 128), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m256 ai = _mm256_broadcast_ss(a + i);
            c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
        }
        a += MR;
        b += 16;
    }
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    const bool beta0 = beta == 0.0f;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
        store_f32(c + i * ldc, c0[i], va, vb, beta0);
        store_f32(c + i * ldc + 8, c1[i], va, vb, beta0);
    }
}

D5K_AVX2 void ukr_avx2_f64(long kc, const double* a, const double* b, double* c,
                           std::ptrdiff_t ldc, double alpha, double beta) {
    __m256d c0[MR], c1[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm256_setzero_pd();
    for (long k = 0; k < kc; ++k) {
        const __m256d b0 = _mm256_loadu_pd(b), b1 = _mm256_loadu_pd(b + 4);
        _mm_prefetch(reinterpret_cast<const char*>(b + 64), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m256d ai = _mm256_broadcast_sd(a + i);
            c0[i] = _mm256_fmadd_pd(ai, b0, c0[i]);
            c1[i] = _mm256_fmadd_pd(ai, b1, c1[i]);
        }
        a += MR;
        b += 8;
    }
    const __m256d va = _mm256_set1_pd(alpha), vb = _mm256_set1_pd(beta);
    const bool beta0 = beta == 0.0;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
        store_f64(c + i * ldc, c0[i], va, vb, beta0);
        store_f64(c + i * ldc + 4, c1[i], va, vb, beta0);
    }
}

D5K_AVX2 double fma_loop_avx2(long iters, int bytes) {
    // Ten independent accumulators cover the FMA latency of two pipes.
    __m256 x[10];
    volatile float seed = 1e-3f;
    const __m256 m = _mm256_set1_ps(1.0f + seed), add = _mm256_set1_ps(seed);
#pragma GCC unroll 10
    for (int i = 0; i < 10; ++i) x[i] = _mm256_set1_ps(seed * float(i + 1));
    for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 10
        for (int i = 0; i < 10; ++i) x[i] = _mm256_fmadd_ps(x[i], m, add);
    }
    __m256 sum = x[0];
    for (int i = 1; i < 10; ++i) sum = _mm256_add_ps(sum, x[i]);
    seed = _mm256_cvtss_f32(sum);
    const int lanes = bytes == 4 ? 8 : 4;  // double FMAs run at the same rate per vector
    return 2.0 * 10.0 * lanes * static_cast<double>(iters);
}

}  // namespace d5k
