// Direct convolution (oneDNN style) for the forward pass: no column buffer, and the
// taps that fall on padding are skipped rather than multiplied by zeros.
//
// A register tile holds R output pixels of one output row times NB vectors of output
// channels (L channels per vector). For one tap (kh, kw) and a run of input channels
// the tile kernel loads NB weight vectors per input channel and multiplies them by the
// R input values, each broadcast straight from the NCHW input: no input reorder. The
// weights are repacked to [group][channel chunk][kh][kw][C/group][G] (G = NB * L output
// channels) once per call, or block by block inside the one job that uses a chunk (a
// single image); the tile accumulates into a blocked output buffer [pixel][G] that is
// finally transposed into NCHW (with the bias added).
#pragma once

#include "ops.h"

namespace d5k {

// One tile kernel: acc[r * aps + b * L + l] += sum over i < nc of
// x[i * xcs + r * S] * w[i * wcs + b * L + l], for r < R, b < NB, l < L (S, R and NB
// are fixed by the kernel).
template <typename T>
using DirectTile = void (*)(long nc, const T* x, long xcs, const T* w, long wcs, T* acc,
                            long aps);

// The tile kernels of one ISA and element type.
template <typename T>
struct DirectKernels {
    int lanes;     // L: elements per vector
    int max_nb;    // most channel vectors per tile (at most 2)
    int budget;    // most accumulator vectors (R * NB) per tile
    int max_r;     // most pixels per tile
    // The kernel for pixel stride s (1 or 2), nb <= max_nb vectors and r <= max_r
    // pixels with r * nb <= budget (null otherwise).
    DirectTile<T> (*tile)(int s, int nb, int r);
    // out (L x L) = the transpose of L rows of L values, lds apart (null: none).
    void (*transpose)(const T* src, long lds, T* out);
};

// The kernels for AVX-512 and AVX2 (defined in conv_avx512.cpp and conv_avx2.cpp).
const DirectKernels<float>& direct_kernels_avx512_f32();
const DirectKernels<double>& direct_kernels_avx512_f64();
const DirectKernels<float>& direct_kernels_avx2_f32();
const DirectKernels<double>& direct_kernels_avx2_f64();

// The kernels of the ISA in use for T, or null when it has none (generic).
template <typename T>
const DirectKernels<T>* direct_kernels();

// Whether the direct convolution takes this problem: an ISA with tile kernels, a
// horizontal stride of 1 or 2 (the pixel step is fixed in the kernels), at least one
// full vector of output channels per group (fewer would leave lanes idle) and enough
// multiply-adds per output (C/group * kh * kw >= 16) to amortise a tile's loads.
template <typename T>
bool conv_direct_applies(long c, long m, long group, const Window2d& g);

// Conv's forward by the direct algorithm (same contract as conv2d_forward).
template <typename T>
void conv2d_direct(const T* x, const T* w, const T* bias, T* y, long n, long c, long h, long wd,
                   long m, long group, const Window2d& g);

}  // namespace d5k
