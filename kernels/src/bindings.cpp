// The Python module d5_kernels._native: numpy arrays in, results written into numpy
// arrays the caller allocated. Every entry checks dtypes, contiguity and shapes (a
// mismatch is a ValueError) and releases the GIL around the native work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gemm.h"
#include "isa.h"
#include "ops.h"
#include "trace.h"
#include "transformer.h"

namespace py = pybind11;
using d5k::Window2d;

namespace {

std::string shape_of(const py::array& a) {
    std::string out = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) out += (i ? ", " : "") + std::to_string(a.shape(i));
    return out + (a.ndim() == 1 ? ",)" : ")");
}

[[noreturn]] void bad(const std::string& message) { throw std::invalid_argument(message); }

// Calls f(T{}) with T the element type of `ref` (float32 or float64).
template <typename F>
void dispatch(const py::array& ref, F&& f) {
    if (ref.dtype().is(py::dtype::of<float>())) return f(float{});
    if (ref.dtype().is(py::dtype::of<double>())) return f(double{});
    bad("arrays must be float32 or float64, got " + std::string(py::str(ref.dtype())));
}

template <typename T>
void check_dense(const py::array& a, const char* name, py::ssize_t ndim) {
    if (!a.dtype().is(py::dtype::of<T>()))
        bad(std::string(name) + " has dtype " + std::string(py::str(a.dtype())) +
            ", expected " + std::string(py::str(py::dtype::of<T>())));
    if (!(a.flags() & py::array::c_style)) bad(std::string(name) + " must be C-contiguous");
    if (ndim >= 0 && a.ndim() != ndim)
        bad(std::string(name) + " must have " + std::to_string(ndim) + " axes, got shape " +
            shape_of(a));
}

template <typename T>
const T* in(const py::array& a, const char* name, py::ssize_t ndim = -1) {
    check_dense<T>(a, name, ndim);
    return static_cast<const T*>(a.data());
}

template <typename T>
T* out(py::array& a, const char* name, py::ssize_t ndim = -1) {
    check_dense<T>(a, name, ndim);
    if (!a.writeable()) bad(std::string(name) + " must be writeable");
    return static_cast<T*>(a.mutable_data());
}

template <typename T>
const T* in_opt(const std::optional<py::array>& a, const char* name, py::ssize_t size) {
    if (!a) return nullptr;
    if (a->size() != size) bad(std::string(name) + " must hold " + std::to_string(size) + " values");
    return in<T>(*a, name);
}

template <typename T>
T* out_opt(std::optional<py::array>& a, const char* name, py::ssize_t size) {
    if (!a) return nullptr;
    if (a->size() != size) bad(std::string(name) + " must hold " + std::to_string(size) + " values");
    return out<T>(*a, name);
}

void same_shape(const py::array& a, const py::array& b, const char* what) {
    if (a.ndim() != b.ndim()) bad(std::string(what) + ": shapes " + shape_of(a) + " and " + shape_of(b) + " differ");
    for (py::ssize_t i = 0; i < a.ndim(); ++i)
        if (a.shape(i) != b.shape(i))
            bad(std::string(what) + ": shapes " + shape_of(a) + " and " + shape_of(b) + " differ");
}

// A strided view of a 2-D array (strides in elements; zero broadcasts).
template <typename T>
d5k::Matrix<T> matrix(const py::array& a, const char* name) {
    if (!a.dtype().is(py::dtype::of<T>())) bad(std::string(name) + " has the wrong dtype");
    if (a.ndim() != 2) bad(std::string(name) + " must be 2-D, got shape " + shape_of(a));
    if (a.strides(0) % static_cast<py::ssize_t>(sizeof(T)) || a.strides(1) % static_cast<py::ssize_t>(sizeof(T)))
        bad(std::string(name) + " has strides that are not whole elements");
    return {static_cast<const T*>(a.data()), a.strides(0) / static_cast<py::ssize_t>(sizeof(T)),
            a.strides(1) / static_cast<py::ssize_t>(sizeof(T))};
}

