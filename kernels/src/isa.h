// Instruction-set selection for the micro-kernels: detected once, overridable.
#pragma once

#include <string>
#include <vector>

namespace d5k {

enum class Isa { generic = 0, avx2 = 1, avx512 = 2 };

// Name of an ISA as Python sees it ("generic", "avx2", "avx512").
const char* isa_name(Isa isa);
// Whether this CPU can run micro-kernels of `isa`.
bool isa_supported(Isa isa);
// The ISAs this CPU can run, best last.
std::vector<std::string> available_isas();
// The ISA in use: the best the CPU has, unless D5_KERNELS_ISA or set_isa chose another.
Isa current_isa();
// Choose the ISA by name; throws std::invalid_argument for an unknown or unsupported one.
void set_isa(const std::string& name);

}  // namespace d5k
