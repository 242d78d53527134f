// AVX-512 micro-kernels: 14 x 32 floats and 14 x 16 doubles (28 zmm accumulators, two
// for B and one broadcast of A per step).
#include <immintrin.h>

#include "gemm_kernels.h"

#define D5K_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma,prfchw")))

namespace d5k {

namespace {

constexpr int MR = 14;
// Software prefetch distance of the packed panels, in steps of k (both lines of B's step
// and one line of A's): 16 steps are about 450 cycles of FMAs, an L3 hit's latency with room
// to spare, while the panels' next lines arrive before the hardware prefetcher catches on.
constexpr int PF_STEPS = 16;
constexpr int PF_B64 = 16 * PF_STEPS, PF_B32 = 32 * PF_STEPS, PF_A64 = MR * PF_STEPS,
              PF_A32 = MR * PF_STEPS;

// Asks for the C tile's rows (two cache lines each) before the k loop, with intent to
// write: over a large product C does not stay in cache between K slices, and the loop's
// thousands of cycles hide the misses that the stores would otherwise wait for.
D5K_AVX512 inline void prefetch_c(const void* c, std::ptrdiff_t ldc_bytes) {
    const char* row = static_cast<const char*>(c);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i, row += ldc_bytes) {
        __builtin_prefetch(row, 1, 3);
        __builtin_prefetch(row + 64, 1, 3);
    }
}

D5K_AVX512 inline void store_f32(float* c, __m512 acc, __m512 va, __m512 vb, bool beta0) {
    __m512 out = _mm512_mul_ps(va, acc);
    if (!beta0) out = _mm512_fmadd_ps(vb, _mm512_loadu_ps(c), out);
    _mm512_storeu_ps(c, out);
}

D5K_AVX512 inline void store_f64(double* c, __m512d acc, __m512d va, __m512d vb, bool beta0) {
    __m512d out = _mm512_mul_pd(va, acc);
    if (!beta0) out = _mm512_fmadd_pd(vb, _mm512_loadu_pd(c), out);
    _mm512_storeu_pd(c, out);
}

}  // namespace

D5K_AVX512 void ukr_avx512_f32(long kc, const float* a, const float* b, float* c,
                               std::ptrdiff_t ldc, float alpha, float beta) {
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
    prefetch_c(c, ldc * 4);
    for (long k = 0; k < kc; ++k) {
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        _mm_prefetch(reinterpret_cast<const char*>(b + PF_B32), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b + PF_B32 + 16), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(a + PF_A32), _MM_HINT_T0);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
            const __m512 ai = _mm512_set1_ps(a[i]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
        a += MR;
        b += 32;
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const bool beta0 = beta == 0.0f;
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
        store_f32(c + i * ldc, c0[i], va, vb, beta0);
        store_f32(c + i * ldc + 16, c1[i], va, vb, beta0);
    }
}

D5K_AVX512 void ukr_avx512_f64(long kc, const double* a, const double* b, double* c,
                               std::ptrdiff_t ldc, double alpha, double beta) {
    __m512d c0[MR], c1[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_pd();
    prefetch_c(c, ldc * 8);
    for (long k = 0; k < kc; ++k) {
        const __m512d b0 = _mm512_loadu_pd(b), b1 = _mm512_loadu_pd(b + 8);
        _mm_prefetch(reinterpret_cast<const char*>(b + PF_B64), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b + PF_B64 + 8), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(a + PF_A64), _MM_HINT_T0);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
            const __m512d ai = _mm512_set1_pd(a[i]);
            c0[i] = _mm512_fmadd_pd(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_pd(ai, b1, c1[i]);
        }
        a += MR;
        b += 16;
    }
    const __m512d va = _mm512_set1_pd(alpha), vb = _mm512_set1_pd(beta);
    const bool beta0 = beta == 0.0;
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
        store_f64(c + i * ldc, c0[i], va, vb, beta0);
        store_f64(c + i * ldc + 8, c1[i], va, vb, beta0);
    }
}

D5K_AVX512 double fma_loop_avx512(long iters, int bytes) {
    __m512 x[12];
    volatile float seed = 1e-3f;
    const __m512 m = _mm512_set1_ps(1.0f + seed), add = _mm512_set1_ps(seed);
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) x[i] = _mm512_set1_ps(seed * float(i + 1));
    for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; ++i) x[i] = _mm512_fmadd_ps(x[i], m, add);
    }
    __m512 sum = x[0];
    for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, x[i]);
    // A plain store and sum: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized.
    alignas(64) float lanes_out[16];
    _mm512_store_ps(lanes_out, sum);
    float total = 0.0f;
    for (float x : lanes_out) total += x;
    seed = total;
    const int lanes = bytes == 4 ? 16 : 8;
    return 2.0 * 12.0 * lanes * static_cast<double>(iters);
}

}  // namespace d5k

