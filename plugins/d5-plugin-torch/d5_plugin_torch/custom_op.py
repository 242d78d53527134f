"""The torch glue of d5's C++ custom operators: a ``TORCH_LIBRARY`` operator with autograd.

The generated library defines two operators in a namespace of their own
(``d5_<op>_<hash>``), ``<op>`` and ``<op>_backward``, each taking the tensors one by one
and the attributes as ``float``/``int`` arguments, with CPU kernels that view the
(contiguous) tensors and call the user's ``forward`` and ``backward``. Loading it
registers the backward with ``torch.library.register_autograd``, so the operator is
differentiable with ``torch.autograd`` like any of torch's own:
``torch.ops.d5_<op>_<hash>.<op>(X, B, scale)``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["TorchCustomOpGlue", "TorchKernels"]

_GLUE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <exception>
#include <tuple>

#include "d5_op.h"
#include "@SOURCE@"

namespace {

d5::Tensor view(const at::Tensor& t) {
  d5::Tensor v;
  v.dtype = t.scalar_type() == at::kFloat ? d5::DType::float32 : d5::DType::float64;
  for (int64_t d : t.sizes()) v.shape.push_back(d);
  for (int64_t s : t.strides()) v.strides.push_back(s);
  v.data = t.data_ptr();
  return v;
}

at::Tensor ready(const at::Tensor& t, const at::Tensor& first, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble,
              "@OP@: ", name, " must be float32 or float64");
  TORCH_CHECK(t.scalar_type() == first.scalar_type(), "@OP@: ", name,
              " must have the dtype of the first input");
  return t.contiguous();
}

}  // namespace

@FORWARD@

@BACKWARD@

TORCH_LIBRARY(@NAMESPACE@, m) {
  m.def("@FORWARD_SCHEMA@");
  m.def("@BACKWARD_SCHEMA@");
}

TORCH_LIBRARY_IMPL(@NAMESPACE@, CPU, m) {
  m.impl("@OP@", &d5_forward);
  m.impl("@OP@_backward", &d5_backward);
}
"""


def _returns(count: int) -> tuple[str, str, str]:
    """The C++ return type, the schema's return and the C++ return statement's wrapper
    for ``count`` tensors."""
    if count == 1:
        return "at::Tensor", "Tensor", "{0}"
    return (
        f"std::tuple<{', '.join(['at::Tensor'] * count)}>",
        f"({', '.join(['Tensor'] * count)})",
        "std::make_tuple({0})",
    )


def _attribute_parts(spec: Any) -> tuple[list[str], list[str], list[str]]:
    """The attributes' C++ parameters, schema arguments and ``attrs`` setters."""
    params, schema, setters = [], [], []
    for a in spec.attributes:
        cpp, kind, setter = ("double", "float", "set_float") if a.kind == "float" else (
            "int64_t", "int", "set_int")  # fmt: skip
        params.append(f"{cpp} {a.name}")
        schema.append(f"{kind} {a.name}")
        setters.append(f'attrs.{setter}("{a.name}", {a.name});')
    return params, schema, setters


def _function(
    name: str,
    tensors: Sequence[str],
    made: Sequence[str],
    like: Sequence[str],
    zero: bool,
    call: str,
    spec: Any,
) -> tuple[str, str]:
    """A kernel's C++ function and its schema: ``tensors`` in, ``made`` allocated shaped
    like ``like`` and returned, the user's ``call``."""
    params, schema_attrs, setters = _attribute_parts(spec)
    ret_cpp, ret_schema, wrap = _returns(len(made))
    args = [f"const at::Tensor& {t}_in" for t in tensors] + params
    first = f"{tensors[0]}_in"
    body = [f'at::Tensor {t} = ready({t}_in, {first}, "{t}");' for t in tensors]
    body.append("d5::Attributes attrs;")
    body += setters
    alloc = "at::zeros_like" if zero else "at::empty_like"
    body += [f"at::Tensor {m} = {alloc}({src}, at::MemoryFormat::Contiguous);"
             for m, src in zip(made, like, strict=True)]  # fmt: skip
    body.append(f"d5::Outputs made{{{', '.join(f'view({m})' for m in made)}}};")
    body.append("try {")
    body.append(f"  {call}")
    body.append("} catch (const std::exception& e) { TORCH_CHECK(false, e.what()); }")
    body.append(f"return {wrap.format(', '.join(made))};")
    cpp = f"{ret_cpp} {name}({', '.join(args)}) {{\n  " + "\n  ".join(body) + "\n}"
    schema_args = ", ".join([f"Tensor {t}" for t in tensors] + schema_attrs)
    return cpp, f"({schema_args}) -> {ret_schema}"