// y = alpha * a @ b + beta * c (c, broadcast to y's shape, may be y itself or absent).
void gemm(const py::array& a, const py::array& b, py::array& y, double alpha, double beta,
          const std::optional<py::array>& c) {
    dispatch(y, [&](auto tag) {
        using T = decltype(tag);
        const auto A = matrix<T>(a, "A"), B = matrix<T>(b, "B");
        T* Y = out<T>(y, "Y", 2);
        const long m = y.shape(0), n = y.shape(1), k = a.shape(1);
        if (a.shape(0) != m || b.shape(0) != k || b.shape(1) != n)
            bad("A " + shape_of(a) + " @ B " + shape_of(b) + " does not give Y " + shape_of(y));
        std::optional<d5k::Matrix<T>> C;
        if (c) {
            C = matrix<T>(*c, "C");
            if (c->shape(0) != m || c->shape(1) != n) bad("C must be broadcast to Y's shape");
        }
        py::gil_scoped_release release;
        T scale = static_cast<T>(beta);
        if (C && beta != 0.0) {
            for (long i = 0; i < m; ++i)
                for (long j = 0; j < n; ++j) Y[i * n + j] = C->data[i * C->rs + j * C->cs];
        } else if (!C) {
            scale = T(0);
        }
        if (alpha == 0.0 && k > 0) {
            // The reference computes alpha * (A @ B): zero times a NaN or infinite product
            // is NaN. The GEMM, as BLAS does, skips the product when alpha is 0, so the
            // product is made here and scaled (a degenerate case; its cost does not matter).
            std::vector<T> product(static_cast<std::size_t>(m * n));
            d5k::gemm<T>(m, n, k, T(1), A, B, T(0), product.data(), n);
            for (long i = 0; i < m * n; ++i)
                Y[i] = (scale == T(0) ? T(0) : scale * Y[i]) + T(0) * product[i];
        } else {
            d5k::gemm<T>(m, n, k, static_cast<T>(alpha), A, B, scale, Y, n);
        }
        if (C && beta == 0.0) {
            // beta * C with beta 0 is still NaN where C is NaN or infinite (numpy's
            // semantics, the reference's); the GEMM never reads C then, so add it here.
            for (long i = 0; i < m; ++i)
                for (long j = 0; j < n; ++j) Y[i * n + j] += T(0) * C->data[i * C->rs + j * C->cs];
        }
    });
}

// For each of the batch's matrices: y[i] = alpha * a[i] @ b[i] (batch strides may be 0).
void gemm_batched(const py::array& a, const py::array& b, py::array& y, double alpha) {
    dispatch(y, [&](auto tag) {
        using T = decltype(tag);
        T* Y = out<T>(y, "Y", 3);
        if (a.ndim() != 3 || b.ndim() != 3) bad("batched operands must be 3-D");
        if (!a.dtype().is(y.dtype()) || !b.dtype().is(y.dtype())) bad("operands must share Y's dtype");
        const long batch = y.shape(0), m = y.shape(1), n = y.shape(2), k = a.shape(2);
        if (a.shape(0) != batch || b.shape(0) != batch || a.shape(1) != m || b.shape(1) != k ||
            b.shape(2) != n)
            bad("A " + shape_of(a) + " @ B " + shape_of(b) + " does not give Y " + shape_of(y));
        const auto e = static_cast<py::ssize_t>(sizeof(T));
        for (const py::array* arr : {&a, &b})
            for (int i = 0; i < 3; ++i)
                if (arr->strides(i) % e) bad("operands have strides that are not whole elements");
        const T* ad = static_cast<const T*>(a.data());
        const T* bd = static_cast<const T*>(b.data());
        py::gil_scoped_release release;
        D5K_TRACE(gemm_batched);
        for (long i = 0; i < batch; ++i)
            d5k::gemm<T>(m, n, k, static_cast<T>(alpha),
                         {ad + i * (a.strides(0) / e), a.strides(1) / e, a.strides(2) / e},
                         {bd + i * (b.strides(0) / e), b.strides(1) / e, b.strides(2) / e}, T(0),
                         Y + i * m * n, n);
    });
}