// Edge tiles: ROWS (1..14) rows of A's packed micro-panel (still 14 values per k) times
// NV vectors of B's (still 32 floats / 16 doubles per k); the last vector is stored
// under a mask of `cols` columns. Cheaper than a full tile into a buffer when M or N
// is not a multiple of the tile (a 32-row GEMM is 14 + 14 + 4 rows).
namespace d5k {

namespace {

template <int ROWS, int NV>
D5K_AVX512 void edge_f32(long kc, const float* a, const float* b, float* c, std::ptrdiff_t ldc,
                         float alpha, float beta, int cols) {
    __m512 acc[ROWS][NV];
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
    for (long k = 0; k < kc; ++k) {
        __m512 bv[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < ROWS; ++i) {
            const __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 2
            for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
        }
        a += MR;
        b += 32;
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    const __mmask16 last = static_cast<__mmask16>((1u << (cols - 16 * (NV - 1))) - 1u);
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) {
            float* at = c + i * ldc + 16 * v;
            const __mmask16 mask = v == NV - 1 ? last : static_cast<__mmask16>(0xFFFF);
            __m512 out = _mm512_mul_ps(va, acc[i][v]);
            if (beta != 0.0f) out = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, at), out);
            _mm512_mask_storeu_ps(at, mask, out);
        }
}

template <int ROWS, int NV>
D5K_AVX512 void edge_f64(long kc, const double* a, const double* b, double* c,
                         std::ptrdiff_t ldc, double alpha, double beta, int cols) {
    __m512d acc[ROWS][NV];
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_pd();
    for (long k = 0; k < kc; ++k) {
        __m512d bv[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_pd(b + 8 * v);
#pragma GCC unroll 16
        for (int i = 0; i < ROWS; ++i) {
            const __m512d ai = _mm512_set1_pd(a[i]);
#pragma GCC unroll 2
            for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_pd(ai, bv[v], acc[i][v]);
        }
        a += MR;
        b += 16;
    }
    const __m512d va = _mm512_set1_pd(alpha), vb = _mm512_set1_pd(beta);
    const __mmask8 last = static_cast<__mmask8>((1u << (cols - 8 * (NV - 1))) - 1u);
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) {
            double* at = c + i * ldc + 8 * v;
            const __mmask8 mask = v == NV - 1 ? last : static_cast<__mmask8>(0xFF);
            __m512d out = _mm512_mul_pd(va, acc[i][v]);
            if (beta != 0.0) out = _mm512_fmadd_pd(vb, _mm512_maskz_loadu_pd(mask, at), out);
            _mm512_mask_storeu_pd(at, mask, out);
        }
}

using EdgeF32 = void (*)(long, const float*, const float*, float*, std::ptrdiff_t, float, float,
                         int);
using EdgeF64 = void (*)(long, const double*, const double*, double*, std::ptrdiff_t, double,
                         double, int);

#define D5K_ROW(kernel, r) {kernel<r, 1>, kernel<r, 2>}
#define D5K_TABLE(kernel)                                                                     \
    {D5K_ROW(kernel, 1),  D5K_ROW(kernel, 2),  D5K_ROW(kernel, 3),  D5K_ROW(kernel, 4),       \
     D5K_ROW(kernel, 5),  D5K_ROW(kernel, 6),  D5K_ROW(kernel, 7),  D5K_ROW(kernel, 8),       \
     D5K_ROW(kernel, 9),  D5K_ROW(kernel, 10), D5K_ROW(kernel, 11), D5K_ROW(kernel, 12),      \
     D5K_ROW(kernel, 13), D5K_ROW(kernel, 14)}

const EdgeF32 edge_f32_table[MR][2] = D5K_TABLE(edge_f32);
const EdgeF64 edge_f64_table[MR][2] = D5K_TABLE(edge_f64);

}  // namespace

void edge_avx512_f32(long kc, const float* a, const float* b, float* c, std::ptrdiff_t ldc,
                     float alpha, float beta, int rows, int cols) {
    edge_f32_table[rows - 1][cols > 16 ? 1 : 0](kc, a, b, c, ldc, alpha, beta, cols);
}

void edge_avx512_f64(long kc, const double* a, const double* b, double* c, std::ptrdiff_t ldc,
                     double alpha, double beta, int rows, int cols) {
    edge_f64_table[rows - 1][cols > 8 ? 1 : 0](kc, a, b, c, ldc, alpha, beta, cols);
}

}  // namespace d5k
