// A fused bias + GELU: Y = scale * gelu(X + B), B added along X's last axis.
// Build it for every installed framework with `d5 op build examples/custom_ops/bias_gelu.cpp`.
#include <d5_op.h>

#include <cmath>

D5_OP_NAME("bias_gelu");
D5_OP_INPUTS("X", "B");
D5_OP_OUTPUTS("Y");
D5_OP_FLOAT_ATTR("scale", 1.0);
D5_OP_SHAPES("32x64", "64");

namespace {

// X's rows and columns, after checking that B has one value per column.
void check_shapes(const d5::Tensor& x, const d5::Tensor& b, std::int64_t* rows, std::int64_t* cols) {
  d5::check(x.rank() >= 1, "bias_gelu: X must have at least one axis");
  *cols = x.shape.back();
  d5::check(b.rank() == 1 && b.shape[0] == *cols,
            "bias_gelu: B must be a vector as long as X's last axis");
  *rows = x.size() / *cols;
}

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

}  // namespace

void forward(const d5::Inputs& in, d5::Outputs& out, const d5::Attributes& attrs) {
  std::int64_t rows = 0, cols = 0;
  check_shapes(in[0], in[1], &rows, &cols);
  const double scale = attrs.f("scale");
  d5::dispatch(in[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* x = in[0].ptr<T>();
    const T* b = in[1].ptr<T>();
    T* y = out[0].ptr<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const double z = static_cast<double>(x[r * cols + c]) + b[c];
        y[r * cols + c] = static_cast<T>(scale * 0.5 * z * (1.0 + std::erf(z * kInvSqrt2)));
      }
    }
  });
}

void backward(const d5::Inputs& grad_out, const d5::Inputs& in, d5::Outputs& grad_in,
              const d5::Attributes& attrs) {
  std::int64_t rows = 0, cols = 0;
  check_shapes(in[0], in[1], &rows, &cols);
  const double scale = attrs.f("scale");
  d5::dispatch(in[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* gy = grad_out[0].ptr<T>();
    const T* x = in[0].ptr<T>();
    const T* b = in[1].ptr<T>();
    T* gx = grad_in[0].ptr<T>();
    T* gb = grad_in[1].ptr<T>();  // zero-filled by d5
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const double z = static_cast<double>(x[r * cols + c]) + b[c];
        // d/dz [z * Phi(z)] = Phi(z) + z * phi(z)
        const double dgelu = 0.5 * (1.0 + std::erf(z * kInvSqrt2)) +
                             z * kInvSqrt2Pi * std::exp(-0.5 * z * z);
        const double g = scale * gy[r * cols + c] * dgelu;
        gx[r * cols + c] = static_cast<T>(g);
        gb[c] += static_cast<T>(g);
      }
    }
  });
}