Window2d window_of(long kh, long kw, long oh, long ow, const std::array<long, 8>& p) {
    for (int i = 0; i < 4; ++i)
        if (p[i] < 1) bad("strides and dilations must be positive");
    for (int i = 4; i < 8; ++i)
        if (p[i] < 0) bad("pads must not be negative");
    return {kh, kw, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], oh, ow};
}

void conv2d_forward(const py::array& x, const py::array& w, const std::optional<py::array>& b,
                    py::array& y, long group, const std::array<long, 8>& params) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X", 4);
        const T* W = in<T>(w, "W", 4);
        T* Y = out<T>(y, "Y", 4);
        const long n = x.shape(0), c = x.shape(1), m = w.shape(0);
        if (group < 1 || c % group || m % group || w.shape(1) * group != c)
            bad("W " + shape_of(w) + " does not fit X " + shape_of(x) + " in " + std::to_string(group) + " groups");
        if (y.shape(0) != n || y.shape(1) != m) bad("Y " + shape_of(y) + " does not fit X and W");
        const T* B = in_opt<T>(b, "B", m);
        const Window2d g = window_of(w.shape(2), w.shape(3), y.shape(2), y.shape(3), params);
        py::gil_scoped_release release;
        d5k::conv2d_forward<T>(X, W, B, Y, n, c, x.shape(2), x.shape(3), m, group, g);
    });
}

// The forward algorithm conv2d_forward would use, with the ISA in use, for X (N, C, H, W),
// M output channels, a kh x kw kernel and an oh x ow output.
std::string conv2d_forward_algorithm(const std::string& dtype, const std::array<long, 4>& x,
                                     long m, const std::array<long, 2>& kernel,
                                     const std::array<long, 2>& out, long group,
                                     const std::array<long, 8>& params) {
    if (dtype != "float32" && dtype != "float64") bad("dtype must be float32 or float64");
    if (group < 1 || x[1] % group || m % group)
        bad("C and M must be multiples of group (" + std::to_string(group) + ")");
    const Window2d g = window_of(kernel[0], kernel[1], out[0], out[1], params);
    return dtype == "float32" ? d5k::conv2d_forward_algorithm<float>(x[1], x[2], x[3], m, group, g)
                              : d5k::conv2d_forward_algorithm<double>(x[1], x[2], x[3], m, group, g);
}

void conv2d_backward(const py::array& x, const py::array& w, const py::array& dy,
                     std::optional<py::array> dx, py::array& dw, std::optional<py::array> db,
                     long group, const std::array<long, 8>& params) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X", 4);
        const T* W = in<T>(w, "W", 4);
        const T* DY = in<T>(dy, "dY", 4);
        T* DW = out<T>(dw, "dW", 4);
        same_shape(w, dw, "dW");
        const long n = x.shape(0), c = x.shape(1), m = w.shape(0);
        if (group < 1 || c % group || m % group || w.shape(1) * group != c)
            bad("W " + shape_of(w) + " does not fit X " + shape_of(x) + " in " + std::to_string(group) + " groups");
        if (dy.shape(0) != n || dy.shape(1) != m) bad("dY " + shape_of(dy) + " does not fit X and W");
        T* DX = nullptr;
        if (dx) {
            DX = out<T>(*dx, "dX", 4);
            same_shape(x, *dx, "dX");
        }
        T* DB = out_opt<T>(db, "dB", m);
        const Window2d g = window_of(w.shape(2), w.shape(3), dy.shape(2), dy.shape(3), params);
        py::gil_scoped_release release;
        d5k::conv2d_backward<T>(X, W, DY, DX, DW, DB, n, c, x.shape(2), x.shape(3), m, group, g);
    });
}

// Pools: params = (kh, kw, sh, sw, dh, dw, ph, pw, peh, pew).
Window2d pool_window(const py::array& x, const py::array& y, const std::array<long, 10>& p) {
    if (x.ndim() != 4 || y.ndim() != 4 || x.shape(0) != y.shape(0) || x.shape(1) != y.shape(1))
        bad("X " + shape_of(x) + " and Y " + shape_of(y) + " must be (N, C, H, W) alike");
    if (p[0] < 1 || p[1] < 1) bad("kernel_shape must be positive");
    std::array<long, 8> rest{};
    for (int i = 0; i < 8; ++i) rest[i] = p[i + 2];
    return window_of(p[0], p[1], y.shape(2), y.shape(3), rest);
}

