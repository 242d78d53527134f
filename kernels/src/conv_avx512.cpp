// The direct convolution's tile kernels for AVX-512: 16 floats or 8 doubles per zmm,
// up to 28 accumulators (the inputs are broadcast from memory inside each multiply-add),
// at most 2 vectors of output channels per tile. Measured on Zen 4 (issue 29): 8 x 2
// tiles beat 4 x 4 on 8x8 images by a fifth, and 2 vectors are never slower than 4
// (fewer weight loads per multiply-add, rows of up to 14 pixels in one tile).
#include <immintrin.h>

#include <utility>

#define D5K_CONV_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma")))
#include "conv_direct_tile.h"

namespace d5k {

namespace {

struct Avx512F32 {
    using T = float;
    using V = __m512;
    static constexpr int L = 16;
    D5K_CONV_TARGET static V load(const T* p) { return _mm512_loadu_ps(p); }
    D5K_CONV_TARGET static void store(T* p, V v) { _mm512_storeu_ps(p, v); }
    static const T* prepare(const T* p) { return p; }
    // acc += broadcast(*p) * w, the broadcast folded into the instruction (one
    // instruction and no register per pixel): written in assembly because the compiler
    // hoists a broadcast used by several multiply-adds into a register of its own.
    D5K_CONV_TARGET static V fma_bcast(const T* p, V w, V acc) {
        asm("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*p));
        return acc;
    }
};

struct Avx512F64 {
    using T = double;
    using V = __m512d;
    static constexpr int L = 8;
    D5K_CONV_TARGET static V load(const T* p) { return _mm512_loadu_pd(p); }
    D5K_CONV_TARGET static void store(T* p, V v) { _mm512_storeu_pd(p, v); }
    static const T* prepare(const T* p) { return p; }
    D5K_CONV_TARGET static V fma_bcast(const T* p, V w, V acc) {
        asm("vfmadd231pd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*p));
        return acc;
    }
};

// out (16 x 16) = the transpose of 16 rows of 16 floats, `lds` apart: unpacks within
// 128-bit lanes, then shuffles of lanes.
D5K_CONV_TARGET void transpose_f32(const float* src, long lds, float* out) {
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 4; ++i) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 8; ++i) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) _mm512_storeu_ps(out + i * 16, r[i]);
}
// out (8 x 8) = the transpose of 8 rows of 8 doubles, `lds` apart.
D5K_CONV_TARGET void transpose_f64(const double* src, long lds, double* out) {
    __m512d r[8], t[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) r[i] = _mm512_loadu_pd(src + i * lds);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_pd(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_pd(r[i], r[i + 1]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm512_shuffle_f64x2(t[i], t[i + 2], 0x88);
        r[i + 1] = _mm512_shuffle_f64x2(t[i + 1], t[i + 3], 0x88);
        r[i + 2] = _mm512_shuffle_f64x2(t[i], t[i + 2], 0xDD);
        r[i + 3] = _mm512_shuffle_f64x2(t[i + 1], t[i + 3], 0xDD);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 4; ++i) {
        t[i] = _mm512_shuffle_f64x2(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f64x2(r[i], r[i + 4], 0xDD);
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) _mm512_storeu_pd(out + i * 8, t[i]);
}

constexpr int kBudget = 28;

DirectTile<float> tile_f32(int s, int nb, int r) {
    return pick_tile<Avx512F32, kBudget>(s, nb, r, std::make_integer_sequence<int, kBudget>());
}

DirectTile<double> tile_f64(int s, int nb, int r) {
    return pick_tile<Avx512F64, kBudget>(s, nb, r, std::make_integer_sequence<int, kBudget>());
}

}  // namespace

const DirectKernels<float>& direct_kernels_avx512_f32() {
    static const DirectKernels<float> k{16, 2, kBudget, kBudget, tile_f32, transpose_f32};
    return k;
}

const DirectKernels<double>& direct_kernels_avx512_f64() {
    static const DirectKernels<double> k{8, 2, kBudget, kBudget, tile_f64, transpose_f64};
    return k;
}

}  // namespace d5k
