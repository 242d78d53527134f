// The operator kernels behind d5-kernels' backend, on contiguous row-major buffers.
#pragma once

#include <algorithm>
#include <cstdint>

namespace d5k {

// The geometry of a 2-D window (convolution or pooling) over an H x W plane.
struct Window2d {
    long kh, kw;    // kernel
    long sh, sw;    // strides
    long dh, dw;    // dilations
    long ph, pw;    // padding before each axis
    long peh, pew;  // padding after each axis (counted by AveragePool's count_include_pad)
    long oh, ow;    // output sizes
};

// The output positions [lo, hi) of one row whose tap (at offset `off` = k * d - pad) lands
// inside [0, size) with stride s: o * s + off >= 0 and o * s + off < size.
inline void valid_range(long off, long s, long size, long out, long& lo, long& hi) {
    lo = off >= 0 ? 0 : (-off + s - 1) / s;
    hi = size - off <= 0 ? 0 : (size - off + s - 1) / s;
    lo = std::min(lo, out);
    hi = std::max(lo, std::min(hi, out));
}

// Conv: X (N, C, H, W), Wt (M, C/group, kh, kw), bias (M) or null, Y (N, M, oh, ow).
template <typename T>
void conv2d_forward(const T* x, const T* w, const T* bias, T* y, long n, long c, long h,
                    long wd, long m, long group, const Window2d& g);

// The name of the algorithm conv2d_forward uses for this problem with the ISA in use:
// "direct (AVX-512, padded taps skipped)" (or AVX2), "im2col + packed GEMM", or
// "packed GEMM on the input planes" (a 1x1 convolution, unit strides, no padding).
template <typename T>
const char* conv2d_forward_algorithm(long c, long h, long wd, long m, long group,
                                     const Window2d& g);

// Conv's backward: dx (like X, may be null), dw (like Wt), db (M) or null.
template <typename T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, long n, long c,
                     long h, long wd, long m, long group, const Window2d& g);

// MaxPool over planes = N * C planes of H x W; indices (int64) may be null. storage_order
// 1 numbers positions within a plane column-major.
template <typename T>
void max_pool_forward(const T* x, T* y, std::int64_t* indices, long planes, long h, long wd,
                      const Window2d& g, int storage_order);
template <typename T>
void max_pool_backward(const T* x, const T* dy, T* dx, long planes, long h, long wd,
                       const Window2d& g);

template <typename T>
void avg_pool_forward(const T* x, T* y, long planes, long h, long wd, const Window2d& g,
                      bool count_include_pad);
template <typename T>
void avg_pool_backward(const T* dy, T* dx, long planes, long h, long wd, const Window2d& g,
                       bool count_include_pad);

template <typename T>
void relu_forward(const T* x, T* y, long size);
template <typename T>
void relu_backward(const T* x, const T* dy, T* dx, long size);

// Softmax along the middle axis of (outer, axis, inner).
template <typename T>
void softmax_forward(const T* x, T* y, long outer, long axis, long inner);
template <typename T>
void softmax_backward(const T* y, const T* dy, T* dx, long outer, long axis, long inner);

// BatchNormalization of X (N, C, S). Inference uses mean/var; training computes the
// batch's mean and biased variance and writes the running statistics.
template <typename T>
void batch_norm_forward(const T* x, const T* scale, const T* bias, const T* mean, const T* var,
                        T* y, T* running_mean, T* running_var, long n, long c, long s,
                        double epsilon, double momentum, bool training);
// Gradients of X, scale, B, input_mean, input_var; d_rm / d_rv are the cotangents of
// the running statistics in training (null: zero).
template <typename T>
void batch_norm_backward(const T* x, const T* scale, const T* mean, const T* var, const T* dy,
                         const T* d_rm, const T* d_rv, T* dx, T* dscale, T* dbias, T* dmean,
                         T* dvar, long n, long c, long s, double epsilon, double momentum,
                         bool training);

}  // namespace d5k