void max_pool_forward(const py::array& x, py::array& y, std::optional<py::array> indices,
                      const std::array<long, 10>& params, int storage_order) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X", 4);
        T* Y = out<T>(y, "Y", 4);
        const Window2d g = pool_window(x, y, params);
        std::int64_t* I = nullptr;
        if (indices) {
            if (!indices->dtype().is(py::dtype::of<std::int64_t>()) ||
                !(indices->flags() & py::array::c_style) || indices->size() != y.size())
                bad("Indices must be a C-contiguous int64 array shaped like Y");
            I = static_cast<std::int64_t*>(indices->mutable_data());
        }
        py::gil_scoped_release release;
        D5K_TRACE(max_pool_forward);
        d5k::max_pool_forward<T>(X, Y, I, x.shape(0) * x.shape(1), x.shape(2), x.shape(3), g,
                                 storage_order);
    });
}

void max_pool_backward(const py::array& x, const py::array& dy, py::array& dx,
                       const std::array<long, 10>& params) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X", 4);
        const T* DY = in<T>(dy, "dY", 4);
        T* DX = out<T>(dx, "dX", 4);
        same_shape(x, dx, "dX");
        const Window2d g = pool_window(x, dy, params);
        py::gil_scoped_release release;
        D5K_TRACE(max_pool_backward);
        d5k::max_pool_backward<T>(X, DY, DX, x.shape(0) * x.shape(1), x.shape(2), x.shape(3), g);
    });
}

void avg_pool_forward(const py::array& x, py::array& y, const std::array<long, 10>& params,
                      bool count_include_pad) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X", 4);
        T* Y = out<T>(y, "Y", 4);
        const Window2d g = pool_window(x, y, params);
        py::gil_scoped_release release;
        D5K_TRACE(avg_pool_forward);
        d5k::avg_pool_forward<T>(X, Y, x.shape(0) * x.shape(1), x.shape(2), x.shape(3), g,
                                 count_include_pad);
    });
}

void avg_pool_backward(const py::array& dy, py::array& dx, const std::array<long, 10>& params,
                       bool count_include_pad) {
    dispatch(dy, [&](auto tag) {
        using T = decltype(tag);
        const T* DY = in<T>(dy, "dY", 4);
        T* DX = out<T>(dx, "dX", 4);
        const Window2d g = pool_window(dx, dy, params);
        py::gil_scoped_release release;
        D5K_TRACE(avg_pool_backward);
        d5k::avg_pool_backward<T>(DY, DX, dx.shape(0) * dx.shape(1), dx.shape(2), dx.shape(3), g,
                                  count_include_pad);
    });
}

void relu_forward(const py::array& x, py::array& y) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X");
        T* Y = out<T>(y, "Y");
        same_shape(x, y, "Y");
        py::gil_scoped_release release;
        D5K_TRACE(relu_forward);
        d5k::relu_forward<T>(X, Y, x.size());
    });
}

void relu_backward(const py::array& x, const py::array& dy, py::array& dx) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X");
        const T* DY = in<T>(dy, "dY");
        T* DX = out<T>(dx, "dX");
        same_shape(x, dy, "dY");
        same_shape(x, dx, "dX");
        py::gil_scoped_release release;
        D5K_TRACE(relu_backward);
        d5k::relu_backward<T>(X, DY, DX, x.size());
    });
}

void check_lines(const py::array& a, long outer, long axis, long inner) {
    if (outer < 0 || axis < 1 || inner < 0 || a.size() != outer * axis * inner)
        bad("(outer, axis, inner) does not cover an array of shape " + shape_of(a));
}

void softmax_forward(const py::array& x, py::array& y, long outer, long axis, long inner) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X");
        T* Y = out<T>(y, "Y");
        same_shape(x, y, "Y");
        check_lines(x, outer, axis, inner);
        py::gil_scoped_release release;
        D5K_TRACE(softmax_forward);
        d5k::softmax_forward<T>(X, Y, outer, axis, inner);
    });
}

