"""The TensorFlow glue of d5's C++ custom operators: an op library with its gradient.

The generated library registers two ops (``REGISTER_OP``) under a name of their own,
``D5<Op><hash>`` and ``D5<Op><hash>Grad``, with CPU kernels for float32 and float64
that view TensorFlow's (dense) tensors and call the user's ``forward`` and ``backward``;
every output has input 0's shape, which the shape function says so that the op works
in traced graphs. It is built with ``tf.sysconfig``'s compile and link flags and loaded
with ``tf.load_op_library``, and the gradient op is registered for the forward op with
``tf.RegisterGradient``, so ``tf.GradientTape`` differentiates it, inside
``tf.function`` as well.

TensorFlow's op arguments must be lower-case, so inputs are passed as ``in0``,
``in1``... and attributes as ``attr0``... in the order the source declares them; a
float attribute travels as its shortest exact decimal text (TensorFlow's own float
attributes hold 32 bits), so every framework computes with the same double.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TensorflowCustomOpGlue", "TensorflowKernels"]

_GLUE = r"""
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

#include <cstdlib>
#include <exception>
#include <string>

#include "d5_op.h"
#include "@SOURCE@"

namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;

d5::Tensor view(const ::tensorflow::Tensor& t) {
  d5::Tensor v;
  v.dtype = t.dtype() == ::tensorflow::DT_FLOAT ? d5::DType::float32 : d5::DType::float64;
  for (int i = 0; i < t.dims(); ++i) v.shape.push_back(t.dim_size(i));
  v.strides.assign(v.shape.size(), 1);
  for (int i = t.dims() - 2; i >= 0; --i) v.strides[i] = v.strides[i + 1] * v.shape[i + 1];
  v.data = const_cast<char*>(t.tensor_data().data());
  return v;
}

class Attrs {
 public:
  explicit Attrs(OpKernelConstruction* c) {
@READ_ATTRS@
  }
  d5::Attributes attrs;
};

// Inputs [0, first) are gradients or inputs passed through; outputs are shaped like
// input shape_from + i (forward: all like input 0).
template <bool Backward>
class Kernel : public OpKernel {
 public:
  explicit Kernel(OpKernelConstruction* c) : OpKernel(c), attrs_(c) {}

  void Compute(OpKernelContext* c) override {
    d5::Inputs first, second;
    d5::Outputs made;
    const int outputs = c->num_outputs();
    const int split = Backward ? c->num_inputs() - outputs : c->num_inputs();
    for (int i = 0; i < split; ++i) first.push_back(view(c->input(i)));
    for (int i = split; i < c->num_inputs(); ++i) second.push_back(view(c->input(i)));
    for (int i = 0; i < outputs; ++i) {
      ::tensorflow::Tensor* out = nullptr;
      const ::tensorflow::Tensor& like = c->input(Backward ? split + i : 0);
      OP_REQUIRES_OK(c, c->allocate_output(i, like.shape(), &out));
      if (Backward) std::memset(const_cast<char*>(out->tensor_data().data()), 0, out->TotalBytes());
      made.push_back(view(*out));
    }
    try {
      if (Backward) {
        ::backward(first, second, made, attrs_.attrs);
      } else {
        ::forward(first, made, attrs_.attrs);
      }
    } catch (const std::exception& e) {
      c->CtxFailure(::tensorflow::errors::InvalidArgument(e.what()));
    }
  }

 private:
  Attrs attrs_;
};

}  // namespace

REGISTER_OP("@NAME@")
@INPUTS@@OUTPUTS@    .Attr("T: {float, double}")
@ATTRS@    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("@NAME@Grad")
@GRAD_INPUTS@@INPUTS@@GRAD_OUTPUTS@    .Attr("T: {float, double}")
@ATTRS@    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      const int first = c->num_inputs() - c->num_outputs();
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(first + i));
      return absl::OkStatus();
    });

REGISTER_KERNEL_BUILDER(
    Name("@NAME@").Device(::tensorflow::DEVICE_CPU).TypeConstraint<float>("T"), Kernel<false>);
REGISTER_KERNEL_BUILDER(
    Name("@NAME@").Device(::tensorflow::DEVICE_CPU).TypeConstraint<double>("T"), Kernel<false>);
