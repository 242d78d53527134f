// Portable scalar micro-kernels (4 x 8 tile): the fallback for any x86-64 (and the path
// tests force to check the driver independently of the vector kernels).
#include "gemm_kernels.h"

namespace d5k {

namespace {

constexpr int MR = 4;
constexpr int NR = 8;

template <typename T>
void ukr_generic(long kc, const T* a, const T* b, T* c, std::ptrdiff_t ldc, T alpha, T beta) {
    T acc[MR][NR] = {};
    for (long k = 0; k < kc; ++k) {
        for (int i = 0; i < MR; ++i) {
            const T ai = a[i];
            for (int j = 0; j < NR; ++j) acc[i][j] += ai * b[j];
        }
        a += MR;
        b += NR;
    }
    for (int i = 0; i < MR; ++i) {
        T* row = c + i * ldc;
        if (beta == T(0)) {
            for (int j = 0; j < NR; ++j) row[j] = alpha * acc[i][j];
        } else {
            for (int j = 0; j < NR; ++j) row[j] = beta * row[j] + alpha * acc[i][j];
        }
    }
}

template <typename T>
double fma_loop(long iters) {
    // Eight independent chains; volatile seeds keep the compiler from folding them.
    volatile T seed = T(1e-3);
    T x[8];
    for (int i = 0; i < 8; ++i) x[i] = seed * T(i + 1);
    const T m = seed + T(1), add = seed;
    for (long it = 0; it < iters; ++it)
        for (int i = 0; i < 8; ++i) x[i] = x[i] * m + add;
    T sum = 0;
    for (int i = 0; i < 8; ++i) sum += x[i];
    seed = sum;
    return 2.0 * 8.0 * static_cast<double>(iters);
}

}  // namespace

void ukr_generic_f32(long kc, const float* a, const float* b, float* c, std::ptrdiff_t ldc,
                     float alpha, float beta) {
    ukr_generic<float>(kc, a, b, c, ldc, alpha, beta);
}

void ukr_generic_f64(long kc, const double* a, const double* b, double* c, std::ptrdiff_t ldc,
                     double alpha, double beta) {
    ukr_generic<double>(kc, a, b, c, ldc, alpha, beta);
}

double fma_loop_generic(long iters, int bytes) {
    return bytes == 4 ? fma_loop<float>(iters) : fma_loop<double>(iters);
}

}  // namespace d5k