void softmax_backward(const py::array& y, const py::array& dy, py::array& dx, long outer,
                      long axis, long inner) {
    dispatch(y, [&](auto tag) {
        using T = decltype(tag);
        const T* Y = in<T>(y, "Y");
        const T* DY = in<T>(dy, "dY");
        T* DX = out<T>(dx, "dX");
        same_shape(y, dy, "dY");
        same_shape(y, dx, "dX");
        check_lines(y, outer, axis, inner);
        py::gil_scoped_release release;
        D5K_TRACE(softmax_backward);
        d5k::softmax_backward<T>(Y, DY, DX, outer, axis, inner);
    });
}

// X viewed as (N, C, S): the sizes, checked against the per-channel arrays.
std::array<long, 3> ncs(const py::array& x) {
    if (x.ndim() < 2) bad("X must have rank 2 or more, got shape " + shape_of(x));
    long s = 1;
    for (py::ssize_t i = 2; i < x.ndim(); ++i) s *= x.shape(i);
    return {static_cast<long>(x.shape(0)), static_cast<long>(x.shape(1)), s};
}

void batch_norm_forward(const py::array& x, const py::array& scale, const py::array& bias,
                        const py::array& mean, const py::array& var, py::array& y,
                        std::optional<py::array> running_mean,
                        std::optional<py::array> running_var, double epsilon, double momentum,
                        bool training) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const auto [n, c, s] = ncs(x);
        const T* X = in<T>(x, "X");
        T* Y = out<T>(y, "Y");
        same_shape(x, y, "Y");
        const T* S = in_opt<T>(scale, "scale", c);
        const T* B = in_opt<T>(bias, "B", c);
        const T* M = in_opt<T>(mean, "input_mean", c);
        const T* V = in_opt<T>(var, "input_var", c);
        T* RM = out_opt<T>(running_mean, "running_mean", c);
        T* RV = out_opt<T>(running_var, "running_var", c);
        if (training && (RM == nullptr || RV == nullptr)) bad("training needs the running statistics' outputs");
        py::gil_scoped_release release;
        D5K_TRACE(batch_norm_forward);
        d5k::batch_norm_forward<T>(X, S, B, M, V, Y, RM, RV, n, c, s, epsilon, momentum, training);
    });
}

void batch_norm_backward(const py::array& x, const py::array& scale, const py::array& mean,
                         const py::array& var, const py::array& dy,
                         const std::optional<py::array>& d_rm,
                         const std::optional<py::array>& d_rv, py::array& dx, py::array& dscale,
                         py::array& dbias, py::array& dmean, py::array& dvar, double epsilon,
                         double momentum, bool training) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const auto [n, c, s] = ncs(x);
        const T* X = in<T>(x, "X");
        const T* DY = in<T>(dy, "dY");
        same_shape(x, dy, "dY");
        T* DX = out<T>(dx, "dX");
        same_shape(x, dx, "dX");
        const T* S = in_opt<T>(scale, "scale", c);
        const T* M = in_opt<T>(mean, "input_mean", c);
        const T* V = in_opt<T>(var, "input_var", c);
        const T* RM = in_opt<T>(d_rm, "d_running_mean", c);
        const T* RV = in_opt<T>(d_rv, "d_running_var", c);
        std::optional<py::array> outs[4] = {dscale, dbias, dmean, dvar};
        T* DS = out_opt<T>(outs[0], "dscale", c);
        T* DB = out_opt<T>(outs[1], "dB", c);
        T* DM = out_opt<T>(outs[2], "dmean", c);
        T* DV = out_opt<T>(outs[3], "dvar", c);
        py::gil_scoped_release release;
        D5K_TRACE(batch_norm_backward);
        d5k::batch_norm_backward<T>(X, S, M, V, DY, RM, RV, DX, DS, DB, DM, DV, n, c, s, epsilon,
                                    momentum, training);
    });
}

// -- transformer operators (LayerNormalization, Erf, Gelu, Gather) --