REGISTER_KERNEL_BUILDER(
    Name("@NAME@Grad").Device(::tensorflow::DEVICE_CPU).TypeConstraint<float>("T"), Kernel<true>);
REGISTER_KERNEL_BUILDER(
    Name("@NAME@Grad").Device(::tensorflow::DEVICE_CPU).TypeConstraint<double>("T"), Kernel<true>);
"""


def op_name(unique: str) -> str:
    """TensorFlow's name of the forward op: ``bias_gelu_1a2b`` -> ``D5BiasGelu1a2b``."""
    return "D5" + "".join(part[:1].upper() + part[1:] for part in unique.split("_"))


def glue_source(spec: Any, source: Path, name: str) -> str:
    """The C++ of the TensorFlow glue of ``spec``, including ``source``."""

    def lines(kind: str, prefix: str, count: int) -> str:
        return "".join(f'    .{kind}("{prefix}{i}: T")\n' for i in range(count))

    reads, attrs = [], []
    for i, a in enumerate(spec.attributes):
        if a.kind == "float":
            attrs.append(f'    .Attr("attr{i}: string")\n')
            reads.append(
                f'    {{ std::string v; OP_REQUIRES_OK(c, c->GetAttr("attr{i}", &v)); '
                f'attrs.set_float("{a.name}", std::strtod(v.c_str(), nullptr)); }}'
            )
        else:
            attrs.append(f'    .Attr("attr{i}: int")\n')
            reads.append(f'    {{ int64_t v = 0; OP_REQUIRES_OK(c, c->GetAttr("attr{i}", &v)); '
                         f'attrs.set_int("{a.name}", v); }}')  # fmt: skip
    n_in, n_out = len(spec.inputs), len(spec.outputs)
    return (
        _GLUE.replace("@SOURCE@", str(source))
        .replace("@READ_ATTRS@", "\n".join(reads))
        .replace("@NAME@", name)
        .replace("@GRAD_INPUTS@", lines("Input", "grad", n_out))
        .replace("@INPUTS@", lines("Input", "in", n_in))
        .replace("@OUTPUTS@", lines("Output", "out", n_out))
        .replace("@GRAD_OUTPUTS@", lines("Output", "grad_in", n_in))
        .replace("@ATTRS@", "".join(attrs))
    )


def _function(library: Any, name: str) -> Any:
    """The Python wrapper ``tf.load_op_library`` made for op ``name``."""
    wanted = name.lower()
    for attr in dir(library):
        if attr.replace("_", "").lower() == wanted:
            return getattr(library, attr)
    raise ImportError(f"the op library has no wrapper for {name}")


def _attribute_values(spec: Any, attributes: Mapping[str, float | int]) -> dict[str, Any]:
    """The ops' ``attr<i>`` arguments for ``attributes``."""
    return {
        f"attr{i}": repr(float(attributes[a.name]))
        if a.kind == "float"
        else int(attributes[a.name])
        for i, a in enumerate(spec.attributes)
    }


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, tuple | list) else [value]


