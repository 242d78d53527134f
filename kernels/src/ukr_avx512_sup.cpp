// AVX-512 kernels for skinny products ("sup", after BLIS's small/unpacked path): A is read
// in place instead of packed. When Y has few columns each element of A feeds only a few
// vector FMAs, so a packed copy of A (a transposing pass over all of it) would cost about
// as much as the arithmetic. B (K x N, small then) is packed into panels whose width is
// rounded to whole vectors, so a 16-column B carries no zero padding.
//
// A tile is ROWS (<= 14) rows times NV (1 or 2) vectors; element (i, k) of A lies at
// a[i * rsa + k] (A_ROWS: a row-major A, one stream per row) or a[i + k * csa] (a
// transposed A: the ROWS values of one k are adjacent, as in a packed panel).
#include <immintrin.h>

#include "gemm_kernels.h"

#define D5K_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma")))

namespace d5k {

namespace {

constexpr int MR = 14;

// Vector traits: one set of intrinsics per element type, so one kernel template serves
// float and double.
template <typename T>
struct Vec;

template <>
struct Vec<float> {
    using V = __m512;
    using Mask = __mmask16;
    static constexpr int lanes = 16;
    D5K_AVX512 static V zero() { return _mm512_setzero_ps(); }
    D5K_AVX512 static V set1(float x) { return _mm512_set1_ps(x); }
    D5K_AVX512 static V load(const float* p) { return _mm512_loadu_ps(p); }
    D5K_AVX512 static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    D5K_AVX512 static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    D5K_AVX512 static V maskz_load(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
    D5K_AVX512 static void mask_store(float* p, Mask m, V v) { _mm512_mask_storeu_ps(p, m, v); }
};

template <>
struct Vec<double> {
    using V = __m512d;
    using Mask = __mmask8;
    static constexpr int lanes = 8;
    D5K_AVX512 static V zero() { return _mm512_setzero_pd(); }
    D5K_AVX512 static V set1(double x) { return _mm512_set1_pd(x); }
    D5K_AVX512 static V load(const double* p) { return _mm512_loadu_pd(p); }
    D5K_AVX512 static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
    D5K_AVX512 static V mul(V a, V b) { return _mm512_mul_pd(a, b); }
    D5K_AVX512 static V maskz_load(Mask m, const double* p) { return _mm512_maskz_loadu_pd(m, p); }
    D5K_AVX512 static void mask_store(double* p, Mask m, V v) { _mm512_mask_storeu_pd(p, m, v); }
};

// How far ahead (in k) the row streams of a row-major A are prefetched: a few cache lines,
// enough to cover an L2 hit while the hardware prefetcher brings the rest from memory.
constexpr long AHEAD_BYTES = 512;

template <typename T, int ROWS, int NV, bool A_ROWS>
D5K_AVX512 void sup_tile(long kc, const T* a, std::ptrdiff_t rsa, std::ptrdiff_t csa,
                         const T* b, std::ptrdiff_t ldb, T* c, std::ptrdiff_t ldc, T alpha,
                         T beta, int cols) {
    using W = Vec<T>;
    using V = typename W::V;
    V acc[ROWS][NV];
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[i][v] = W::zero();
    if constexpr (A_ROWS) {
        constexpr long ahead = AHEAD_BYTES / static_cast<long>(sizeof(T));
        constexpr long line = 64 / static_cast<long>(sizeof(T));
        long k = 0;
        // Whole cache lines of every row first: one prefetch per row and line.
        for (; k + line <= kc; k += line) {
#pragma GCC unroll 16
            for (int i = 0; i < ROWS; ++i)
                _mm_prefetch(reinterpret_cast<const char*>(a + i * rsa + k + ahead), _MM_HINT_T0);
#pragma GCC unroll 4
            for (long kk = k; kk < k + line; ++kk) {
                V bv[NV];
#pragma GCC unroll 2
                for (int v = 0; v < NV; ++v) bv[v] = W::load(b + kk * ldb + W::lanes * v);
#pragma GCC unroll 16
                for (int i = 0; i < ROWS; ++i) {
                    const V ai = W::set1(a[i * rsa + kk]);
#pragma GCC unroll 2
                    for (int v = 0; v < NV; ++v) acc[i][v] = W::fma(ai, bv[v], acc[i][v]);
                }
            }
        }
        for (; k < kc; ++k) {
            V bv[NV];
#pragma GCC unroll 2
            for (int v = 0; v < NV; ++v) bv[v] = W::load(b + k * ldb + W::lanes * v);
#pragma GCC unroll 16
            for (int i = 0; i < ROWS; ++i) {
                const V ai = W::set1(a[i * rsa + k]);
#pragma GCC unroll 2
                for (int v = 0; v < NV; ++v) acc[i][v] = W::fma(ai, bv[v], acc[i][v]);
            }
        }
    } else {
        for (long k = 0; k < kc; ++k) {
            V bv[NV];
#pragma GCC unroll 2
            for (int v = 0; v < NV; ++v) bv[v] = W::load(b + W::lanes * v);
#pragma GCC unroll 16
            for (int i = 0; i < ROWS; ++i) {
                const V ai = W::set1(a[i]);
#pragma GCC unroll 2
                for (int v = 0; v < NV; ++v) acc[i][v] = W::fma(ai, bv[v], acc[i][v]);
            }
            a += csa;
            b += ldb;
        }
    }
    const V va = W::set1(alpha), vb = W::set1(beta);
    using Mask = typename W::Mask;
    const int tail = cols - W::lanes * (NV - 1);
    const Mask last = static_cast<Mask>((1u << tail) - 1u);
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) {
            T* at = c + i * ldc + W::lanes * v;
            const Mask mask = v == NV - 1 ? last : static_cast<Mask>(~0u);
            V out = W::mul(va, acc[i][v]);
            if (beta != T(0)) out = W::fma(vb, W::maskz_load(mask, at), out);
            W::mask_store(at, mask, out);
        }
}

template <typename T>
using SupTile = void (*)(long, const T*, std::ptrdiff_t, std::ptrdiff_t, const T*,
                         std::ptrdiff_t, T*, std::ptrdiff_t, T, T, int);

#define D5K_SUP_ROW(T, r, rows) {sup_tile<T, r, 1, rows>, sup_tile<T, r, 2, rows>}
#define D5K_SUP_TABLE(T, rows)                                                                \
    {D5K_SUP_ROW(T, 1, rows),  D5K_SUP_ROW(T, 2, rows),  D5K_SUP_ROW(T, 3, rows),           \
     D5K_SUP_ROW(T, 4, rows),  D5K_SUP_ROW(T, 5, rows),  D5K_SUP_ROW(T, 6, rows),           \
     D5K_SUP_ROW(T, 7, rows),  D5K_SUP_ROW(T, 8, rows),  D5K_SUP_ROW(T, 9, rows),           \
     D5K_SUP_ROW(T, 10, rows), D5K_SUP_ROW(T, 11, rows), D5K_SUP_ROW(T, 12, rows),          \
     D5K_SUP_ROW(T, 13, rows), D5K_SUP_ROW(T, 14, rows)}

// [A row-major?][rows - 1][vectors - 1]
const SupTile<float> sup_f32_table[2][MR][2] = {D5K_SUP_TABLE(float, false),
                                                D5K_SUP_TABLE(float, true)};
const SupTile<double> sup_f64_table[2][MR][2] = {D5K_SUP_TABLE(double, false),
                                                 D5K_SUP_TABLE(double, true)};

}  // namespace

void sup_avx512_f32(long kc, const float* a, std::ptrdiff_t rsa, std::ptrdiff_t csa,
                    const float* b, std::ptrdiff_t ldb, float* c, std::ptrdiff_t ldc, float alpha,
                    float beta, int rows, int cols) {
    sup_f32_table[csa == 1 ? 1 : 0][rows - 1][cols > 16 ? 1 : 0](kc, a, rsa, csa, b, ldb, c, ldc,
                                                                 alpha, beta, cols);
}

void sup_avx512_f64(long kc, const double* a, std::ptrdiff_t rsa, std::ptrdiff_t csa,
                    const double* b, std::ptrdiff_t ldb, double* c, std::ptrdiff_t ldc,
                    double alpha, double beta, int rows, int cols) {
    sup_f64_table[csa == 1 ? 1 : 0][rows - 1][cols > 8 ? 1 : 0](kc, a, rsa, csa, b, ldb, c, ldc,
                                                                alpha, beta, cols);
}

}  // namespace d5k