void check_size(const py::array& a, const char* name, long size) {
    if (a.size() != size)
        bad(std::string(name) + " must hold " + std::to_string(size) + " values, got shape " +
            shape_of(a));
}

void layer_norm_forward(const py::array& x, const py::array& scale,
                        const std::optional<py::array>& bias, py::array& y, py::array& mean,
                        py::array& inv_std, long rows, long width, double epsilon) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        if (rows < 0 || width < 1 || x.size() != rows * width)
            bad("(rows, width) does not cover X of shape " + shape_of(x));
        const T* X = in<T>(x, "X");
        const T* S = in<T>(scale, "Scale");
        check_size(scale, "Scale", width);
        const T* B = in_opt<T>(bias, "B", width);
        T* Y = out<T>(y, "Y");
        same_shape(x, y, "Y");
        T* M = out<T>(mean, "Mean");
        check_size(mean, "Mean", rows);
        T* I = out<T>(inv_std, "InvStdDev");
        check_size(inv_std, "InvStdDev", rows);
        py::gil_scoped_release release;
        D5K_TRACE(layer_norm_forward);
        d5k::layer_norm_forward<T>(X, S, B, Y, M, I, rows, width, epsilon);
    });
}

void layer_norm_backward(const py::array& x, const py::array& scale, const py::array& mean,
                         const py::array& inv_std, const py::array& dy,
                         const std::optional<py::array>& dmean,
                         const std::optional<py::array>& dinv_std, py::array& dx,
                         py::array& dscale, std::optional<py::array> dbias, long rows,
                         long width) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        if (rows < 0 || width < 1 || x.size() != rows * width)
            bad("(rows, width) does not cover X of shape " + shape_of(x));
        const T* X = in<T>(x, "X");
        const T* S = in<T>(scale, "Scale");
        check_size(scale, "Scale", width);
        const T* M = in<T>(mean, "Mean");
        check_size(mean, "Mean", rows);
        const T* I = in<T>(inv_std, "InvStdDev");
        check_size(inv_std, "InvStdDev", rows);
        const T* DY = in<T>(dy, "dY");
        same_shape(x, dy, "dY");
        const T* DM = in_opt<T>(dmean, "dMean", rows);
        const T* DI = in_opt<T>(dinv_std, "dInvStdDev", rows);
        T* DX = out<T>(dx, "dX");
        same_shape(x, dx, "dX");
        T* DS = out<T>(dscale, "dScale");
        check_size(dscale, "dScale", width);
        T* DB = out_opt<T>(dbias, "dB", width);
        py::gil_scoped_release release;
        D5K_TRACE(layer_norm_backward);
        d5k::layer_norm_backward<T>(X, S, M, I, DY, DM, DI, DX, DS, DB, rows, width);
    });
}

void erf_forward(const py::array& x, py::array& y) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X");
        T* Y = out<T>(y, "Y");
        same_shape(x, y, "Y");
        py::gil_scoped_release release;
        D5K_TRACE(erf_forward);
        d5k::erf_forward<T>(X, Y, x.size());
    });
}

void erf_backward(const py::array& x, const py::array& dy, py::array& dx) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X");
        const T* DY = in<T>(dy, "dY");
        T* DX = out<T>(dx, "dX");
        same_shape(x, dy, "dY");
        same_shape(x, dx, "dX");
        py::gil_scoped_release release;
        D5K_TRACE(erf_backward);
        d5k::erf_backward<T>(X, DY, DX, x.size());
    });
}

void gelu_forward(const py::array& x, py::array& y, bool tanh_form) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X");
        T* Y = out<T>(y, "Y");
        same_shape(x, y, "Y");
        py::gil_scoped_release release;
        D5K_TRACE(gelu_forward);
        d5k::gelu_forward<T>(X, Y, x.size(), tanh_form);
    });
}