class TensorflowKernels:
    """The loaded op, run in traced graphs (``tf.function``), differentiated by
    ``tf.GradientTape``."""

    device = "cpu"

    def __init__(self, forward_op: Any, spec: Any) -> None:
        self.op = forward_op
        self.spec = spec
        #: Traced graphs by direction and attributes: each is traced once per dtype.
        self._graphs: dict[tuple[str, tuple[Any, ...]], Any] = {}

    def _graph(self, direction: str, attributes: Mapping[str, float | int]) -> Any:
        key = (direction, tuple(sorted(attributes.items())))
        found = self._graphs.get(key)
        if found is None:
            make = self._forward_graph if direction == "forward" else self._backward_graph
            found = self._graphs[key] = make(attributes)
        return found

    def _call(self, tensors: Sequence[Any], attributes: Mapping[str, float | int]) -> list[Any]:
        kwargs = {f"in{i}": t for i, t in enumerate(tensors)}
        return _as_list(self.op(**kwargs, **_attribute_values(self.spec, attributes)))

    def _forward_graph(self, attributes: Mapping[str, float | int]) -> Any:
        from d5_plugin_tensorflow._tf import tensorflow

        tf = tensorflow()
        return tf.function(lambda *xs: self._call(xs, attributes), autograph=False)

    def _backward_graph(self, attributes: Mapping[str, float | int]) -> Any:
        from d5_plugin_tensorflow._tf import tensorflow

        tf = tensorflow()
        count = len(self.spec.inputs)

        def graph(*arrays: Any) -> Any:
            xs, gs = list(arrays[:count]), list(arrays[count:])
            with tf.GradientTape() as tape:
                for x in xs:
                    tape.watch(x)
                outs = self._call(xs, attributes)
            return tape.gradient(outs, xs, output_gradients=gs)

        return tf.function(graph, autograph=False)

    def forward(
        self, inputs: Sequence[np.ndarray], attributes: Mapping[str, float | int]
    ) -> list[np.ndarray]:
        return [t.numpy() for t in self.prepare_forward(inputs, attributes)()]  # type: ignore[attr-defined]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        attributes: Mapping[str, float | int],
    ) -> list[np.ndarray]:
        run = self.prepare_backward(grad_outputs, inputs, attributes)
        return [t.numpy() for t in run()]  # type: ignore[attr-defined]

    def prepare_forward(
        self, inputs: Sequence[np.ndarray], attributes: Mapping[str, float | int]
    ) -> Callable[[], object]:
        from d5_plugin_tensorflow._tf import tensorflow

        tf = tensorflow()
        tensors = [tf.constant(x) for x in inputs]
        # Through the traced concrete function, as the operator backend calls its own:
        # calling the tf.function matches the arguments to a signature on every call.
        concrete = self._graph("forward", attributes).get_concrete_function(*tensors)
        return lambda: concrete(*tensors)

    def prepare_backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        attributes: Mapping[str, float | int],
    ) -> Callable[[], object]:
        from d5_plugin_tensorflow._tf import tensorflow

        tf = tensorflow()
        tensors = [tf.constant(a) for a in [*inputs, *grad_outputs]]
        concrete = self._graph("backward", attributes).get_concrete_function(*tensors)
        return lambda: concrete(*tensors)


def _register_gradient(tf: Any, name: str, grad_op: Any, spec: Any) -> None:
    """Register ``grad_op`` as the gradient of op ``name``."""
    count = len(spec.attributes)

    def gradient(op: Any, *grads: Any) -> list[Any]:
        filled = [
            g if g is not None else tf.zeros_like(y) for g, y in zip(grads, op.outputs, strict=True)
        ]
        kwargs = {f"grad{i}": g for i, g in enumerate(filled)}
        kwargs.update({f"in{i}": x for i, x in enumerate(op.inputs)})
        kwargs.update({f"attr{i}": op.get_attr(f"attr{i}") for i in range(count)})
        return _as_list(grad_op(**kwargs))

    tf.RegisterGradient(name)(gradient)


class TensorflowCustomOpGlue:
    """Builds a custom operator into a TensorFlow op library with its gradient."""

    name = "tensorflow"

    def available(self) -> bool:
        return importlib.util.find_spec("tensorflow") is not None

    def version(self) -> str:
        for distribution in ("tensorflow-cpu", "tensorflow"):
            try:
                return f"{distribution} {importlib.metadata.version(distribution)}"
            except importlib.metadata.PackageNotFoundError:
                continue
        return "tensorflow (version unknown)"

    def build(self, request: Any, workdir: Path) -> Path:
        from d5_plugin_tensorflow._tf import tensorflow

        tf = tensorflow()
        glue = workdir / "tensorflow_glue.cpp"
        glue.write_text(glue_source(request.spec, request.source, op_name(request.unique)))
        artifact = workdir / f"d5op_{request.unique}_tensorflow.so"
        flags = [*tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags()]
        request.compile([glue], artifact, [f for f in flags if not f.startswith("--std")])
        return artifact

    def load(self, artifact: Path, spec: Any) -> TensorflowKernels:
        from d5_plugin_tensorflow._tf import tensorflow

        tf = tensorflow()
        library = tf.load_op_library(str(artifact.resolve()))
        unique = artifact.name[len("d5op_") : -len("_tensorflow.so")]
        name = op_name(unique)
        _register_gradient(tf, name, _function(library, f"{name}Grad"), spec)
        return TensorflowKernels(_function(library, name), spec)
