// The driver of the direct convolution (see conv_direct.h): weight packing, the loops
// over output rows, taps and pixel tiles, the threads, and the final transpose to NCHW.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "conv_direct.h"
#include "gemm.h"
#include "isa.h"
#include "scratch.h"
#include "trace.h"

namespace d5k {

namespace {

thread_local Scratch weight_scratch, block_scratch, out_scratch;

// The blocked output of one job stays within about this many bytes, so that it stays in
// L2 while every chunk of input channels adds into it.
constexpr long kOutBytes = 256 * 1024;
// The weights of one tap and one run of input channels (cb x G) fit this many bytes:
// they stay in cache while every row of a job uses them, and the runs are long enough
// for the accumulators' loads and stores around each run not to matter (measured best
// against 16 KiB and 64 KiB and more).
constexpr long kTapBytes = 32 * 1024;
// The outputs and input runs of the images one job takes together (see cuts_of).
constexpr long kBatchBytes = 384 * 1024;

// How one problem is cut: channel chunks of nb vectors (G = nb * L output channels),
// output rows into pixel tiles of up to `r` pixels, input channels into runs of `cb`,
// output rows into row_blocks blocks per job.
struct Cuts {
    long cg, kg, taps;
    long vectors;  // ceil(kg / L)
    long nb, G, chunks;
    long r, cb;
    long rows, row_blocks;  // the most rows per job; jobs per chunk of an image
    long image_blocks;      // blocks of whole images (one image each when rows are split)
};

// The images [n0, n1) of image block bi: blocks differ by at most one image.
inline void image_range(const Cuts& u, long n, long bi, long& n0, long& n1) {
    n0 = bi * n / u.image_blocks;
    n1 = (bi + 1) * n / u.image_blocks;
}

// The output rows [r0, r1) of row block rb: blocks differ by at most one row.
inline void row_range(const Cuts& u, long oh, long rb, long& r0, long& r1) {
    r0 = rb * oh / u.row_blocks;
    r1 = (rb + 1) * oh / u.row_blocks;
}

template <typename T>
Cuts cuts_of(const DirectKernels<T>& k, long n, long c, long h, long wd, long m, long group,
             const Window2d& g, int team) {
    Cuts u{};
    u.cg = c / group;
    u.kg = m / group;
    u.taps = g.kh * g.kw;
    u.vectors = (u.kg + k.lanes - 1) / k.lanes;
    u.nb = std::min<long>(k.max_nb, u.vectors);
    // Fewer images x groups than threads: narrower chunks give each thread its own
    // output channels (and its share of the weight packing) before the rows are split.
    const long images = n * group;
    if (team > 1 && images < team) {
        const long shares = (team + images - 1) / images;
        u.nb = std::max(1L, std::min(u.nb, (u.vectors + shares - 1) / shares));
    }
    u.G = u.nb * k.lanes;
    u.chunks = (u.vectors + u.nb - 1) / u.nb;
    // Tiles as wide as the registers allow, split evenly over the row (8 = 4 + 4, not 7 + 1).
    const long widest = std::min<long>(k.max_r, k.budget / u.nb);
    const long tiles = (g.ow + widest - 1) / widest;
    u.r = (g.ow + tiles - 1) / tiles;
    u.cb = std::max<long>(16, kTapBytes / static_cast<long>(u.G * sizeof(T)));
    const long rows = std::max<long>(1, kOutBytes / static_cast<long>(g.ow * u.G * sizeof(T)));
    u.row_blocks = (g.oh + rows - 1) / rows;
    // At least one job per thread, and a whole number of jobs per thread while there
    // are few (rows are shared out evenly between a chunk's blocks: see row_range).
    const long outer = n * group * u.chunks;
    if (team > 1 && outer * u.row_blocks < team) u.row_blocks = (team + outer - 1) / outer;
    while (team > 1 && outer * u.row_blocks < 8L * team && (outer * u.row_blocks) % team != 0)
        ++u.row_blocks;
    u.row_blocks = std::min(u.row_blocks, g.oh);
    u.rows = (g.oh + u.row_blocks - 1) / u.row_blocks;
    // Small images: a job takes several whole ones, so that each tap's weights serve
    // the rows of all of them while in cache (a 7x7 image has only 7 rows), as long
    // as their outputs and input runs stay within about kBatchBytes and every thread
    // still has a job.
    u.image_blocks = n;
    if (u.row_blocks == 1 && n > 1) {
        const long per_image = (g.oh * g.ow * u.G + std::min(u.cb, u.cg) * h * wd) * sizeof(T);
        long per_job = std::max(1L, std::min(n, kBatchBytes / per_image));
        while (per_job > 1 && (n + per_job - 1) / per_job * group * u.chunks < team) --per_job;
        u.image_blocks = (n + per_job - 1) / per_job;
    }
    return u;
}

// Input channels [ci0, ci1) of group gi's chunk j of W (M, C/group, kh, kw), to
// dst[tap][ci - base][G] (tap_rows rows per tap), with the output channels past M/group
// (the last chunk's padding) zero. A transpose: 16 output channels at a time, a block
// of their rows is first copied (sequential reads) to a buffer in L1 and then written
// out one destination row (16 channels, one cache line) at a time. Reading the weights
// with their own stride instead would hit a few cache sets only (a row of C/group * 9
// values is often a multiple of 2 KiB) and thrash L1.
template <typename T>
void pack_block_scalar(const T* w, const Cuts& u, long gi, long j, long ci0, long ci1, long base,
                       long tap_rows, T* dst) {
    constexpr long kRows = 16, kSpan = 288;  // values of one row per copy
    T tmp[kRows * kSpan];
    const long span = std::max(1L, kSpan / u.taps);  // input channels per copy
    for (long k0 = 0; k0 < u.G; k0 += kRows) {
        const long width = std::min(kRows, u.G - k0);
        const long rows = std::max(0L, std::min(width, u.kg - j * u.G - k0));
        for (long b0 = ci0; b0 < ci1; b0 += span) {
            const long b1 = std::min(ci1, b0 + span), len = (b1 - b0) * u.taps;
            for (long q = 0; q < rows; ++q)
                std::memcpy(tmp + q * len,
                            w + ((gi * u.kg + j * u.G + k0 + q) * u.cg + b0) * u.taps,
                            sizeof(T) * len);
            for (long ci = b0; ci < b1; ++ci)
                for (long t = 0; t < u.taps; ++t) {
                    T* d = dst + (t * tap_rows + ci - base) * u.G + k0;
                    const T* src = tmp + (ci - b0) * u.taps + t;
                    for (long q = 0; q < rows; ++q) d[q] = src[q * len];
                    for (long q = rows; q < width; ++q) d[q] = T(0);
                }
        }
    }
}

// As pack_block_scalar, with the ISA's L x L transposes: L output channels (L rows of
// W) by L consecutive (channel, tap) positions at a time, read straight from W.
template <typename T>
void pack_block(const DirectKernels<T>& k, const T* w, const Cuts& u, long gi, long j, long ci0,
                long ci1, long base, long tap_rows, T* dst) {
    const long L = k.lanes, lds = u.cg * u.taps;
    if (k.transpose == nullptr || u.G % L != 0) {
        pack_block_scalar(w, u, gi, j, ci0, ci1, base, tap_rows, dst);
        return;
    }
    alignas(64) T block[16 * 16];
    const long first = ci0 * u.taps, end = ci1 * u.taps;
    for (long k0 = 0; k0 < u.G; k0 += L) {
        const long rows = std::max(0L, std::min(L, u.kg - j * u.G - k0));
        const T* src = w + (gi * u.kg + j * u.G + k0) * lds;
        long p = first, ci = ci0, t = 0;  // position p is (ci, t)
        auto row = [&]() { return dst + (t * tap_rows + ci - base) * u.G + k0; };
        auto next = [&]() {
            ++p;
            if (++t == u.taps) t = 0, ++ci;
        };
        if (rows == L)
            for (; p + L <= end;) {
                k.transpose(src + p, lds, block);
                for (long e = 0; e < L; ++e, next())
                    std::memcpy(row(), block + e * L, sizeof(T) * L);
            }
        for (; p < end; next()) {  // the last positions, and channels past M/group
            T* d = row();
            for (long q = 0; q < rows; ++q) d[q] = src[q * lds + p];
            for (long q = rows; q < L; ++q) d[q] = T(0);
        }
    }
}

// All of W to [group][chunk][tap][C/group][G], once per call.
template <typename T>
void pack_weights(const DirectKernels<T>& k, const T* w, long group, const Cuts& u, T* wp) {
    D5K_TRACE(conv_direct_pack);
    const long per_chunk = u.taps * u.cg * u.G;
    const long jobs = group * u.chunks;
    const bool big = jobs > 1 && per_chunk * jobs > 8192;
#pragma omp parallel for schedule(static) if (big)
    for (long job = 0; job < jobs; ++job)
        pack_block(k, w, u, job / u.chunks, job % u.chunks, 0, u.cg, 0, u.cg,
                   wp + job * per_chunk);
}

// The blocked output ob [pixel][G] of `pixels` pixels to `kn` channel planes of Y
// (`plane` apart), plus the bias (null: none). L x L blocks go through the ISA's
// transpose (a scalar transpose reads ob with a stride of G values and cost as much as
// a tenth of a 7x7 or 8x8 layer); the ragged edges go one value at a time.
template <typename T>
void write_planes(const DirectKernels<T>& k, const Cuts& u, const T* ob, long pixels,
                  const T* bias, T* y, long plane, long kn) {
    const long G = u.G, L = k.lanes;
    alignas(64) T block[16 * 16];
    const long full_q = k.transpose != nullptr ? pixels / L * L : 0;
    const long full_k = k.transpose != nullptr ? kn / L * L : 0;
    for (long q0 = 0; q0 < full_q; q0 += L)
        for (long k0 = 0; k0 < full_k; k0 += L) {
            k.transpose(ob + q0 * G + k0, G, block);
            for (long e = 0; e < L; ++e) {
                const T b = bias != nullptr ? bias[k0 + e] : T(0);
                T* dst = y + (k0 + e) * plane + q0;
                const T* src = block + e * L;
                for (long q = 0; q < L; ++q) dst[q] = src[q] + b;
            }
        }
    // What the blocks left, 16 pixels at a time so that the reads stay in L1: channels
    // [full_k, kn) of pixels [0, full_q), then every channel of pixels [full_q, pixels).
    auto rest = [&](long q_begin, long q_end, long k_begin) {
        for (long q0 = q_begin; q0 < q_end; q0 += 16) {
            const long q1 = std::min(q_end, q0 + 16);
            for (long kk = k_begin; kk < kn; ++kk) {
                const T b = bias != nullptr ? bias[kk] : T(0);
                T* yk = y + kk * plane;
                for (long q = q0; q < q1; ++q) yk[q] = ob[q * G + kk] + b;
            }
        }
    };
    rest(0, full_q, full_k);
    rest(full_q, pixels, 0);
}

// One job: output rows [r0, r1) of images [n0, n1), group gi, channel chunk j.
template <typename T>
void direct_job(const DirectKernels<T>& k, const Cuts& u, const T* x, const T* w, const T* wp,
                const T* bias, T* y, long c, long h, long wd, long m, const Window2d& g, long n0,
                long n1, long gi, long j, long r0, long r1) {
    D5K_TRACE(conv_direct_job);
    const long ow = g.ow, G = u.G, plane = h * wd;
    const long pixels = (r1 - r0) * ow;  // per image
    T* ob = out_scratch.get<T>((n1 - n0) * pixels * G);
    std::memset(ob, 0, sizeof(T) * (n1 - n0) * pixels * G);
    const long nb = std::min(u.nb, u.vectors - j * u.nb);
    DirectTile<T> tile[64] = {};  // by pixel count: edge tiles are narrower
    for (long r = 1; r <= u.r; ++r)
        tile[r] = k.tile(static_cast<int>(g.sw), static_cast<int>(nb), static_cast<int>(r));
    // The output columns [lo, hi) where each kernel column's tap lands inside the input.
    std::vector<long> lo(g.kw), hi(g.kw);
    for (long jw = 0; jw < g.kw; ++jw) valid_range(jw * g.dw - g.pw, g.sw, wd, ow, lo[jw], hi[jw]);
    for (long c0 = 0; c0 < u.cg; c0 += u.cb) {
        const long nc = std::min(u.cb, u.cg - c0);
        // The weights of these input channels: in the packed copy, or packed now.
        const T* wc;
        long tap_rows;
        if (wp != nullptr) {
            wc = wp + (gi * u.chunks + j) * u.taps * u.cg * G + c0 * G;
            tap_rows = u.cg;
        } else {
            T* own = block_scratch.get<T>(u.taps * nc * G);
            pack_block(k, w, u, gi, j, c0, c0 + nc, c0, nc, own);
            wc = own;
            tap_rows = nc;
        }
        // Taps outside the images and rows: a tap's weights (nc x G) stay in cache
        // while every row of the job uses them.
        for (long i = 0; i < g.kh; ++i)
            for (long jw = 0; jw < g.kw; ++jw) {
                const long off = jw * g.dw - g.pw;
                const T* wt = wc + (i * g.kw + jw) * tap_rows * G;
                for (long ni = n0; ni < n1; ++ni) {
                    const T* xc = x + (ni * c + gi * u.cg + c0) * plane;
                    T* oimg = ob + (ni - n0) * pixels * G;
                    for (long oh = r0; oh < r1; ++oh) {
                        const long ih = oh * g.sh - g.ph + i * g.dh;
                        if (ih < 0 || ih >= h) continue;  // a padded row: skip the tap
                        const T* xrow = xc + ih * wd + off;
                        T* orow = oimg + (oh - r0) * ow * G;
                        for (long t0 = 0; t0 < ow; t0 += u.r) {
                            // Only the pixels whose tap lands inside the row.
                            const long a = std::max(t0, lo[jw]);
                            const long b = std::min(std::min(t0 + u.r, ow), hi[jw]);
                            if (a >= b) continue;
                            tile[b - a](nc, xrow + a * g.sw, plane, wt, G, orow + a * G, G);
                        }
                    }
                }
            }
    }
    for (long ni = n0; ni < n1; ++ni)
        write_planes(k, u, ob + (ni - n0) * pixels * G, pixels,
                     bias != nullptr ? bias + gi * u.kg + j * G : nullptr,
                     y + (ni * m + gi * u.kg + j * G) * g.oh * ow + r0 * ow, g.oh * ow,
                     std::min(G, u.kg - j * G));
}

}  // namespace

template <>
const DirectKernels<float>* direct_kernels<float>() {
    switch (current_isa()) {
        case Isa::avx512: return &direct_kernels_avx512_f32();
        case Isa::avx2: return &direct_kernels_avx2_f32();
        default: return nullptr;
    }
}

template <>
const DirectKernels<double>* direct_kernels<double>() {
    switch (current_isa()) {
        case Isa::avx512: return &direct_kernels_avx512_f64();
        case Isa::avx2: return &direct_kernels_avx2_f64();
        default: return nullptr;
    }
}

template <typename T>
bool conv_direct_applies(long c, long m, long group, const Window2d& g) {
    const DirectKernels<T>* k = direct_kernels<T>();
    if (k == nullptr || (g.sw != 1 && g.sw != 2)) return false;
    const long cg = c / group, kg = m / group;
    return kg >= k->lanes && cg * g.kh * g.kw >= 16;
}

template <typename T>
void conv2d_direct(const T* x, const T* w, const T* bias, T* y, long n, long c, long h, long wd,
                   long m, long group, const Window2d& g) {
    if (n <= 0 || g.oh <= 0 || g.ow <= 0) return;  // an empty output: nothing to write
    const DirectKernels<T>& k = *direct_kernels<T>();
    const int team = max_threads();
    const Cuts u = cuts_of(k, n, c, h, wd, m, group, g, team);
    // Packed once when several jobs (images, row blocks) share a chunk's weights;
    // otherwise each job packs its chunk block by block into L2 as it goes, so a
    // single image never sends the whole repacked W through memory.
    T* wp = nullptr;
    if (n * u.row_blocks > 1) {
        wp = weight_scratch.get<T>(group * u.chunks * u.taps * u.cg * u.G);
        pack_weights(k, w, group, u, wp);
    }
    const long jobs = u.image_blocks * group * u.chunks * u.row_blocks;
    // Row blocks innermost: a thread's consecutive jobs share their weights.
#pragma omp parallel for schedule(static) num_threads(team) if (team > 1 && jobs > 1)
    for (long job = 0; job < jobs; ++job) {
        const long rb = job % u.row_blocks;
        const long rest = job / u.row_blocks;
        const long j = rest % u.chunks, gi = (rest / u.chunks) % group;
        const long bi = rest / (u.chunks * group);
        long n0, n1, r0, r1;
        image_range(u, n, bi, n0, n1);
        row_range(u, g.oh, rb, r0, r1);
        direct_job(k, u, x, w, wp, bias, y, c, h, wd, m, g, n0, n1, gi, j, r0, r1);
    }
}

#define D5K_DIRECT(T)                                                                        \
    template bool conv_direct_applies<T>(long, long, long, const Window2d&);                 \
    template void conv2d_direct<T>(const T*, const T*, const T*, T*, long, long, long, long, \
                                   long, long, const Window2d&);
D5K_DIRECT(float)
D5K_DIRECT(double)

}  // namespace d5k