def glue_source(spec: Any, source: Path, namespace: str) -> str:
    """The C++ of the torch glue of ``spec``, including ``source``."""
    inputs, outputs = list(spec.inputs), list(spec.outputs)
    grads_out = [f"grad_{o}" for o in outputs]
    forward, forward_schema = _function(
        "d5_forward", inputs, [f"out_{o}" for o in outputs], [inputs[0]] * len(outputs), False,
        f"::forward(d5::Inputs{{{', '.join(f'view({t})' for t in inputs)}}}, made, attrs);",
        spec,
    )  # fmt: skip
    backward, backward_schema = _function(
        "d5_backward", grads_out + inputs, [f"grad_{i}" for i in inputs], inputs, True,
        f"::backward(d5::Inputs{{{', '.join(f'view({t})' for t in grads_out)}}}, "
        f"d5::Inputs{{{', '.join(f'view({t})' for t in inputs)}}}, made, attrs);",
        spec,
    )  # fmt: skip
    return (
        _GLUE.replace("@SOURCE@", str(source))
        .replace("@FORWARD@", forward)
        .replace("@BACKWARD@", backward)
        .replace("@FORWARD_SCHEMA@", f"{spec.name}{forward_schema}")
        .replace("@BACKWARD_SCHEMA@", f"{spec.name}_backward{backward_schema}")
        .replace("@NAMESPACE@", namespace)
        .replace("@OP@", spec.name)
    )


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, tuple | list) else (value,)


class TorchKernels:
    """The loaded operator, called through torch (its autograd for the backward)."""

    device = "cpu"

    def __init__(self, op: Any, spec: Any) -> None:
        self.op = op
        self.spec = spec

    def _values(self, attributes: Mapping[str, float | int]) -> list[float | int]:
        return [attributes[a.name] for a in self.spec.attributes]

    def forward(
        self, inputs: Sequence[np.ndarray], attributes: Mapping[str, float | int]
    ) -> list[np.ndarray]:
        import torch

        with torch.no_grad():
            outs = self.op(*[torch.from_numpy(x) for x in inputs], *self._values(attributes))
        return [t.numpy() for t in _as_tuple(outs)]

    def _graph(
        self, inputs: Sequence[np.ndarray], attributes: Mapping[str, float | int]
    ) -> tuple[list[Any], tuple[Any, ...]]:
        import torch

        tensors = [torch.from_numpy(x.copy()).requires_grad_(True) for x in inputs]
        return tensors, _as_tuple(self.op(*tensors, *self._values(attributes)))

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        attributes: Mapping[str, float | int],
    ) -> list[np.ndarray]:
        import torch

        tensors, outs = self._graph(inputs, attributes)
        grads = torch.autograd.grad(outs, tensors, [torch.from_numpy(g) for g in grad_outputs])
        return [g.detach().numpy() for g in grads]

    def prepare_forward(
        self, inputs: Sequence[np.ndarray], attributes: Mapping[str, float | int]
    ) -> Callable[[], object]:
        import torch

        tensors = [torch.from_numpy(x) for x in inputs]
        values, op = self._values(attributes), self.op

        def run() -> object:
            with torch.no_grad():
                return op(*tensors, *values)

        return run

    def prepare_backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        attributes: Mapping[str, float | int],
    ) -> Callable[[], object]:
        import torch

        tensors, outs = self._graph(inputs, attributes)
        grads = [torch.from_numpy(g) for g in grad_outputs]
        return lambda: torch.autograd.grad(outs, tensors, grads, retain_graph=True)


def _register_autograd(namespace: str, spec: Any) -> None:
    """Make ``namespace::<op>`` differentiable through ``<op>_backward``."""
    import torch

    ops = getattr(torch.ops, namespace)
    backward_op = getattr(ops, f"{spec.name}_backward")
    count = len(spec.inputs)
    attributes = len(spec.attributes)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs[:count])
        ctx.d5_attributes = inputs[count:]

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        saved = ctx.saved_tensors
        filled = [g if g is not None else torch.zeros_like(saved[0]) for g in grads]
        found = _as_tuple(backward_op(*filled, *saved, *ctx.d5_attributes))
        return (*found, *([None] * attributes))

    torch.library.register_autograd(f"{namespace}::{spec.name}", backward,
                                    setup_context=setup_context)  # fmt: skip


class TorchCustomOpGlue:
    """Builds a custom operator into a ``TORCH_LIBRARY`` with autograd."""

    name = "torch"

    def available(self) -> bool:
        return importlib.util.find_spec("torch") is not None

    def version(self) -> str:
        return f"torch {importlib.metadata.version('torch')}"

    def build(self, request: Any, workdir: Path) -> Path:
        import torch
        from torch.utils import cpp_extension

        glue = workdir / "torch_glue.cpp"
        glue.write_text(glue_source(request.spec, request.source, f"d5_{request.unique}"))
        libs = cpp_extension.library_paths()
        flags = [f"-I{p}" for p in cpp_extension.include_paths()]
        flags += [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
        flags += [f"-L{p}" for p in libs] + [f"-Wl,-rpath,{p}" for p in libs]
        flags += ["-lc10", "-ltorch_cpu", "-ltorch"]
        artifact = workdir / f"d5op_{request.unique}_torch.so"
        request.compile([glue], artifact, flags)
        return artifact

    def load(self, artifact: Path, spec: Any) -> TorchKernels:
        import torch

        torch.ops.load_library(str(artifact))  # type: ignore[no-untyped-call]
        namespace = "d5_" + artifact.name[len("d5op_") : -len("_torch.so")]
        _register_autograd(namespace, spec)
        return TorchKernels(getattr(getattr(torch.ops, namespace), spec.name), spec)
