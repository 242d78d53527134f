// d5_op.h: the one header a d5 C++ custom operator includes.
//
// A custom operator is one .cpp file that declares the operator and defines two
// functions; d5 compiles it, with the glue each framework needs, into numpy (pybind11),
// torch (TORCH_LIBRARY with autograd) and TensorFlow (REGISTER_OP, a CPU kernel and its
// gradient), so the same code runs and is validated and benchmarked in every framework:
//
//     #include <d5_op.h>
//
//     D5_OP_NAME("scaled_relu");        // [a-z][a-z0-9_]*
//     D5_OP_INPUTS("X");                // input names, in order (at least one)
//     D5_OP_OUTPUTS("Y");               // output names; every output has input 0's shape
//     D5_OP_FLOAT_ATTR("alpha", 0.5);   // an attribute: name and default (, low, high)
//     D5_OP_SHAPES("64x256");           // default input shapes for validate and bench
//
//     void forward(const d5::Inputs& in, d5::Outputs& out, const d5::Attributes& attrs);
//     void backward(const d5::Inputs& grad_out, const d5::Inputs& in,
//                   d5::Outputs& grad_in, const d5::Attributes& attrs);
//
// The declarations are read by d5 from the source text, one per line, with literal
// arguments only (strings in double quotes, plain numbers). D5_OP_INT_ATTR declares an
// integer attribute the same way.
//
// The contract:
// - Every tensor is float32 or float64; all inputs and outputs of one call share the
//   dtype. d5 hands over C-contiguous tensors (strides are given anyway, in elements).
// - forward writes every output; d5 allocates them with input 0's shape and dtype.
// - backward receives one gradient per output (shaped like it) and writes one gradient
//   per input, shaped like that input; d5 allocates them zero-filled.
// - Report bad input (a shape the operator cannot take) by throwing d5::Error: each
//   framework raises it as its own error, with the message.
// - The functions must be deterministic and keep no state between calls.
#ifndef D5_OP_H
#define D5_OP_H

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// The declarations: checked by the compiler for their form, read by d5 for their values.
#define D5_OP_NAME(name) static_assert(::d5::detail::names(name) == 1, "D5_OP_NAME: one name")
#define D5_OP_INPUTS(...) static_assert(::d5::detail::names(__VA_ARGS__) > 0, "D5_OP_INPUTS")
#define D5_OP_OUTPUTS(...) static_assert(::d5::detail::names(__VA_ARGS__) > 0, "D5_OP_OUTPUTS")
// An attribute: its name and default, optionally followed by the range of its values
// (low, high), from which validation draws more values.
#define D5_OP_FLOAT_ATTR(name, ...) \
  static_assert(sizeof(name) > 1 && ::d5::detail::values<double>(__VA_ARGS__), "D5_OP_FLOAT_ATTR")
#define D5_OP_INT_ATTR(name, ...) \
  static_assert(sizeof(name) > 1 && ::d5::detail::values<std::int64_t>(__VA_ARGS__), \
                "D5_OP_INT_ATTR")
#define D5_OP_SHAPES(...) static_assert(::d5::detail::names(__VA_ARGS__) > 0, "D5_OP_SHAPES")

namespace d5 {

namespace detail {
// Whether an attribute's numbers are a default, or a default, low and high, each of type
// T without narrowing.
template <typename T, typename... V>
constexpr bool values(V...) {
  static_assert((std::is_arithmetic<V>::value && ...), "attribute values are numbers");
  static_assert(((std::is_integral<V>::value || std::is_floating_point<T>::value) && ...),
                "an int attribute's values are whole numbers");
  return sizeof...(V) == 1 || sizeof...(V) == 3;
}
// How many string literals a declaration lists (any other argument does not compile).
template <typename... S>
constexpr int names(const S&... s) {
  static_assert((std::is_same<S, std::remove_cv_t<S>>::value && ...), "strings only");
  return static_cast<int>(sizeof...(s));
}
}  // namespace detail

// What a custom operator throws for input it cannot take.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DType { float32, float64 };

inline const char* dtype_name(DType t) { return t == DType::float32 ? "float32" : "float64"; }

// A view of one tensor owned by the framework: nothing is copied or freed.
struct Tensor {
  DType dtype = DType::float32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements
  void* data = nullptr;

  int rank() const { return static_cast<int>(shape.size()); }

  std::int64_t size() const {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
  }

  // The elements as T (float or double); throws d5::Error if the dtype differs.
  template <typename T>
  T* ptr() const {
    constexpr DType want = sizeof(T) == 4 ? DType::float32 : DType::float64;
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "d5::Tensor::ptr<float|double>");
    if (dtype != want) {
      throw Error(std::string("tensor is ") + dtype_name(dtype) + ", not " + dtype_name(want));
    }
    return static_cast<T*>(data);
  }
};

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;

// The operator's attributes by name: every declared one, given or defaulted.
class Attributes {
 public:
  void set_float(const std::string& name, double v) { floats_.emplace_back(name, v); }
  void set_int(const std::string& name, std::int64_t v) { ints_.emplace_back(name, v); }

  double f(const std::string& name) const {
    for (const auto& kv : floats_)
      if (kv.first == name) return kv.second;
    throw Error("no float attribute '" + name + "'; declare it with D5_OP_FLOAT_ATTR");
  }

  std::int64_t i(const std::string& name) const {
    for (const auto& kv : ints_)
      if (kv.first == name) return kv.second;
    throw Error("no int attribute '" + name + "'; declare it with D5_OP_INT_ATTR");
  }

 private:
  std::vector<std::pair<std::string, double>> floats_;
  std::vector<std::pair<std::string, std::int64_t>> ints_;
};

// Calls fn(float{}) or fn(double{}) for dtype t: write a kernel once, as a template.
template <typename Fn>
void dispatch(DType t, Fn&& fn) {
  if (t == DType::float32) {
    fn(float{});
  } else {
    fn(double{});
  }
}

// Throws d5::Error(message) unless ok.
inline void check(bool ok, const std::string& message) {
  if (!ok) throw Error(message);
}

}  // namespace d5

// The two functions the operator's file defines. They are hidden, so that several
// custom operators loaded into one process never resolve to each other's functions.
__attribute__((visibility("hidden"))) void forward(const d5::Inputs& inputs,
                                                   d5::Outputs& outputs,
                                                   const d5::Attributes& attrs);
__attribute__((visibility("hidden"))) void backward(const d5::Inputs& grad_outputs,
                                                    const d5::Inputs& inputs,
                                                    d5::Outputs& grad_inputs,
                                                    const d5::Attributes& attrs);

#endif  // D5_OP_H
