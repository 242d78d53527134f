// LayerNormalization, Erf, Gelu and Gather: loops the compiler vectorizes, in parallel
// over rows, elements or (outer, column block) tiles. Row statistics accumulate in double.
#include "transformer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace d5k {

namespace {

// Work below this many elements runs on one thread (a parallel region costs more).
constexpr long kParallelMin = 65536;

// The module is compiled for baseline x86-64; the row loops are also compiled for
// x86-64-v3 (AVX2, FMA) and v4 (AVX-512), the best the CPU runs picked at load time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define D5K_ROW_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define D5K_ROW_CLONES
#endif

// One row of LayerNormalization: its mean and biased variance in two sweeps over the
// row, which stays in cache (the sum, then the squares of the centered values, so no
// cancellation for rows far from 0), then the scaled and shifted row.
template <typename T>
inline __attribute__((always_inline)) void norm_row(const T* xr, const T* scale, const T* bias,
                                                    T* yr, T* mean, T* inv_std, long width,
                                                    double epsilon) {
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (long j = 0; j < width; ++j) sum += xr[j];
    const double mu = sum / static_cast<double>(width);
    double sq = 0.0;
#pragma omp simd reduction(+ : sq)
    for (long j = 0; j < width; ++j) {
        const double d = xr[j] - mu;
        sq += d * d;
    }
    // The statistics are rounded to T first, as the outputs hold them.
    const T m = static_cast<T>(mu);
    const T s = static_cast<T>(1.0 / std::sqrt(sq / static_cast<double>(width) + epsilon));
    *mean = m;
    *inv_std = s;
    if (bias != nullptr) {
#pragma omp simd
        for (long j = 0; j < width; ++j) yr[j] = (xr[j] - m) * s * scale[j] + bias[j];
    } else {
#pragma omp simd
        for (long j = 0; j < width; ++j) yr[j] = (xr[j] - m) * s * scale[j];
    }
}

// One row of the backward: dx of the row, and the row's terms of dScale and dB added to
// the partial sums ps and pb.
template <typename T>
inline __attribute__((always_inline)) void norm_row_backward(const T* xr, const T* dyr,
                                                             const T* scale, double mu,
                                                             double inv, double dm, double di,
                                                             T* dxr, double* ps, double* pb,
                                                             long width) {
    // sum(g) and sum(g * xhat) with g = dy * scale, xhat = (x - mean) * inv.
    double sum_g = 0.0, sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (long j = 0; j < width; ++j) {
        const double g = static_cast<double>(dyr[j]) * scale[j];
        const double xhat = (xr[j] - mu) * inv;
        sum_g += g;
        sum_gx += g * xhat;
        ps[j] += static_cast<double>(dyr[j]) * xhat;
        pb[j] += dyr[j];
    }
    // dx = inv * (g - mean(g) - xhat * mean(g * xhat)) + dMean / width
    //      - dInvStdDev * inv^3 * (x - mean) / width, as inv * g + b + c * (x - mean).
    const double count = static_cast<double>(width);
    const double b = (dm - inv * sum_g) / count;
    const double c = -(inv * inv * sum_gx + di * inv * inv * inv) / count;
#pragma omp simd
    for (long j = 0; j < width; ++j)
        dxr[j] = static_cast<T>(inv * (static_cast<double>(dyr[j]) * scale[j]) + b +
                                c * (xr[j] - mu));
}

#define D5K_ROWS(T)                                                                            \
    D5K_ROW_CLONES void norm_rows(const T* x, const T* scale, const T* bias, T* y, T* mean,     \
                                  T* inv_std, long first, long last, long width,               \
                                  double epsilon) {                                            \
        for (long r = first; r < last; ++r)                                                    \
            norm_row<T>(x + r * width, scale, bias, y + r * width, mean + r, inv_std + r,     \
                        width, epsilon);                                                       \
    }                                                                                          \
    D5K_ROW_CLONES void norm_rows_backward(const T* x, const T* dy, const T* scale,            \
                                           const T* mean, const T* inv_std, const T* dmean,    \
                                           const T* dinv_std, T* dx, double* ps, double* pb,   \
                                           long first, long last, long width) {                \
        for (long r = first; r < last; ++r)                                                    \
            norm_row_backward<T>(x + r * width, dy + r * width, scale, mean[r], inv_std[r],   \
                                 dmean != nullptr ? dmean[r] : 0.0,                            \
                                 dinv_std != nullptr ? dinv_std[r] : 0.0, dx + r * width, ps,  \
                                 pb, width);                                                   \
    }
D5K_ROWS(float)
D5K_ROWS(double)

// The rows [first, last) of thread `thread` of `threads` in a static split of `rows`.
void split(long rows, int thread, int threads, long& first, long& last) {
    const long per = rows / threads, extra = rows % threads;
    first = thread * per + std::min<long>(thread, extra);
    last = first + per + (thread < extra ? 1 : 0);
}

}  // namespace

