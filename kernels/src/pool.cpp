// MaxPool and AveragePool over 2-D planes, one plane per (image, channel), planes in
// parallel. Taps outside the input (explicit padding or the part of a ceil-mode window
// beyond it) are padding: -inf for MaxPool, zero (and not counted unless
// count_include_pad says so, within the explicit pads) for AveragePool.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops.h"

namespace d5k {

namespace {

// How many taps of output `o` fall in [low, high) along one axis.
inline long taps_within(long o, long s, long k, long d, long pad, long low, long high) {
    long count = 0;
    for (long i = 0; i < k; ++i) {
        const long r = o * s - pad + i * d;
        count += (r >= low && r < high) ? 1 : 0;
    }
    return count;
}

// The divisor of each output position along one axis.
std::vector<long> divisors(long out, long size, long s, long k, long d, long pb, long pe,
                           bool include_pad) {
    std::vector<long> div(static_cast<std::size_t>(out));
    const long low = include_pad ? -pb : 0, high = include_pad ? size + pe : size;
    for (long o = 0; o < out; ++o) div[o] = taps_within(o, s, k, d, pb, low, high);
    return div;
}

// Whether tap value v replaces the window's best so far: a larger value, or the first NaN
// (numpy's max and argmax: a NaN anywhere in the window is the window's maximum, and the
// first NaN is its position).
template <typename T>
inline bool beats(T v, T best) {
    return v > best || (v != v && best == best);
}

}  // namespace

template <typename T>
void max_pool_forward(const T* x, T* y, std::int64_t* indices, long planes, long h, long wd,
                      const Window2d& g, int storage_order) {
    const long plane = h * wd, out = g.oh * g.ow;
#pragma omp parallel for schedule(static) if (planes * out * g.kh * g.kw > 32768)
    for (long pl = 0; pl < planes; ++pl) {
        const T* xs = x + pl * plane;
        for (long oh = 0; oh < g.oh; ++oh)
            for (long ow = 0; ow < g.ow; ++ow) {
                // The first tap wins ties and stands for a window wholly in padding.
                T best = -std::numeric_limits<T>::infinity();
                long best_r = oh * g.sh - g.ph, best_c = ow * g.sw - g.pw;
                bool first = true;
                for (long i = 0; i < g.kh; ++i) {
                    const long r = oh * g.sh - g.ph + i * g.dh;
                    for (long j = 0; j < g.kw; ++j) {
                        const long col = ow * g.sw - g.pw + j * g.dw;
                        const bool inside = r >= 0 && r < h && col >= 0 && col < wd;
                        const T v = inside ? xs[r * wd + col] : -std::numeric_limits<T>::infinity();
                        if (first || beats(v, best)) {
                            best = v;
                            best_r = r;
                            best_c = col;
                            first = false;
                        }
                    }
                }
                y[pl * out + oh * g.ow + ow] = best;
                if (indices != nullptr) {
                    const long r = std::clamp(best_r, 0L, h - 1), col = std::clamp(best_c, 0L, wd - 1);
                    const long within = storage_order == 0 ? r * wd + col : r + col * h;
                    indices[pl * out + oh * g.ow + ow] = pl * plane + within;
                }
            }
    }
}

template <typename T>
void max_pool_backward(const T* x, const T* dy, T* dx, long planes, long h, long wd,
                       const Window2d& g) {
    const long plane = h * wd, out = g.oh * g.ow;
#pragma omp parallel for schedule(static) if (planes * out * g.kh * g.kw > 32768)
    for (long pl = 0; pl < planes; ++pl) {
        const T* xs = x + pl * plane;
        T* dxs = dx + pl * plane;
        std::fill(dxs, dxs + plane, T(0));
        for (long oh = 0; oh < g.oh; ++oh)
            for (long ow = 0; ow < g.ow; ++ow) {
                T best = -std::numeric_limits<T>::infinity();
                long at = -1;
                bool first = true;
                for (long i = 0; i < g.kh; ++i) {
                    const long r = oh * g.sh - g.ph + i * g.dh;
                    for (long j = 0; j < g.kw; ++j) {
                        const long col = ow * g.sw - g.pw + j * g.dw;
                        const bool inside = r >= 0 && r < h && col >= 0 && col < wd;
                        const T v = inside ? xs[r * wd + col] : -std::numeric_limits<T>::infinity();
                        if (first || beats(v, best)) {
                            best = v;
                            at = inside ? r * wd + col : -1;  // a padding tap takes it away
                            first = false;
                        }
                    }
                }
                if (at >= 0) dxs[at] += dy[pl * out + oh * g.ow + ow];
            }
    }
}

template <typename T>
void avg_pool_forward(const T* x, T* y, long planes, long h, long wd, const Window2d& g,
                      bool count_include_pad) {
    const long plane = h * wd, out = g.oh * g.ow;
    const auto dh = divisors(g.oh, h, g.sh, g.kh, g.dh, g.ph, g.peh, count_include_pad);
    const auto dw = divisors(g.ow, wd, g.sw, g.kw, g.dw, g.pw, g.pew, count_include_pad);
#pragma omp parallel for schedule(static) if (planes * out * g.kh * g.kw > 32768)
    for (long pl = 0; pl < planes; ++pl) {
        const T* xs = x + pl * plane;
        for (long oh = 0; oh < g.oh; ++oh)
            for (long ow = 0; ow < g.ow; ++ow) {
                T sum = 0;
                for (long i = 0; i < g.kh; ++i) {
                    const long r = oh * g.sh - g.ph + i * g.dh;
                    if (r < 0 || r >= h) continue;
                    for (long j = 0; j < g.kw; ++j) {
                        const long col = ow * g.sw - g.pw + j * g.dw;
                        if (col >= 0 && col < wd) sum += xs[r * wd + col];
                    }
                }
                const long count = dh[oh] * dw[ow];
                y[pl * out + oh * g.ow + ow] = count > 0 ? sum / T(count) : T(0);
            }
    }
}

template <typename T>
void avg_pool_backward(const T* dy, T* dx, long planes, long h, long wd, const Window2d& g,
                       bool count_include_pad) {
    const long plane = h * wd, out = g.oh * g.ow;
    const auto dh = divisors(g.oh, h, g.sh, g.kh, g.dh, g.ph, g.peh, count_include_pad);
    const auto dw = divisors(g.ow, wd, g.sw, g.kw, g.dw, g.pw, g.pew, count_include_pad);
#pragma omp parallel for schedule(static) if (planes * out * g.kh * g.kw > 32768)
    for (long pl = 0; pl < planes; ++pl) {
        T* dxs = dx + pl * plane;
        std::fill(dxs, dxs + plane, T(0));
        for (long oh = 0; oh < g.oh; ++oh)
            for (long ow = 0; ow < g.ow; ++ow) {
                const long count = dh[oh] * dw[ow];
                if (count == 0) continue;
                const T share = dy[pl * out + oh * g.ow + ow] / T(count);
                for (long i = 0; i < g.kh; ++i) {
                    const long r = oh * g.sh - g.ph + i * g.dh;
                    if (r < 0 || r >= h) continue;
                    for (long j = 0; j < g.kw; ++j) {
                        const long col = ow * g.sw - g.pw + j * g.dw;
                        if (col >= 0 && col < wd) dxs[r * wd + col] += share;
                    }
                }
            }
    }
}

#define D5K_POOL(T)                                                                           \
    template void max_pool_forward<T>(const T*, T*, std::int64_t*, long, long, long,           \
                                      const Window2d&, int);                                   \
    template void max_pool_backward<T>(const T*, const T*, T*, long, long, long,               \
                                       const Window2d&);                                       \
    template void avg_pool_forward<T>(const T*, T*, long, long, long, const Window2d&, bool);  \
    template void avg_pool_backward<T>(const T*, T*, long, long, long, const Window2d&, bool);
D5K_POOL(float)
D5K_POOL(double)

}  // namespace d5k
