// Run-time ISA detection: the wheel is built for baseline x86-64 and each micro-kernel
// carries its own target attribute, so the choice is made here, once per process (or
// when a caller forces one, to test every path).
#include "isa.h"

#include <cstdlib>
#include <stdexcept>

namespace d5k {

namespace {

Isa best_isa() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
        return Isa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
#endif
    return Isa::generic;
}

Isa parse(const std::string& name) {
    if (name == "generic") return Isa::generic;
    if (name == "avx2") return Isa::avx2;
    if (name == "avx512") return Isa::avx512;
    throw std::invalid_argument("unknown ISA '" + name + "'; choose generic, avx2 or avx512");
}

Isa initial_isa() {
    const char* env = std::getenv("D5_KERNELS_ISA");
    if (env == nullptr || *env == '\0') return best_isa();
    Isa wanted = Isa::generic;
    try {
        wanted = parse(env);  // a typo in the variable should not pass silently
    } catch (const std::invalid_argument& exc) {
        throw std::invalid_argument(std::string("D5_KERNELS_ISA=") + env + ": " + exc.what());
    }
    if (!isa_supported(wanted))
        throw std::invalid_argument(std::string("D5_KERNELS_ISA=") + env +
                                    " is not supported by this CPU");
    return wanted;
}

Isa& selected() {
    static Isa isa = initial_isa();
    return isa;
}

}  // namespace

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::avx512: return "avx512";
        case Isa::avx2: return "avx2";
        default: return "generic";
    }
}

bool isa_supported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(best_isa()); }

std::vector<std::string> available_isas() {
    std::vector<std::string> out;
    for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512})
        if (isa_supported(isa)) out.emplace_back(isa_name(isa));
    return out;
}

Isa current_isa() { return selected(); }

void set_isa(const std::string& name) {
    Isa wanted = parse(name);
    if (!isa_supported(wanted))
        throw std::invalid_argument("ISA '" + name + "' is not supported by this CPU");
    selected() = wanted;
}

}  // namespace d5k