template <typename T>
void layer_norm_forward(const T* x, const T* scale, const T* bias, T* y, T* mean, T* inv_std,
                        long rows, long width, double epsilon) {
    const int teams = rows * width > kParallelMin ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(teams)
    {
        long first = 0, last = 0;
        split(rows, omp_get_thread_num(), omp_get_num_threads(), first, last);
        norm_rows(x, scale, bias, y, mean, inv_std, first, last, width, epsilon);
    }
}

template <typename T>
void layer_norm_backward(const T* x, const T* scale, const T* mean, const T* inv_std,
                         const T* dy, const T* dmean, const T* dinv_std, T* dx, T* dscale,
                         T* dbias, long rows, long width) {
    // Per-thread partial sums of dscale and dbias over the thread's rows, added up in
    // thread order afterwards: the result does not depend on the scheduling.
    const int teams = rows * width > kParallelMin ? omp_get_max_threads() : 1;
    std::vector<double> partial(static_cast<std::size_t>(teams) * 2 * width, 0.0);
    int used = 1;
#pragma omp parallel num_threads(teams)
    {
        const int t = omp_get_thread_num();
#pragma omp single
        used = omp_get_num_threads();
        double* ps = partial.data() + static_cast<std::size_t>(t) * 2 * width;
        long first = 0, last = 0;
        split(rows, t, omp_get_num_threads(), first, last);
        norm_rows_backward(x, dy, scale, mean, inv_std, dmean, dinv_std, dx, ps, ps + width,
                           first, last, width);
    }
    for (long j = 0; j < width; ++j) {
        double s = 0.0, b = 0.0;
        for (int t = 0; t < used; ++t) {
            s += partial[static_cast<std::size_t>(t) * 2 * width + j];
            b += partial[static_cast<std::size_t>(t) * 2 * width + width + j];
        }
        dscale[j] = static_cast<T>(s);
        if (dbias != nullptr) dbias[j] = static_cast<T>(b);
    }
}

namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;        // 1 / sqrt(2)
constexpr double kInvSqrtTwoPi = 0.39894228040143267794;    // 1 / sqrt(2 pi)
constexpr double kTwoOverSqrtPi = 1.12837916709551257390;   // 2 / sqrt(pi)
constexpr double kSqrtTwoOverPi = 0.79788456080286535588;   // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

// The functions of float64 loops: the C library's, exact to an ulp or so, not vectorized.
struct LibmMath {
    static double erf(double x) { return std::erf(x); }
    static double tanh(double x) { return std::tanh(x); }
    static double exp(double x) { return std::exp(x); }
};

// The functions of float32 loops: branch-free rational and polynomial approximations the
// compiler vectorizes (the C library's are calls, one element at a time). erf and tanh
// are the minimax rational forms Eigen and XLA use (a few ulp; beyond +-7.9 for tanh
// and +-4 for erf they are +-1, as in float32); exp is Cephes' expf (2 ulp) on the
// non-positive arguments the derivatives need (clamped to -87: ~1e-38 below).
// NaN passes through each.
struct FastFloat {
    static float clamp(float x, float lo, float hi) {
        const float low = x > lo ? x : lo;
        return low < hi ? low : hi;
    }
    static float erf(float x) {
        const float c = clamp(x, -4.0f, 4.0f), x2 = c * c;
        float p = -2.72614225801306e-10f;
        p = p * x2 + 2.77068142495902e-08f;
        p = p * x2 + -2.10102402082508e-06f;
        p = p * x2 + -5.69250639462346e-05f;
        p = p * x2 + -7.34990630326855e-04f;
        p = p * x2 + -2.95459980854025e-03f;
        p = p * x2 + -1.60960333262415e-02f;
        float q = -1.45660718464996e-05f;
        q = q * x2 + -2.13374055278905e-04f;
        q = q * x2 + -1.68282697438203e-03f;
        q = q * x2 + -7.37332916720468e-03f;
        q = q * x2 + -1.42647390514189e-02f;
        const float y = std::fabs(x) >= 4.0f ? (x > 0.0f ? 1.0f : -1.0f) : c * p / q;
        return x != x ? x : y;
    }
    static float tanh(float x) {
        const float c = clamp(x, -7.90531110763549805f, 7.90531110763549805f), x2 = c * c;
        float p = -2.76076847742355e-16f;
        p = p * x2 + 2.00018790482477e-13f;
        p = p * x2 + -8.60467152213735e-11f;
        p = p * x2 + 5.12229709037114e-08f;
        p = p * x2 + 1.48572235717979e-05f;
        p = p * x2 + 6.37261928875436e-04f;
        p = p * x2 + 4.89352455891786e-03f;
        float q = 1.19825839466702e-06f;
        q = q * x2 + 1.18534705686654e-04f;
        q = q * x2 + 2.26843463243900e-03f;
        q = q * x2 + 4.89352518554385e-03f;
        const float y = std::fabs(x) >= 7.90531110763549805f ? (x > 0.0f ? 1.0f : -1.0f)
                                                              : c * p / q;
        return (x != x || std::fabs(x) < 0.0004f) ? x : y;
    }
    // exp(x) for x <= 0.
    static float exp(float x) {
        const float c = clamp(x, -87.0f, 0.0f);
        // n = round(c / ln 2) by the 1.5 * 2^23 trick; r = c - n ln 2 in two parts.
        const float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
        const float r = (c - n * 0.693359375f) - n * -2.12194440e-4f;
        float p = 1.9875691500e-4f;
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        const float e = p * r * r + r + 1.0f;
        const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
        float scale;
        std::memcpy(&scale, &bits, sizeof scale);
        return x != x ? x : e * scale;
    }
};

