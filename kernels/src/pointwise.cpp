// Relu, Softmax and BatchNormalization: loops the compiler vectorizes, in parallel over
// elements, lines or channels. Sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops.h"

namespace d5k {

// NaN propagates, as in numpy's maximum(x, 0): the test is written so that it is false
// for NaN, which then passes through (a vectorized max(x, 0) would give 0).
template <typename T>
void relu_forward(const T* x, T* y, long size) {
#pragma omp parallel for simd schedule(static) if (size > 262144)
    for (long i = 0; i < size; ++i) y[i] = x[i] <= T(0) ? T(0) : x[i];
}

template <typename T>
void relu_backward(const T* x, const T* dy, T* dx, long size) {
#pragma omp parallel for simd schedule(static) if (size > 262144)
    for (long i = 0; i < size; ++i) dx[i] = x[i] > T(0) ? dy[i] : T(0);
}

template <typename T>
void softmax_forward(const T* x, T* y, long outer, long axis, long inner) {
#pragma omp parallel for schedule(static) if (outer * axis * inner > 65536)
    for (long o = 0; o < outer; ++o) {
        const T* xs = x + o * axis * inner;
        T* ys = y + o * axis * inner;
        std::vector<T> top(static_cast<std::size_t>(inner), -INFINITY);
        std::vector<double> total(static_cast<std::size_t>(inner), 0.0);
        for (long a = 0; a < axis; ++a)
            for (long i = 0; i < inner; ++i) top[i] = std::max(top[i], xs[a * inner + i]);
        for (long a = 0; a < axis; ++a)
            for (long i = 0; i < inner; ++i) {
                const T e = std::exp(xs[a * inner + i] - top[i]);
                ys[a * inner + i] = e;
                total[i] += e;
            }
        for (long a = 0; a < axis; ++a)
            for (long i = 0; i < inner; ++i)
                ys[a * inner + i] = static_cast<T>(ys[a * inner + i] / total[i]);
    }
}

template <typename T>
void softmax_backward(const T* y, const T* dy, T* dx, long outer, long axis, long inner) {
#pragma omp parallel for schedule(static) if (outer * axis * inner > 65536)
    for (long o = 0; o < outer; ++o) {
        const long base = o * axis * inner;
        std::vector<double> dot(static_cast<std::size_t>(inner), 0.0);
        for (long a = 0; a < axis; ++a)
            for (long i = 0; i < inner; ++i)
                dot[i] += static_cast<double>(dy[base + a * inner + i]) * y[base + a * inner + i];
        for (long a = 0; a < axis; ++a)
            for (long i = 0; i < inner; ++i) {
                const long at = base + a * inner + i;
                dx[at] = static_cast<T>(y[at] * (dy[at] - dot[i]));
            }
    }
}

namespace {

// Mean and biased variance of channel ci of X (N, C, S), two passes.
template <typename T>
void channel_moments(const T* x, long n, long c, long s, long ci, double& mean, double& var) {
    double sum = 0.0;
    for (long ni = 0; ni < n; ++ni) {
        const T* row = x + (ni * c + ci) * s;
        for (long si = 0; si < s; ++si) sum += row[si];
    }
    const double count = static_cast<double>(n * s);
    mean = sum / count;
    double sq = 0.0;
    for (long ni = 0; ni < n; ++ni) {
        const T* row = x + (ni * c + ci) * s;
        for (long si = 0; si < s; ++si) {
            const double d = row[si] - mean;
            sq += d * d;
        }
    }
    var = sq / count;
}

}  // namespace

template <typename T>
void batch_norm_forward(const T* x, const T* scale, const T* bias, const T* mean, const T* var,
                        T* y, T* running_mean, T* running_var, long n, long c, long s,
                        double epsilon, double momentum, bool training) {
#pragma omp parallel for schedule(static) if (n * c * s > 65536)
    for (long ci = 0; ci < c; ++ci) {
        double mu = mean[ci], sigma2 = var[ci];
        if (training) {
            channel_moments(x, n, c, s, ci, mu, sigma2);
            running_mean[ci] = static_cast<T>(momentum * mean[ci] + (1.0 - momentum) * mu);
            running_var[ci] = static_cast<T>(momentum * var[ci] + (1.0 - momentum) * sigma2);
        }
        const double inv = 1.0 / std::sqrt(sigma2 + epsilon);
        const T a = static_cast<T>(scale[ci] * inv), m = static_cast<T>(mu), b = bias[ci];
        for (long ni = 0; ni < n; ++ni) {
            const T* xs = x + (ni * c + ci) * s;
            T* ys = y + (ni * c + ci) * s;
            for (long si = 0; si < s; ++si) ys[si] = a * (xs[si] - m) + b;
        }
    }
}

template <typename T>
void batch_norm_backward(const T* x, const T* scale, const T* mean, const T* var, const T* dy,
                         const T* d_rm, const T* d_rv, T* dx, T* dscale, T* dbias, T* dmean,
                         T* dvar, long n, long c, long s, double epsilon, double momentum,
                         bool training) {
#pragma omp parallel for schedule(static) if (n * c * s > 65536)
    for (long ci = 0; ci < c; ++ci) {
        double mu = mean[ci], sigma2 = var[ci];
        if (training) channel_moments(x, n, c, s, ci, mu, sigma2);
        const double inv = 1.0 / std::sqrt(sigma2 + epsilon);
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (long ni = 0; ni < n; ++ni) {
            const T* xs = x + (ni * c + ci) * s;
            const T* dys = dy + (ni * c + ci) * s;
            for (long si = 0; si < s; ++si) {
                sum_dy += dys[si];
                sum_dy_xhat += dys[si] * ((xs[si] - mu) * inv);
            }
        }
        const double g = scale[ci];
        dscale[ci] = static_cast<T>(sum_dy_xhat);
        dbias[ci] = static_cast<T>(sum_dy);
        if (!training) {
            const T a = static_cast<T>(g * inv);
            for (long ni = 0; ni < n; ++ni) {
                const T* dys = dy + (ni * c + ci) * s;
                T* dxs = dx + (ni * c + ci) * s;
                for (long si = 0; si < s; ++si) dxs[si] = a * dys[si];
            }
            dmean[ci] = static_cast<T>(-sum_dy * g * inv);
            dvar[ci] = static_cast<T>(-0.5 * sum_dy_xhat * g * inv * inv);
            continue;
        }
        // dx = inv/count * (count*dxhat - sum(dxhat) - xhat*sum(dxhat*xhat)) with
        // dxhat = dy * scale, plus what the running statistics' cotangents send back.
        const double count = static_cast<double>(n * s);
        const double rm = d_rm != nullptr ? d_rm[ci] : 0.0, rv = d_rv != nullptr ? d_rv[ci] : 0.0;
        const double k1 = g * inv, k0 = inv / count * g * sum_dy;
        const double k2 = inv / count * g * sum_dy_xhat;
        const double shift = (1.0 - momentum) * rm / count;
        const double slope = (1.0 - momentum) * rv * 2.0 / count;
        for (long ni = 0; ni < n; ++ni) {
            const T* xs = x + (ni * c + ci) * s;
            const T* dys = dy + (ni * c + ci) * s;
            T* dxs = dx + (ni * c + ci) * s;
            for (long si = 0; si < s; ++si) {
                const double centered = xs[si] - mu;
                const double xhat = centered * inv;
                dxs[si] = static_cast<T>(k1 * dys[si] - k0 - xhat * k2 + shift + slope * centered);
            }
        }
        dmean[ci] = static_cast<T>(momentum * rm);
        dvar[ci] = static_cast<T>(momentum * rv);
    }
}

#define D5K_POINTWISE(T)                                                                       \
    template void relu_forward<T>(const T*, T*, long);                                          \
    template void relu_backward<T>(const T*, const T*, T*, long);                               \
    template void softmax_forward<T>(const T*, T*, long, long, long);                           \
    template void softmax_backward<T>(const T*, const T*, T*, long, long, long);                \
    template void batch_norm_forward<T>(const T*, const T*, const T*, const T*, const T*, T*,   \
                                        T*, T*, long, long, long, double, double, bool);        \
    template void batch_norm_backward<T>(const T*, const T*, const T*, const T*, const T*,      \
                                         const T*, const T*, T*, T*, T*, T*, T*, long, long,    \
                                         long, double, double, bool);
D5K_POINTWISE(float)
D5K_POINTWISE(double)

}  // namespace d5k
