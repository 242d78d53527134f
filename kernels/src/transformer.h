// The transformer operators' kernels: LayerNormalization, Gelu, Erf and Gather, on
// contiguous row-major buffers, float32 or float64.
#pragma once

#include <cstdint>

namespace d5k {

// LayerNormalization of X viewed as (rows, width): each row is normalized over its
// width elements with its own mean and biased variance, then scaled and shifted
// elementwise by scale (width) and bias (width, or null). Mean and inv_std (rows) receive
// each row's mean and 1 / sqrt(var + epsilon).
template <typename T>
void layer_norm_forward(const T* x, const T* scale, const T* bias, T* y, T* mean, T* inv_std,
                        long rows, long width, double epsilon);

// Its backward from the forward's mean and inv_std: dy (rows, width) and the cotangents
// of Mean and InvStdDev (rows each, or null: zero). Writes dx (rows, width), dscale
// (width) and dbias (width, or null), the latter two summed over the rows in a fixed order.
template <typename T>
void layer_norm_backward(const T* x, const T* scale, const T* mean, const T* inv_std,
                         const T* dy, const T* dmean, const T* dinv_std, T* dx, T* dscale,
                         T* dbias, long rows, long width);

// Erf and Gelu element-wise; the backward multiplies dy by the derivative at x.
template <typename T>
void erf_forward(const T* x, T* y, long size);
template <typename T>
void erf_backward(const T* x, const T* dy, T* dx, long size);
// tanh_form: Gelu's tanh approximation instead of the exact 0.5 x (1 + erf(x / sqrt 2)).
template <typename T>
void gelu_forward(const T* x, T* y, long size, bool tanh_form);
template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, long size, bool tanh_form);

// Gather on data viewed as (outer, axis, inner) with count indices, already checked to
// lie in [-axis, axis) (negative ones count from the end): y (outer, count, inner).
template <typename T>
void gather_forward(const T* data, const std::int64_t* indices, T* y, long outer, long axis,
                    long inner, long count);
// Its backward: dx (outer, axis, inner) is zeroed, then each row of dy is added where its
// index points (repeated indices add up).
template <typename T>
void gather_backward(const std::int64_t* indices, const T* dy, T* dx, long outer, long axis,
                     long inner, long count);

}  // namespace d5k