template <typename M> struct MathOf;
template <> struct MathOf<float> { using type = FastFloat; };
template <> struct MathOf<double> { using type = LibmMath; };

// The element-wise loops over [first, last); kind: 0 Erf, 1 exact Gelu, 2 tanh Gelu.
template <typename T>
inline __attribute__((always_inline)) void unary_forward(const T* x, T* y, long first, long last,
                                                         int kind) {
    using M = typename MathOf<T>::type;
    const T half = T(0.5), one = T(1);
    const T r = static_cast<T>(kSqrtHalf);
    const T k = static_cast<T>(kSqrtTwoOverPi), c = static_cast<T>(kGeluCubic);
    if (kind == 0) {
#pragma omp simd
        for (long i = first; i < last; ++i) y[i] = M::erf(x[i]);
    } else if (kind == 1) {
#pragma omp simd
        for (long i = first; i < last; ++i) y[i] = half * x[i] * (one + M::erf(x[i] * r));
    } else {
#pragma omp simd
        for (long i = first; i < last; ++i) {
            const T v = x[i];
            y[i] = half * v * (one + M::tanh(k * (v + c * v * v * v)));
        }
    }
}

template <typename T>
inline __attribute__((always_inline)) void unary_backward(const T* x, const T* dy, T* dx,
                                                          long first, long last, int kind) {
    using M = typename MathOf<T>::type;
    const T half = T(0.5), one = T(1);
    const T r = static_cast<T>(kSqrtHalf), p = static_cast<T>(kInvSqrtTwoPi);
    const T k = static_cast<T>(kSqrtTwoOverPi), c = static_cast<T>(kGeluCubic);
    const T c3 = static_cast<T>(3 * kGeluCubic), two = static_cast<T>(kTwoOverSqrtPi);
    if (kind == 0) {
#pragma omp simd
        for (long i = first; i < last; ++i) dx[i] = dy[i] * two * M::exp(-x[i] * x[i]);
    } else if (kind == 1) {
#pragma omp simd
        for (long i = first; i < last; ++i) {
            const T v = x[i];
            const T cdf = half * (one + M::erf(v * r));
            dx[i] = dy[i] * (cdf + v * p * M::exp(-half * v * v));
        }
    } else {
#pragma omp simd
        for (long i = first; i < last; ++i) {
            const T v = x[i];
            const T t = M::tanh(k * (v + c * v * v * v));
            dx[i] = dy[i] * (half * (one + t) + half * v * (one - t * t) * k * (one + c3 * v * v));
        }
    }
}

#define D5K_UNARY(T)                                                                           \
    D5K_ROW_CLONES void unary_range(const T* x, T* y, long first, long last, int kind) {       \
        unary_forward<T>(x, y, first, last, kind);                                             \
    }                                                                                          \
    D5K_ROW_CLONES void unary_range_backward(const T* x, const T* dy, T* dx, long first,       \
                                             long last, int kind) {                           \
        unary_backward<T>(x, dy, dx, first, last, kind);                                       \
    }
