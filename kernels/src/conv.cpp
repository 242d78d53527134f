// Conv 2-D. The forward goes to the direct convolution (conv_direct.cpp: no column
// buffer, weights repacked once, padded taps skipped) when the ISA has its kernels
// (AVX-512, AVX2) and the shape suits them (conv_direct_applies: a horizontal stride of
// 1 or 2, at least a vector of output channels per group, C/group * kh * kw >= 16).
// The rest of the forward, and the whole backward, use im2col + the packed GEMM, per
// image and group:
//   Y[n, g] (M/g x P) = W[g] (M/g x C/g*kh*kw) @ cols (C/g*kh*kw x P),  P = oh * ow.
// A 1x1 convolution with unit strides and no padding multiplies X's plane directly. With
// at least as many (image, group) jobs as threads the jobs run in parallel, each with a
// serial GEMM and its own column buffer; otherwise they run one after the other with a
// parallel GEMM. The backward reuses the same columns: dW[g] += dY[n, g] @ cols^T and
// dcols = W[g]^T @ dY[n, g], scattered back into dX (col2im).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "conv_direct.h"
#include "gemm.h"
#include "ops.h"
#include "scratch.h"
#include "trace.h"

namespace d5k {

namespace {

thread_local Scratch cols_scratch, dcols_scratch;

// Columns [p0, p1) of the im2col matrix (rows: C/group * kh * kw taps; columns: output
// positions in row-major order), written as a (rows x (p1 - p0)) block.
template <typename T>
void im2col(const T* x, long cg, long h, long wd, const Window2d& g, long p0, long p1, T* cols) {
    const long width = p1 - p0;
    for (long ci = 0; ci < cg; ++ci)
        for (long i = 0; i < g.kh; ++i)
            for (long j = 0; j < g.kw; ++j) {
                T* row = cols + ((ci * g.kh + i) * g.kw + j) * width;
                const long off_w = j * g.dw - g.pw;
                long lo, hi;
                valid_range(off_w, g.sw, wd, g.ow, lo, hi);
                for (long p = p0; p < p1;) {
                    const long oh = p / g.ow, first = p % g.ow;
                    const long last = std::min(g.ow, first + (p1 - p));
                    T* dst = row + (p - p0) - first;  // dst[o] is output column o
                    const long r = oh * g.sh - g.ph + i * g.dh;
                    if (r < 0 || r >= h) {
                        std::fill(dst + first, dst + last, T(0));
                    } else {
                        const T* src = x + (ci * h + r) * wd + off_w;
                        const long a = std::max(first, lo), b = std::max(a, std::min(last, hi));
                        std::fill(dst + first, dst + a, T(0));
                        if (g.sw == 1)
                            std::memcpy(dst + a, src + a, sizeof(T) * (b - a));
                        else
                            for (long o = a; o < b; ++o) dst[o] = src[o * g.sw];
                        std::fill(dst + b, dst + last, T(0));
                    }
                    p += last - first;
                }
            }
}

// The adjoint of im2col: add every column entry back into its input position.
template <typename T>
void col2im(const T* cols, long cg, long h, long wd, const Window2d& g, T* x) {
    const long p = g.oh * g.ow;
    for (long ci = 0; ci < cg; ++ci)
        for (long i = 0; i < g.kh; ++i)
            for (long j = 0; j < g.kw; ++j) {
                const T* row = cols + ((ci * g.kh + i) * g.kw + j) * p;
                const long off_w = j * g.dw - g.pw;
                long lo, hi;
                valid_range(off_w, g.sw, wd, g.ow, lo, hi);
                for (long oh = 0; oh < g.oh; ++oh) {
                    const long r = oh * g.sh - g.ph + i * g.dh;
                    if (r < 0 || r >= h) continue;
                    T* dst = x + (ci * h + r) * wd + off_w;
                    const T* src = row + oh * g.ow;
                    for (long o = lo; o < hi; ++o) dst[o * g.sw] += src[o];
                }
            }
}

// Output columns per im2col block: the block (kdim x chunk) within about 384 KiB, a
// multiple of 64 columns and at least 512 (all of them when there are few): each block
// packs the weights again, so blocks must not be narrow.
long column_chunk(long kdim, long p, std::size_t bytes) {
    const long budget = 384 * 1024 / static_cast<long>(bytes * kdim);
    const long chunk = std::max(512L, budget / 64 * 64);
    return std::min(p, chunk);
}

bool is_pointwise(const Window2d& g, long h, long wd) {
    return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 &&
           g.oh == h && g.ow == wd;
}

// Whether the (image, group) jobs run in parallel (serial GEMMs) rather than in turn.
bool jobs_in_parallel(long jobs) {
    const int team = max_threads();
    return team > 1 && jobs >= team && (jobs % team == 0 || jobs >= 4 * team);
}

enum class Forward { planes, im2col, direct };

template <typename T>
Forward forward_choice(long c, long h, long wd, long m, long group, const Window2d& g) {
    if (is_pointwise(g, h, wd)) return Forward::planes;  // already a plain GEMM
    if (conv_direct_applies<T>(c, m, group, g)) return Forward::direct;
    return Forward::im2col;
}

}  // namespace

template <typename T>
const char* conv2d_forward_algorithm(long c, long h, long wd, long m, long group,
                                     const Window2d& g) {
    switch (forward_choice<T>(c, h, wd, m, group, g)) {
        case Forward::planes: return "packed GEMM on the input planes";
        case Forward::direct:
            return current_isa() == Isa::avx512 ? "direct (AVX-512, padded taps skipped)"
                                                : "direct (AVX2, padded taps skipped)";
        default: return "im2col + packed GEMM";
    }
}

template <typename T>
void conv2d_forward(const T* x, const T* w, const T* bias, T* y, long n, long c, long h,
                    long wd, long m, long group, const Window2d& g) {
    if (forward_choice<T>(c, h, wd, m, group, g) == Forward::direct) {
        D5K_TRACE(conv_direct);
        conv2d_direct(x, w, bias, y, n, c, h, wd, m, group, g);
        return;
    }
    const long cg = c / group, mg = m / group, kdim = cg * g.kh * g.kw, p = g.oh * g.ow;
    const bool direct = is_pointwise(g, h, wd);
    const trace::Region whole(direct ? trace::Name::conv_planes : trace::Name::conv_im2col);
    const long jobs = n * group;
    const bool parallel = jobs_in_parallel(jobs);
    auto job = [&](long index, int threads) {
        const long ni = index / group, gi = index % group;
        const T* xs = x + (ni * c + gi * cg) * h * wd;
        T* ys = y + (ni * m + gi * mg) * p;
        const Matrix<T> wg{w + gi * mg * kdim, kdim, 1};
        if (direct) {
            gemm<T>(mg, p, kdim, T(1), wg, {xs, p, 1}, T(0), ys, p, threads);
        } else {
            // Column blocks small enough for the columns to stay in L2 between im2col
            // writing them and the GEMM packing them.
            const long chunk = column_chunk(kdim, p, sizeof(T));
            T* buf = cols_scratch.get<T>(kdim * chunk);
            for (long p0 = 0; p0 < p; p0 += chunk) {
                const long p1 = std::min(p, p0 + chunk);
                {
                    D5K_TRACE(conv_im2col_pack);
                    im2col(xs, cg, h, wd, g, p0, p1, buf);
                }
                gemm<T>(mg, p1 - p0, kdim, T(1), wg, {buf, p1 - p0, 1}, T(0), ys + p0, p, threads);
            }
        }
        if (bias != nullptr)
            for (long mi = 0; mi < mg; ++mi) {
                const T b = bias[gi * mg + mi];
                T* row = ys + mi * p;
                for (long q = 0; q < p; ++q) row[q] += b;
            }
    };
    if (parallel) {
#pragma omp parallel for schedule(static)
        for (long index = 0; index < jobs; ++index) job(index, 1);
    } else {
        for (long index = 0; index < jobs; ++index) job(index, 0);
    }
}

template <typename T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, long n, long c,
                     long h, long wd, long m, long group, const Window2d& g) {
    D5K_TRACE(conv_backward);
    const long cg = c / group, mg = m / group, kdim = cg * g.kh * g.kw, p = g.oh * g.ow;
    const long wsize = m * kdim;
    const bool direct = is_pointwise(g, h, wd);
    const long jobs = n * group;
    const bool parallel = jobs_in_parallel(jobs);
    const int team = parallel ? max_threads() : 1;
    // Each thread adds its images' weight gradients into its own copy; summed at the end.
    std::vector<T> partial(static_cast<std::size_t>(team > 1 ? (team - 1) * wsize : 0), T(0));
    std::fill(dw, dw + wsize, T(0));
    if (dx != nullptr && !direct) std::fill(dx, dx + n * c * h * wd, T(0));
    auto job = [&](long index, int threads, T* dw_acc) {
        const long ni = index / group, gi = index % group;
        const T* xs = x + (ni * c + gi * cg) * h * wd;
        const T* dys = dy + (ni * m + gi * mg) * p;
        const T* cols = xs;
        if (!direct) {
            T* buf = cols_scratch.get<T>(kdim * p);
            D5K_TRACE(conv_im2col_pack);
            im2col(xs, cg, h, wd, g, 0, p, buf);
            cols = buf;
        }
        gemm<T>(mg, kdim, p, T(1), {dys, p, 1}, {cols, 1, p}, T(1), dw_acc + gi * mg * kdim,
                kdim, threads);
        if (dx == nullptr) return;
        T* dxs = dx + (ni * c + gi * cg) * h * wd;
        const Matrix<T> wt{w + gi * mg * kdim, 1, kdim};
        if (direct) {
            gemm<T>(kdim, p, mg, T(1), wt, {dys, p, 1}, T(0), dxs, p, threads);
        } else {
            T* dcols = dcols_scratch.get<T>(kdim * p);
            gemm<T>(kdim, p, mg, T(1), wt, {dys, p, 1}, T(0), dcols, p, threads);
            D5K_TRACE(conv_col2im);
            col2im(dcols, cg, h, wd, g, dxs);
        }
    };
    if (parallel) {
#pragma omp parallel for schedule(static) num_threads(team)
        for (long index = 0; index < jobs; ++index) {
            const int t = omp_get_thread_num();
            job(index, 1, t == 0 ? dw : partial.data() + (t - 1) * wsize);
        }
        for (int t = 1; t < team; ++t) {
            const T* part = partial.data() + (t - 1) * wsize;
            for (long i = 0; i < wsize; ++i) dw[i] += part[i];
        }
    } else {
        for (long index = 0; index < jobs; ++index) job(index, 0, dw);
    }
    if (db != nullptr) {
#pragma omp parallel for schedule(static) if (m * n * p > 65536)
        for (long mi = 0; mi < m; ++mi) {
            double sum = 0.0;
            for (long ni = 0; ni < n; ++ni) {
                const T* row = dy + (ni * m + mi) * p;
                for (long q = 0; q < p; ++q) sum += row[q];
            }
            db[mi] = static_cast<T>(sum);
        }
    }
}

#define D5K_CONV(T)                                                                          \
    template const char* conv2d_forward_algorithm<T>(long, long, long, long, long,            \
                                                     const Window2d&);                        \
    template void conv2d_forward<T>(const T*, const T*, const T*, T*, long, long, long, long, \
                                    long, long, const Window2d&);                             \
    template void conv2d_backward<T>(const T*, const T*, const T*, T*, T*, T*, long, long,    \
                                     long, long, long, long, const Window2d&);
D5K_CONV(float)
D5K_CONV(double)

}  // namespace d5k