void gelu_backward(const py::array& x, const py::array& dy, py::array& dx, bool tanh_form) {
    dispatch(x, [&](auto tag) {
        using T = decltype(tag);
        const T* X = in<T>(x, "X");
        const T* DY = in<T>(dy, "dY");
        T* DX = out<T>(dx, "dX");
        same_shape(x, dy, "dY");
        same_shape(x, dx, "dX");
        py::gil_scoped_release release;
        D5K_TRACE(gelu_backward);
        d5k::gelu_backward<T>(X, DY, DX, x.size(), tanh_form);
    });
}

// Gather's indices: C-contiguous int64, each in [-axis, axis).
const std::int64_t* gather_indices(const py::array& indices, long axis) {
    if (!indices.dtype().is(py::dtype::of<std::int64_t>()) ||
        !(indices.flags() & py::array::c_style))
        bad("indices must be a C-contiguous int64 array");
    const auto* I = static_cast<const std::int64_t*>(indices.data());
    for (py::ssize_t j = 0; j < indices.size(); ++j)
        if (I[j] < -axis || I[j] >= axis)
            bad("indices hold " + std::to_string(I[j]) + ", out of range [" +
                std::to_string(-axis) + ", " + std::to_string(axis - 1) + "] for an axis of size " +
                std::to_string(axis));
    return I;
}

void gather_forward(const py::array& data, const py::array& indices, py::array& y, long outer,
                    long axis, long inner) {
    dispatch(data, [&](auto tag) {
        using T = decltype(tag);
        const T* D = in<T>(data, "data");
        T* Y = out<T>(y, "Y");
        const long count = indices.size();
        if (outer < 0 || axis < 0 || inner < 0 || data.size() != outer * axis * inner)
            bad("(outer, axis, inner) does not cover data of shape " + shape_of(data));
        check_size(y, "Y", outer * count * inner);
        const std::int64_t* I = gather_indices(indices, axis);
        py::gil_scoped_release release;
        D5K_TRACE(gather_forward);
        d5k::gather_forward<T>(D, I, Y, outer, axis, inner, count);
    });
}

void gather_backward(const py::array& indices, const py::array& dy, py::array& dx, long outer,
                     long axis, long inner) {
    dispatch(dy, [&](auto tag) {
        using T = decltype(tag);
        const T* DY = in<T>(dy, "dY");
        T* DX = out<T>(dx, "dX");
        const long count = indices.size();
        if (outer < 0 || axis < 0 || inner < 0 || dx.size() != outer * axis * inner)
            bad("(outer, axis, inner) does not cover dX of shape " + shape_of(dx));
        check_size(dy, "dY", outer * count * inner);
        const std::int64_t* I = gather_indices(indices, axis);
        py::gil_scoped_release release;
        D5K_TRACE(gather_backward);
        d5k::gather_backward<T>(I, DY, DX, outer, axis, inner, count);
    });
}

py::dict blocking(const std::string& isa_name, const std::string& dtype) {
    d5k::Isa isa = d5k::Isa::generic;
    if (isa_name == "avx512") isa = d5k::Isa::avx512;
    else if (isa_name == "avx2") isa = d5k::Isa::avx2;
    else if (isa_name != "generic") bad("unknown ISA '" + isa_name + "'");
    if (dtype != "float32" && dtype != "float64") bad("dtype must be float32 or float64");
    const d5k::Blocking b = d5k::gemm_blocking(isa, dtype == "float32" ? 4 : 8);
    py::dict out;
    out["mr"] = b.mr;
    out["nr"] = b.nr;
    out["kc"] = b.kc;
    out["mc"] = b.mc;
    out["nc"] = b.nc;
    return out;
}

double peak_gflops(const std::string& isa_name, const std::string& dtype, double seconds) {
    d5k::Isa isa = d5k::Isa::generic;
    if (isa_name == "avx512") isa = d5k::Isa::avx512;
    else if (isa_name == "avx2") isa = d5k::Isa::avx2;
    else if (isa_name != "generic") bad("unknown ISA '" + isa_name + "'");
    if (!d5k::isa_supported(isa)) bad("ISA '" + isa_name + "' is not supported by this CPU");
    py::gil_scoped_release release;
    return d5k::peak_gflops(isa, dtype == "float64" ? 8 : 4, seconds);
}

