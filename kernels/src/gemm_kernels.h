// The micro-kernels the GEMM driver calls, one per ISA and element type.
//
// A micro-kernel multiplies a packed MR x kc micro-panel of A (column by column: MR
// values per k) by a packed kc x NR micro-panel of B (row by row: NR values per k) and
// stores C = alpha * AB + beta * C for a full MR x NR tile of row-major C (beta == 0:
// C is not read).
#pragma once

#include <cstddef>

namespace d5k {

template <typename T>
using MicroKernel = void (*)(long kc, const T* a, const T* b, T* c, std::ptrdiff_t ldc,
                             T alpha, T beta);

// Register tiles: generic 4x8 (both types); AVX2 6x16 float, 6x8 double;
// AVX-512 14x32 float, 14x16 double.
void ukr_generic_f32(long, const float*, const float*, float*, std::ptrdiff_t, float, float);
void ukr_generic_f64(long, const double*, const double*, double*, std::ptrdiff_t, double,
                     double);
void ukr_avx2_f32(long, const float*, const float*, float*, std::ptrdiff_t, float, float);
void ukr_avx2_f64(long, const double*, const double*, double*, std::ptrdiff_t, double, double);
void ukr_avx512_f32(long, const float*, const float*, float*, std::ptrdiff_t, float, float);
void ukr_avx512_f64(long, const double*, const double*, double*, std::ptrdiff_t, double,
                    double);

// Edge tiles (rows <= MR, cols <= NR) of the AVX-512 kernels, stored under a mask; other
// ISAs compute a full tile into a buffer instead.
template <typename T>
using EdgeKernel = void (*)(long kc, const T* a, const T* b, T* c, std::ptrdiff_t ldc, T alpha,
                            T beta, int rows, int cols);
void edge_avx512_f32(long, const float*, const float*, float*, std::ptrdiff_t, float, float, int,
                     int);
void edge_avx512_f64(long, const double*, const double*, double*, std::ptrdiff_t, double, double,
                     int, int);

// Skinny-product ("sup") kernels of AVX-512: a ROWS x COLS tile (rows <= 14, cols <= 32
// floats / 16 doubles) of C = alpha * A B + beta * C (beta == 0: C is not read) with A
// read in place, element (i, k) at a[i * rsa + k * csa] (csa == 1, or else rsa == 1), and
// B packed row by row with `ldb` values per k (the tile's columns first).
template <typename T>
using SupKernel = void (*)(long kc, const T* a, std::ptrdiff_t rsa, std::ptrdiff_t csa,
                           const T* b, std::ptrdiff_t ldb, T* c, std::ptrdiff_t ldc, T alpha,
                           T beta, int rows, int cols);
void sup_avx512_f32(long, const float*, std::ptrdiff_t, std::ptrdiff_t, const float*,
                    std::ptrdiff_t, float*, std::ptrdiff_t, float, float, int, int);
void sup_avx512_f64(long, const double*, std::ptrdiff_t, std::ptrdiff_t, const double*,
                    std::ptrdiff_t, double*, std::ptrdiff_t, double, double, int, int);

// FMA throughput loops: `iters` rounds of independent multiply-adds; return the flops.
double fma_loop_generic(long iters, int bytes);
double fma_loop_avx2(long iters, int bytes);
double fma_loop_avx512(long iters, int bytes);

}  // namespace d5k
