// The GEMM driver, after GotoBLAS/BLIS: for each nc-wide block of columns (jc) and each
// kc-deep slice of K (pc), B's kc x nc block is packed into nr-wide micro-panels (it
// stays in L3, each micro-panel in L1); for each mc-tall block of rows (ic) A's mc x kc
// block is packed into mr-tall micro-panels (it stays in L2); the micro-kernel then
// sweeps the mr x nr tiles. Edge tiles go through a small buffer. Threads split the
// output into slabs (of columns when it is wide, of rows when it is tall) and each runs
// the blocked algorithm on its slab with its own packing buffers: no barrier inside.
//
// Products with few columns (N <= 128) take a second path where the micro-kernel has one
// (AVX-512): A is not packed but read in place, B alone is packed, and threads split the
// rows. Packing A costs a transposing pass over M x K values that each feed only N / 16
// FMAs; on 7680x16x2560 that pass took as long as the arithmetic.
#include "gemm.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "gemm_kernels.h"
#include "scratch.h"
#include "trace.h"

namespace d5k {

namespace {

template <typename T>
struct Kernel {
    Blocking blocking;
    MicroKernel<T> ukr;
    EdgeKernel<T> edge = nullptr;  // null: edge tiles go through a buffer
    SupKernel<T> sup = nullptr;    // null: skinny products take the packed path too
    int lanes = 1;                 // values per vector of `sup`'s B panels
};

Blocking blocking_of(Isa isa, int bytes) {
    // mc and nc are multiples of mr and nr; kc keeps B's micro-panel (kc x nr) within
    // about half of a 32-48 KiB L1, mc x kc within L2, kc x nc within L3.
    const bool f32 = bytes == 4;
    switch (isa) {
        case Isa::avx512:
            return f32 ? Blocking{14, 32, 256, 14 * 24, 4096} : Blocking{14, 16, 256, 14 * 12, 2048};
        case Isa::avx2:
            return f32 ? Blocking{6, 16, 256, 6 * 48, 4096} : Blocking{6, 8, 256, 6 * 24, 2048};
        default:
            return f32 ? Blocking{4, 8, 256, 4 * 64, 2048} : Blocking{4, 8, 256, 4 * 32, 2048};
    }
}

template <typename T>
Kernel<T> kernel_of(Isa isa);

template <>
Kernel<float> kernel_of<float>(Isa isa) {
    switch (isa) {
        case Isa::avx512:
            return {blocking_of(isa, 4), ukr_avx512_f32, edge_avx512_f32, sup_avx512_f32, 16};
        case Isa::avx2: return {blocking_of(isa, 4), ukr_avx2_f32};
        default: return {blocking_of(isa, 4), ukr_generic_f32};
    }
}

template <>
Kernel<double> kernel_of<double>(Isa isa) {
    switch (isa) {
        case Isa::avx512:
            return {blocking_of(isa, 8), ukr_avx512_f64, edge_avx512_f64, sup_avx512_f64, 8};
        case Isa::avx2: return {blocking_of(isa, 8), ukr_avx2_f64};
        default: return {blocking_of(isa, 8), ukr_generic_f64};
    }
}

// Per-thread packing buffers, large ones on huge pages (see Scratch): a packed 4 MiB block
// of B then needs two TLB entries rather than a thousand (measured here, about 1% on large
// float64 products).
thread_local Scratch a_scratch(Scratch::huge_pages), b_scratch(Scratch::huge_pages);

// Pack rows [0, mc) x columns [0, kc) of A into mr-tall micro-panels, zero-padded.
template <typename T>
void pack_a(long mc, long kc, const T* a, std::ptrdiff_t rs, std::ptrdiff_t cs, int mr, T* out) {
    for (long i0 = 0; i0 < mc; i0 += mr) {
        const int rows = static_cast<int>(std::min<long>(mr, mc - i0));
        const T* base = a + i0 * rs;
        if (cs == 1 && rows == mr) {
            for (int i = 0; i < mr; ++i) {
                const T* src = base + i * rs;
                for (long k = 0; k < kc; ++k) out[k * mr + i] = src[k];
            }
        } else {
            for (long k = 0; k < kc; ++k)
                for (int i = 0; i < mr; ++i) out[k * mr + i] = i < rows ? base[i * rs + k * cs] : T(0);
        }
        out += static_cast<std::ptrdiff_t>(mr) * kc;
    }
}

// Pack rows [0, kc) x columns [0, nc) of B into nr-wide micro-panels, zero-padded.
template <typename T>
void pack_b(long kc, long nc, const T* b, std::ptrdiff_t rs, std::ptrdiff_t cs, int nr, T* out) {
    if (cs == 1) {
        // Row by row, so that B is read as whole rows (sequential streams the hardware
        // prefetcher follows) rather than as nr-wide strips kc rows tall.
        const long full = nc / nr;
        const std::ptrdiff_t panel = static_cast<std::ptrdiff_t>(nr) * kc;
        const int rest = static_cast<int>(nc - full * nr);
        for (long k = 0; k < kc; ++k) {
            const T* src = b + k * rs;
            T* dst = out + k * nr;
            for (long p = 0; p < full; ++p) std::memcpy(dst + p * panel, src + p * nr, sizeof(T) * nr);
            if (rest > 0) {
                T* last = dst + full * panel;
                std::memcpy(last, src + full * nr, sizeof(T) * rest);
                std::fill(last + rest, last + nr, T(0));
            }
        }
        return;
    }
    for (long j0 = 0; j0 < nc; j0 += nr) {
        const int cols = static_cast<int>(std::min<long>(nr, nc - j0));
        const T* base = b + j0 * cs;
        if (cs == 1 && cols == nr) {
            for (long k = 0; k < kc; ++k) std::memcpy(out + k * nr, base + k * rs, sizeof(T) * nr);
        } else if (rs == 1 && cols == nr) {
            for (int j = 0; j < nr; ++j) {
                const T* src = base + j * cs;
                for (long k = 0; k < kc; ++k) out[k * nr + j] = src[k];
            }
        } else {
            for (long k = 0; k < kc; ++k)
                for (int j = 0; j < nr; ++j) out[k * nr + j] = j < cols ? base[k * rs + j * cs] : T(0);
        }
        out += static_cast<std::ptrdiff_t>(nr) * kc;
    }
}

// Y = beta * Y (beta == 0: zeros, without reading Y).
template <typename T>
void scale_rows(long M, long N, T beta, T* Y, std::ptrdiff_t ldy) {
    for (long i = 0; i < M; ++i) {
        T* row = Y + i * ldy;
        if (beta == T(0))
            std::fill(row, row + N, T(0));
        else if (beta != T(1))
            for (long j = 0; j < N; ++j) row[j] *= beta;
    }
}

// The blocked algorithm on one slab, in the calling thread.
template <typename T>
void gemm_blocked(const Kernel<T>& kn, long M, long N, long K, T alpha, Matrix<T> A, Matrix<T> B,
                  T beta, T* Y, std::ptrdiff_t ldy) {
    const Blocking& bl = kn.blocking;
    const int mr = bl.mr, nr = bl.nr;
    const long kc_max = std::min<long>(bl.kc, K);
    const long nc_max = std::min<long>(bl.nc, (N + nr - 1) / nr * nr);
    const long mc_max = std::min<long>(bl.mc, (M + mr - 1) / mr * mr);
    T* bp = b_scratch.get<T>(kc_max * nc_max);
    T* ap = a_scratch.get<T>(kc_max * mc_max);
    alignas(64) T edge[16 * 32];
    for (long jc = 0; jc < N; jc += bl.nc) {
        const long nc = std::min<long>(bl.nc, N - jc);
        for (long pc = 0; pc < K; pc += bl.kc) {
            const long kc = std::min<long>(bl.kc, K - pc);
            const T beta_now = pc == 0 ? beta : T(1);
            {
                D5K_TRACE(gemm_pack_b);
                pack_b(kc, nc, B.data + pc * B.rs + jc * B.cs, B.rs, B.cs, nr, bp);
            }
            for (long ic = 0; ic < M; ic += bl.mc) {
                const long mc = std::min<long>(bl.mc, M - ic);
                {
                    D5K_TRACE(gemm_pack_a);
                    pack_a(mc, kc, A.data + ic * A.rs + pc * A.cs, A.rs, A.cs, mr, ap);
                }
                D5K_TRACE(gemm_macro);
                for (long jr = 0; jr < nc; jr += nr) {
                    const int cols = static_cast<int>(std::min<long>(nr, nc - jr));
                    const T* bpanel = bp + jr * kc;
                    for (long ir = 0; ir < mc; ir += mr) {
                        const int rows = static_cast<int>(std::min<long>(mr, mc - ir));
                        const T* apanel = ap + ir * kc;
                        T* c = Y + (ic + ir) * ldy + jc + jr;
                        if (rows == mr && cols == nr) {
                            kn.ukr(kc, apanel, bpanel, c, ldy, alpha, beta_now);
                            continue;
                        }
                        if (kn.edge != nullptr) {
                            kn.edge(kc, apanel, bpanel, c, ldy, alpha, beta_now, rows, cols);
                            continue;
                        }
                        kn.ukr(kc, apanel, bpanel, edge, nr, T(1), T(0));
                        for (int i = 0; i < rows; ++i) {
                            T* row = c + i * ldy;
                            const T* got = edge + i * nr;
                            if (beta_now == T(0))
                                for (int j = 0; j < cols; ++j) row[j] = alpha * got[j];
                            else
                                for (int j = 0; j < cols; ++j) row[j] = beta_now * row[j] + alpha * got[j];
                        }
                    }
                }
            }
        }
    }
}

// The skinny path: products with at most this many columns read A in place.
constexpr long SUP_MAX_N = 128;
// Its K slices keep the packed kc x N block of B within about half of L2 (at least the
// blocked path's kc): long slices mean long sequential streams along A's rows and fewer
// passes over Y.
constexpr long SUP_B_BYTES = 512 * 1024;

template <typename T>
bool takes_sup_path(const Kernel<T>& kn, long N, Matrix<T> A) {
    return kn.sup != nullptr && N <= SUP_MAX_N && (A.cs == 1 || A.rs == 1);
}

// Width of the B panel that starts at column j0 of N: nr, or the rest rounded up to
// whole vectors.
inline int sup_panel_width(long j0, long N, int nr, int lanes) {
    const long rest = (N - j0 + lanes - 1) / lanes * lanes;
    return static_cast<int>(std::min<long>(nr, rest));
}

// Pack rows [0, kc) x columns [0, N) of B into panels of sup_panel_width columns each,
// row by row, zero-padded.
template <typename T>
void pack_b_sup(long kc, long N, const T* b, std::ptrdiff_t rs, std::ptrdiff_t cs, int nr,
                int lanes, T* out) {
    for (long j0 = 0; j0 < N; j0 += nr) {
        const int w = sup_panel_width(j0, N, nr, lanes);
        const int cols = static_cast<int>(std::min<long>(w, N - j0));
        const T* base = b + j0 * cs;
        for (long k = 0; k < kc; ++k) {
            T* row = out + k * w;
            if (cs == 1) {
                std::memcpy(row, base + k * rs, sizeof(T) * cols);
            } else {
                for (int j = 0; j < cols; ++j) row[j] = base[k * rs + j * cs];
            }
            for (int j = cols; j < w; ++j) row[j] = T(0);
        }
        out += static_cast<std::ptrdiff_t>(w) * kc;
    }
}

// The skinny path on one slab of rows: per K slice, B is packed once; then each mr-row
// strip of A, read in place, meets every B panel while it is still in L1/L2.
template <typename T>
void gemm_sup(const Kernel<T>& kn, long M, long N, long K, T alpha, Matrix<T> A, Matrix<T> B,
              T beta, T* Y, std::ptrdiff_t ldy) {
    const int mr = kn.blocking.mr, nr = kn.blocking.nr;
    const long n_padded = (N + kn.lanes - 1) / kn.lanes * kn.lanes;
    const long kc_fit = SUP_B_BYTES / (n_padded * static_cast<long>(sizeof(T)));
    const long kc_step = std::max<long>(kn.blocking.kc, kc_fit / 64 * 64);
    T* bp = b_scratch.get<T>(std::min(kc_step, K) * n_padded);
    // Rows of A a multiple of 2 KiB apart fall into a few L1 sets and evict each other
    // before the strip has met every B panel; such strips are copied (a plain row copy)
    // to rows one cache line off that alignment.
    const bool copy_a = A.cs == 1 && N > nr &&
                        (A.rs * static_cast<std::ptrdiff_t>(sizeof(T))) % 2048 == 0;
    const long line = 64 / static_cast<long>(sizeof(T));
    const std::ptrdiff_t copy_ld = (std::min(kc_step, K) + line - 1) / line * line + line;
    T* a_copy = copy_a ? a_scratch.get<T>(mr * copy_ld) : nullptr;
    for (long pc = 0; pc < K; pc += kc_step) {
        const long kc = std::min(kc_step, K - pc);
        const T beta_now = pc == 0 ? beta : T(1);
        {
            D5K_TRACE(gemm_pack_b);
            pack_b_sup(kc, N, B.data + pc * B.rs, B.rs, B.cs, nr, kn.lanes, bp);
        }
        D5K_TRACE(gemm_macro);
        for (long ir = 0; ir < M; ir += mr) {
            const int rows = static_cast<int>(std::min<long>(mr, M - ir));
            const T* a = A.data + ir * A.rs + pc * A.cs;
            std::ptrdiff_t rsa = A.rs;
            if (copy_a) {
                for (int i = 0; i < rows; ++i)
                    std::memcpy(a_copy + i * copy_ld, a + i * A.rs, sizeof(T) * kc);
                a = a_copy;
                rsa = copy_ld;
            }
            const T* bpanel = bp;
            for (long j0 = 0; j0 < N; j0 += nr) {
                const int w = sup_panel_width(j0, N, nr, kn.lanes);
                const int cols = static_cast<int>(std::min<long>(w, N - j0));
                kn.sup(kc, a, rsa, A.cs, bpanel, w, Y + ir * ldy + j0, ldy, alpha, beta_now, rows,
                       cols);
                bpanel += static_cast<std::ptrdiff_t>(w) * kc;
            }
        }
    }
}

enum class Path { blocked, sup };

// One slab of the product in the calling thread, on the path its shape calls for.
template <typename T>
void gemm_slab(const Kernel<T>& kn, Path path, long M, long N, long K, T alpha, Matrix<T> A,
               Matrix<T> B, T beta, T* Y, std::ptrdiff_t ldy) {
    D5K_TRACE(gemm_slab);
    switch (path) {
        case Path::sup: gemm_sup(kn, M, N, K, alpha, A, B, beta, Y, ldy); break;
        default: gemm_blocked(kn, M, N, K, alpha, A, B, beta, Y, ldy);
    }
}

}  // namespace

Blocking gemm_blocking(Isa isa, int bytes) { return blocking_of(isa, bytes); }

int max_threads() { return omp_get_max_threads(); }

void set_max_threads(int n) { omp_set_num_threads(std::max(1, n)); }

template <typename T>
void gemm(long M, long N, long K, T alpha, Matrix<T> A, Matrix<T> B, T beta, T* Y,
          std::ptrdiff_t ldy, int threads) {
    if (M <= 0 || N <= 0) return;
    D5K_TRACE(gemm);
    if (K <= 0 || alpha == T(0)) {
        scale_rows(M, N, beta, Y, ldy);
        return;
    }
    const Kernel<T> kn = kernel_of<T>(current_isa());
    const int mr = kn.blocking.mr, nr = kn.blocking.nr;
    int team = threads > 0 ? threads : omp_get_max_threads();
    if (omp_in_parallel()) team = 1;
    // Below about 64^3 multiply-adds a thread team costs more than it saves.
    const double work = static_cast<double>(M) * N * K;
    if (work < 262144.0) team = 1;
    // The path depends on the whole product's shape, never on a slab's, so that every
    // element is accumulated in the same order whatever the thread count.
    const Path path = takes_sup_path(kn, N, A) ? Path::sup : Path::blocked;
    const bool by_columns = path != Path::sup && N >= M;
    const long tiles = by_columns ? (N + nr - 1) / nr : (M + mr - 1) / mr;
    team = static_cast<int>(std::min<long>(team, tiles));
    if (team <= 1) {
        gemm_slab(kn, path, M, N, K, alpha, A, B, beta, Y, ldy);
        return;
    }
    const long step = by_columns ? (tiles + team - 1) / team * nr : (tiles + team - 1) / team * mr;
#pragma omp parallel num_threads(team)
    {
        const long begin = omp_get_thread_num() * step;
        const long extent = by_columns ? N : M;
        const long count = std::min(step, extent - begin);
        if (count > 0) {
            if (by_columns) {
                Matrix<T> slab{B.data + begin * B.cs, B.rs, B.cs};
                gemm_slab(kn, path, M, count, K, alpha, A, slab, beta, Y + begin, ldy);
            } else {
                Matrix<T> slab{A.data + begin * A.rs, A.rs, A.cs};
                gemm_slab(kn, path, count, N, K, alpha, slab, B, beta, Y + begin * ldy, ldy);
            }
        }
    }
}

template void gemm<float>(long, long, long, float, Matrix<float>, Matrix<float>, float, float*,
                          std::ptrdiff_t, int);
template void gemm<double>(long, long, long, double, Matrix<double>, Matrix<double>, double,
                           double*, std::ptrdiff_t, int);

double peak_gflops(Isa isa, int bytes, double seconds) {
    using clock = std::chrono::steady_clock;
    auto loop = [&](long iters) {
        switch (isa) {
            case Isa::avx512: return fma_loop_avx512(iters, bytes);
            case Isa::avx2: return fma_loop_avx2(iters, bytes);
            default: return fma_loop_generic(iters, bytes);
        }
    };
    loop(100000);  // warm up the clocks
    long iters = 1 << 20;
    double best = 0.0, spent = 0.0;
    while (spent < seconds) {
        const auto t0 = clock::now();
        const double flops = loop(iters);
        const double dt = std::chrono::duration<double>(clock::now() - t0).count();
        spent += dt;
        if (dt > 0) best = std::max(best, flops / dt / 1e9);
        if (dt < 0.02) iters *= 2;
    }
    return best;
}

}  // namespace d5k