// Start the kernels' tracer (see trace.h), forgetting what an earlier trace left.
void trace_start() {
    py::gil_scoped_release release;
    d5k::trace::start();
}

// Stop the tracer: ([(name, tid, begin_ns, end_ns), ...] in order of begin, dropped).
py::tuple trace_stop() {
    std::uint64_t dropped = 0;
    std::vector<d5k::trace::Event> events;
    {
        py::gil_scoped_release release;
        events = d5k::trace::stop(dropped);
        std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
            return a.begin_ns < b.begin_ns || (a.begin_ns == b.begin_ns && a.end_ns > b.end_ns);
        });
    }
    std::vector<py::str> names;  // one Python string per name, shared by its events
    for (int i = 0; i < static_cast<int>(d5k::trace::Name::count_); ++i)
        names.emplace_back(d5k::trace::name_text(static_cast<d5k::trace::Name>(i)));
    py::list out(events.size());
    for (std::size_t i = 0; i < events.size(); ++i) {
        const auto& e = events[i];
        out[i] = py::make_tuple(names[static_cast<std::size_t>(e.name)], e.tid, e.begin_ns,
                                e.end_ns);
    }
    return py::make_tuple(std::move(out), dropped);
}

std::string compiler() {
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#else
    return "unknown";
#endif
}

}  // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "d5-kernels' compiled kernels: a packed GEMM and operator kernels.";
    d5k::current_isa();  // a bad D5_NATIVE_ISA fails the import, not a later call
    m.def("isa", [] { return std::string(d5k::isa_name(d5k::current_isa())); });
    m.def("available_isas", &d5k::available_isas);
    m.def("set_isa", &d5k::set_isa, py::arg("name"));
    m.def("num_threads", &d5k::max_threads);
    m.def("set_num_threads", &d5k::set_max_threads, py::arg("n"));
    m.def("openmp_version", [] { return static_cast<long>(_OPENMP); });
    m.def("compiler", &compiler);
    m.def("trace_start", &trace_start);
    m.def("trace_stop", &trace_stop);
    m.def("trace_active", [] { return d5k::trace::on(); });
    m.def("trace_now_ns", &d5k::trace::now_ns);
    m.def("trace_capacity", [] { return d5k::trace::kCapacity; });
    m.def("blocking", &blocking, py::arg("isa"), py::arg("dtype"));
    m.def("peak_gflops", &peak_gflops, py::arg("isa"), py::arg("dtype"), py::arg("seconds"));
    m.def("gemm", &gemm, py::arg("a"), py::arg("b"), py::arg("y"), py::arg("alpha"),
          py::arg("beta"), py::arg("c") = py::none());
    m.def("gemm_batched", &gemm_batched, py::arg("a"), py::arg("b"), py::arg("y"),
          py::arg("alpha"));
    m.def("conv2d_forward", &conv2d_forward);
    m.def("conv2d_backward", &conv2d_backward);
    m.def("conv2d_forward_algorithm", &conv2d_forward_algorithm, py::arg("dtype"), py::arg("x"),
          py::arg("m"), py::arg("kernel"), py::arg("out"), py::arg("group"), py::arg("params"));
    m.def("max_pool_forward", &max_pool_forward);
    m.def("max_pool_backward", &max_pool_backward);
    m.def("avg_pool_forward", &avg_pool_forward);
    m.def("avg_pool_backward", &avg_pool_backward);
    m.def("relu_forward", &relu_forward);
    m.def("relu_backward", &relu_backward);
    m.def("softmax_forward", &softmax_forward);
    m.def("softmax_backward", &softmax_backward);
    m.def("batch_norm_forward", &batch_norm_forward);
    m.def("batch_norm_backward", &batch_norm_backward);
    m.def("layer_norm_forward", &layer_norm_forward);
    m.def("layer_norm_backward", &layer_norm_backward);
    m.def("erf_forward", &erf_forward);
    m.def("erf_backward", &erf_backward);
    m.def("gelu_forward", &gelu_forward);
    m.def("gelu_backward", &gelu_backward);
    m.def("gather_forward", &gather_forward);
    m.def("gather_backward", &gather_backward);
}
