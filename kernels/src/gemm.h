// A BLIS-style GEMM: packed panels, register-blocked micro-kernels chosen at run time.
#pragma once

#include <cstddef>

#include "isa.h"

namespace d5k {

// A read-only matrix with arbitrary element strides (a transpose swaps them; a zero
// stride broadcasts).
template <typename T>
struct Matrix {
    const T* data;
    std::ptrdiff_t rs;  // elements between rows
    std::ptrdiff_t cs;  // elements between columns
};

// The blocking of one micro-kernel: its register tile (mr x nr) and the cache blocks
// (mc x kc panels of A, kc x nc panels of B).
struct Blocking {
    int mr, nr, kc, mc, nc;
};

// The blocking the GEMM uses for `isa` and element size `bytes` (4 or 8).
Blocking gemm_blocking(Isa isa, int bytes);

// Y (M x N, rows `ldy` apart, unit column stride) = alpha * A B + beta * Y, where A is
// M x K and B is K x N. With beta == 0 Y is not read (it may hold garbage).
// `threads` <= 0 uses the OpenMP setting; inside a parallel region it runs serially.
template <typename T>
void gemm(long M, long N, long K, T alpha, Matrix<T> A, Matrix<T> B, T beta, T* Y,
          std::ptrdiff_t ldy, int threads = 0);

// OpenMP's thread count for the next parallel regions.
int max_threads();
void set_max_threads(int n);

// Measured FMA throughput of one core with `isa`'s widest FMA, in GFLOP/s (two flops per
// multiply-add), for float (bytes 4) or double (bytes 8), over about `seconds`.
double peak_gflops(Isa isa, int bytes, double seconds);

}  // namespace d5k