D5K_UNARY(float)
D5K_UNARY(double)

template <typename T>
void unary(const T* x, T* y, long size, int kind) {
    const int teams = size > kParallelMin ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(teams)
    {
        long first = 0, last = 0;
        split(size, omp_get_thread_num(), omp_get_num_threads(), first, last);
        unary_range(x, y, first, last, kind);
    }
}

template <typename T>
void unary_grad(const T* x, const T* dy, T* dx, long size, int kind) {
    const int teams = size > kParallelMin ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(teams)
    {
        long first = 0, last = 0;
        split(size, omp_get_thread_num(), omp_get_num_threads(), first, last);
        unary_range_backward(x, dy, dx, first, last, kind);
    }
}

}  // namespace

template <typename T>
void erf_forward(const T* x, T* y, long size) {
    unary(x, y, size, 0);
}

template <typename T>
void erf_backward(const T* x, const T* dy, T* dx, long size) {
    unary_grad(x, dy, dx, size, 0);
}

template <typename T>
void gelu_forward(const T* x, T* y, long size, bool tanh_form) {
    unary(x, y, size, tanh_form ? 2 : 1);
}

template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, long size, bool tanh_form) {
    unary_grad(x, dy, dx, size, tanh_form ? 2 : 1);
}

template <typename T>
void gather_forward(const T* data, const std::int64_t* indices, T* y, long outer, long axis,
                    long inner, long count) {
    const std::size_t bytes = static_cast<std::size_t>(inner) * sizeof(T);
#pragma omp parallel for collapse(2) schedule(static) if (outer * count * inner > kParallelMin)
    for (long o = 0; o < outer; ++o)
        for (long j = 0; j < count; ++j) {
            const long at = indices[j] < 0 ? indices[j] + axis : indices[j];
            std::memcpy(y + (o * count + j) * inner, data + (o * axis + at) * inner, bytes);
        }
}

template <typename T>
void gather_backward(const std::int64_t* indices, const T* dy, T* dx, long outer, long axis,
                     long inner, long count) {
    // dx is zeroed in contiguous per-thread spans; then tiles of (outer slice, block of
    // columns), which own disjoint parts of dx, each add every index's row of dy into
    // theirs, so repeated indices need no atomics. Blocks are at most 256 columns, fewer
    // when there would be too few tiles to keep every thread busy.
    const long total = outer * axis * inner;
    const int teams = std::max(total, outer * count * inner) > kParallelMin ? omp_get_max_threads() : 1;
    long block = 256;
    if (outer * ((inner + block - 1) / block) < 4L * teams)
        block = std::max(16L, ((inner + 4L * teams - 1) / (4L * teams) + 15) / 16 * 16);
    const long blocks = (inner + block - 1) / block;
#pragma omp parallel num_threads(teams)
    {
        long first = 0, last = 0;
        split(total, omp_get_thread_num(), omp_get_num_threads(), first, last);
        std::fill(dx + first, dx + last, T(0));
#pragma omp barrier
#pragma omp for collapse(2) schedule(static)
        for (long o = 0; o < outer; ++o)
            for (long b = 0; b < blocks; ++b) {
                const long lo = b * block, width = std::min(block, inner - lo);
                T* base = dx + o * axis * inner + lo;
                const T* src = dy + o * count * inner + lo;
                for (long j = 0; j < count; ++j) {
                    const long at = indices[j] < 0 ? indices[j] + axis : indices[j];
                    T* dst = base + at * inner;
                    const T* from = src + j * inner;
#pragma omp simd
                    for (long i = 0; i < width; ++i) dst[i] += from[i];
                }
            }
    }
}

#define D5K_TRANSFORMER(T)                                                                     \
    template void layer_norm_forward<T>(const T*, const T*, const T*, T*, T*, T*, long, long,  \
                                        double);                                              \
    template void layer_norm_backward<T>(const T*, const T*, const T*, const T*, const T*,     \
                                         const T*, const T*, T*, T*, T*, long, long);          \
    template void erf_forward<T>(const T*, T*, long);                                          \
    template void erf_backward<T>(const T*, const T*, T*, long);                               \
    template void gelu_forward<T>(const T*, T*, long, bool);                                   \
    template void gelu_backward<T>(const T*, const T*, T*, long, bool);                        \
    template void gather_forward<T>(const T*, const std::int64_t*, T*, long, long, long, long); \
    template void gather_backward<T>(const std::int64_t*, const T*, T*, long, long, long, long);
D5K_TRANSFORMER(float)
D5K_TRANSFORMER(double)

}  // namespace d5k
