// The tile kernel of the direct convolution, written once over a vector traits class.
// Included by one source file per ISA, after it defines D5K_CONV_TARGET (the target
// attribute of that ISA); everything here lives in that file's anonymous namespace, so
// the copies built for different ISAs never merge.
#pragma once

#include <utility>

#include "conv_direct.h"

namespace d5k {
namespace {

// acc[r][b] (R pixels x NB vectors) in registers across the whole run of input
// channels; the accumulators are loaded from and stored back to the blocked output.
template <class VT, int S, int R, int NB>
D5K_CONV_TARGET void direct_tile(long nc, const typename VT::T* x, long xcs,
                                 const typename VT::T* w, long wcs, typename VT::T* acc,
                                 long aps) {
    using V = typename VT::V;
    constexpr int L = VT::L;
    V c[R][NB];
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b) c[r][b] = VT::load(acc + r * aps + b * L);
    for (long i = 0; i < nc; ++i) {
        V wv[NB];
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b) wv[b] = VT::load(w + b * L);
#pragma GCC unroll 32
        for (int r = 0; r < R; ++r) {
            // fma_bcast broadcasts x[r * S] in each multiply-add (AVX-512's embedded
            // broadcast: no register) or once into a register (AVX2).
            const auto xv = VT::prepare(x + r * S);
#pragma GCC unroll 4
            for (int b = 0; b < NB; ++b) c[r][b] = VT::fma_bcast(xv, wv[b], c[r][b]);
        }
        x += xcs;
        w += wcs;
    }
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int b = 0; b < NB; ++b) VT::store(acc + r * aps + b * L, c[r][b]);
}

// The kernels direct_tile<VT, S, r, NB> for r = 1 .. sizeof...(Rs), by r; null where
// r * NB accumulators exceed BUDGET (the template argument is then clamped to 1 only so
// that no oversized kernel is instantiated).
template <class VT, int S, int NB, int BUDGET, int... Rs>
struct TileRow {
    static constexpr int count = sizeof...(Rs);
    static constexpr bool fits(int r) { return r * NB <= BUDGET; }
    static DirectTile<typename VT::T> get(int r) {
        static const DirectTile<typename VT::T> row[] = {
            (fits(Rs + 1) ? &direct_tile<VT, S, fits(Rs + 1) ? Rs + 1 : 1, NB> : nullptr)...};
        return r >= 1 && r <= count ? row[r - 1] : nullptr;
    }
};

// The kernel for pixel stride s (1 or 2), nb (1 or 2) vectors and r pixels (Rs: 0 ..
// most - 1); null for anything else.
template <class VT, int BUDGET, int... Rs>
DirectTile<typename VT::T> pick_tile(int s, int nb, int r, std::integer_sequence<int, Rs...>) {
    switch (s * 8 + nb) {
        case 8 + 1: return TileRow<VT, 1, 1, BUDGET, Rs...>::get(r);
        case 8 + 2: return TileRow<VT, 1, 2, BUDGET, Rs...>::get(r);
        case 16 + 1: return TileRow<VT, 2, 1, BUDGET, Rs...>::get(r);
        case 16 + 2: return TileRow<VT, 2, 2, BUDGET, Rs...>::get(r);
        default: return nullptr;
    }
}

}  // namespace
}  // namespace d5k
