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

// The ISAs this CPU runs, comma-separated, for error messages.
std::string supported_list() {
    std::string out;
    for (const std::string& name : available_isas()) out += (out.empty() ? "" : ", ") + name;
    return out;
}

// The ISA an environment variable forces: D5_NATIVE_ISA, or the older name
// D5_KERNELS_ISA (both set: they must agree). Empty or unset: the best the CPU runs.
Isa initial_isa() {
    const char* fresh = std::getenv("D5_NATIVE_ISA");
    const char* older = std::getenv("D5_KERNELS_ISA");
    const bool has_fresh = fresh != nullptr && *fresh != '\0';
    const bool has_older = older != nullptr && *older != '\0';
    if (has_fresh && has_older && std::string(fresh) != older)
        throw std::invalid_argument(std::string("D5_NATIVE_ISA=") + fresh + " and D5_KERNELS_ISA=" +
                                    older + " disagree; unset D5_KERNELS_ISA (the older name)");
    if (!has_fresh && !has_older) return best_isa();
    const std::string variable = has_fresh ? "D5_NATIVE_ISA" : "D5_KERNELS_ISA";
    const std::string value = has_fresh ? fresh : older;
    Isa wanted = Isa::generic;
    try {
        wanted = parse(value);  // a typo in the variable should not pass silently
    } catch (const std::invalid_argument& exc) {
        throw std::invalid_argument(variable + "=" + value + ": " + exc.what());
    }
    if (!isa_supported(wanted))
        throw std::invalid_argument(variable + "=" + value +
                                    " is not supported by this CPU; unset it or choose one of " +
                                    supported_list());
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
