"""The MXNet glue of d5's C++ custom operators: an external operator library.

MXNet 1.9 loads operators from a shared library at run time (``mx.library.load``): the
library is compiled from ``lib_api.h`` and ``lib_api.cc``, both shipped in the wheel,
and registers its operators with ``REGISTER_OP``. The generated glue registers one
operator, ``d5_<op>_<hash>``, with

- a shape function (every output shaped like input 0) and a type function (every input
  float32 or float64, one dtype for all; every output of that dtype);
- a CPU forward that views MXNet's dense tensors and calls the user's ``forward``;
- a CPU backward that calls the user's ``backward``: MXNet hands it the output
  gradients, then the inputs, then the outputs, and it writes the input gradients
  (zero-filled first, as d5's contract says).

MXNet then makes ``mx.nd.d5_<op>_<hash>`` (and ``mx.sym``), differentiable with
``mx.autograd``. Attributes travel as strings (MXNet's only kind) named ``attr0``,
``attr1``... in declaration order, so that no name of the user's can clash with an
argument of MXNet's own (``out``, ``name``); a float travels as its shortest exact
decimal text, so the C++ computes with the same double as in every other framework.

MXNet runs operators asynchronously: the kernels are marked ``asynchronous``, their
prepared calls only queue work, and results reach numpy through ``asnumpy`` (which
waits). An error the C++ throws surfaces there, as MXNet's error with its message.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from numpy.typing import NDArray

from d5core.api import UsageError

__all__ = [
    "CustomOpError",
    "MXNetCustomOpGlue",
    "MXNetKernels",
    "glue_source",
    "library_api",
    "op_name",
    "package_dir",
    "reported",
]

_GLUE = r"""
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <unordered_map>
#include <vector>

#include "mxnet/lib_api.h"

#include "d5_op.h"
#include "@SOURCE@"

namespace {

using ::mxnet::ext::MXReturnValue;
using ::mxnet::ext::MXTensor;
using ::mxnet::ext::OpResource;
using Attrs = std::unordered_map<std::string, std::string>;

constexpr int kInputs = @N_IN@;
constexpr int kOutputs = @N_OUT@;
const char* const kOp = "@OP@";

d5::Tensor view(const MXTensor& t) {
  d5::Tensor v;
  v.dtype = t.dtype == ::mxnet::ext::kFloat32 ? d5::DType::float32 : d5::DType::float64;
  v.shape = t.shape;
  v.strides.assign(v.shape.size(), 1);
  for (int i = static_cast<int>(v.shape.size()) - 2; i >= 0; --i) {
    v.strides[i] = v.strides[i + 1] * v.shape[i + 1];
  }
  v.data = t.data_ptr;
  return v;
}

// The attribute's text, else its declared default.
const char* text(const Attrs& given, const char* key, const char* fallback) {
  auto found = given.find(key);
  return found == given.end() ? fallback : found->second.c_str();
}

d5::Attributes attributes(const Attrs& given) {
  d5::Attributes attrs;
@READ_ATTRS@
  return attrs;
}

MXReturnValue parse_attrs(const Attrs&, int* num_inputs, int* num_outputs) {
  *num_inputs = kInputs;
  *num_outputs = kOutputs;
  return ::mxnet::ext::MX_SUCCESS;
}

MXReturnValue infer_type(const Attrs&, std::vector<int>* in_types,
                         std::vector<int>* out_types) {
  const int first = in_types->at(0);
  for (int t : *in_types) {
    if (t != first || (t != ::mxnet::ext::kFloat32 && t != ::mxnet::ext::kFloat64)) {
      MX_ERROR_MSG << kOp << ": every input must be float32 or float64, all of one dtype";
      return ::mxnet::ext::MX_FAIL;
    }
  }
  for (auto& t : *out_types) t = first;
  return ::mxnet::ext::MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs&, std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  for (auto& s : *out_shapes) s = in_shapes->at(0);
  return ::mxnet::ext::MX_SUCCESS;
}

MXReturnValue run_forward(const Attrs& given, std::vector<MXTensor>* inputs,
                          std::vector<MXTensor>* outputs, const OpResource&) {
  try {
    d5::Inputs in;
    d5::Outputs out;
    for (const auto& t : *inputs) in.push_back(view(t));
    for (const auto& t : *outputs) out.push_back(view(t));
    ::forward(in, out, attributes(given));
  } catch (const std::exception& e) {
    MX_ERROR_MSG << e.what();
    return ::mxnet::ext::MX_FAIL;
  }
  return ::mxnet::ext::MX_SUCCESS;
}

// MXNet's backward inputs: the output gradients, the inputs, then the outputs.
MXReturnValue run_backward(const Attrs& given, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource&) {
  try {
    d5::Inputs grads, in;
    d5::Outputs made;
    for (int i = 0; i < kOutputs; ++i) grads.push_back(view(inputs->at(i)));
    for (int i = 0; i < kInputs; ++i) in.push_back(view(inputs->at(kOutputs + i)));
    for (auto& t : *outputs) {
      const std::size_t bytes = t.dtype == ::mxnet::ext::kFloat32 ? 4 : 8;
      std::memset(t.data_ptr, 0, static_cast<std::size_t>(t.size()) * bytes);
      made.push_back(view(t));
    }
    ::backward(grads, in, made, attributes(given));
  } catch (const std::exception& e) {
    MX_ERROR_MSG << e.what();
    return ::mxnet::ext::MX_FAIL;
  }
  return ::mxnet::ext::MX_SUCCESS;
}

}  // namespace

REGISTER_OP(@OP@)
    .setParseAttrs(parse_attrs)
    .setInferType(infer_type)
    .setInferShape(infer_shape)
    .setForward(run_forward, "cpu")
    .setBackward(run_backward, "cpu");

// MXNet calls this once when it loads the library, with its version (10901 for 1.9.1).
MXReturnValue initialize(int version) {
  if (version < 10700) {
    MX_ERROR_MSG << "d5 custom operators need MXNet 1.7 or later, not " << version;
    return ::mxnet::ext::MX_FAIL;
  }
  return ::mxnet::ext::MX_SUCCESS;
}
"""


#: A numpy array of any dtype (numpy 1.23's ``ndarray`` needs its type arguments).
Array = NDArray[Any]


def op_name(unique: str) -> str:
    """MXNet's name of the operator: ``bias_gelu_1a2b`` -> ``d5_bias_gelu_1a2b``."""
    return f"d5_{unique}"


def _c_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def glue_source(spec: Any, source: Path, name: str) -> str:
    """The C++ of the MXNet glue of ``spec``, including ``source``, registering ``name``."""
    reads = []
    for i, a in enumerate(spec.attributes):
        if a.kind == "float":
            default, setter, parse = repr(float(a.default)), "set_float", "std::strtod"
            call = f'{parse}(text(given, "attr{i}", "{default}"), nullptr)'
        else:
            default, setter = str(int(a.default)), "set_int"
            call = f'std::strtoll(text(given, "attr{i}", "{default}"), nullptr, 10)'
        reads.append(f"  attrs.{setter}({_c_string(a.name)}, {call});")
    return (
        _GLUE.replace("@SOURCE@", str(source))
        .replace("@READ_ATTRS@", "\n".join(reads))
        .replace("@N_IN@", str(len(spec.inputs)))
        .replace("@N_OUT@", str(len(spec.outputs)))
        .replace("@OP@", name)
    )


def attribute_values(spec: Any, attributes: Mapping[str, float | int]) -> dict[str, str]:
    """The operator's ``attr<i>`` keyword arguments for ``attributes``, as text."""
    return {
        f"attr{i}": repr(float(attributes[a.name]))
        if a.kind == "float"
        else str(int(attributes[a.name]))
        for i, a in enumerate(spec.attributes)
    }


_EXTENSION = "Extension Traceback:"
#: One frame of MXNet's extension traceback: ``[0] /path/glue.cpp[83]: ``.
_FRAME = re.compile(r"\s*\[\d+\]\s+\S+\[\d+\]:\s*")


class CustomOpError(RuntimeError):
    """What the operator's C++ reported (a ``d5::Error``), without MXNet's traceback."""


def reported(message: str) -> str:
    """The operator's own first message inside an ``MXNetError``'s text (the first
    frame of MXNet's ``Extension Traceback``), else the whole text on one line."""
    _, found, rest = message.partition(_EXTENSION)
    if found:
        first = next((part for part in _FRAME.split(rest) if part.strip()), "")
        if first:
            return " ".join(first.split())
    return " ".join(message.split())


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, tuple | list) else [value]


def _mx() -> Any:
    from d5_plugin_mxnet._mx import mxnet

    return mxnet()


class MXNetKernels:
    """The loaded operator on ``mx.nd`` arrays, differentiated by ``mx.autograd``."""

    device = "cpu"
    #: MXNet's engine queues the work: a prepared call returns before it is done.
    asynchronous = True

    def __init__(self, op: Any, spec: Any) -> None:
        #: The operator's ``mx.nd`` function: ``op(X, B, attr0="0.5")``.
        self.op = op
        self.spec = spec

    def _arrays(self, arrays: Sequence[Array]) -> list[Any]:
        mx = _mx()
        return [mx.nd.array(a, dtype=a.dtype) for a in arrays]

    def _run(self, tensors: Sequence[Any], attributes: Mapping[str, float | int]) -> list[Any]:
        return _as_list(self.op(*tensors, **attribute_values(self.spec, attributes)))

    def _recorded(
        self, inputs: Sequence[Array], attributes: Mapping[str, float | int]
    ) -> tuple[list[Any], list[Any]]:
        """The inputs (with gradient buffers) and the outputs of one recorded forward."""
        mx = _mx()
        tensors = self._arrays(inputs)
        for t in tensors:
            t.attach_grad()
        with mx.autograd.record():
            outs = self._run(tensors, attributes)
        return tensors, outs

    def _numpy(self, arrays: Callable[[], list[Any]]) -> list[Array]:
        """``arrays()`` as numpy (waiting for them), with the C++'s error message."""
        mx = _mx()
        try:
            return [t.asnumpy() for t in arrays()]
        except mx.base.MXNetError as exc:
            raise CustomOpError(reported(str(exc))) from None

    def forward(
        self, inputs: Sequence[Array], attributes: Mapping[str, float | int]
    ) -> list[Array]:
        return self._numpy(lambda: self._run(self._arrays(inputs), attributes))

    def backward(
        self,
        grad_outputs: Sequence[Array],
        inputs: Sequence[Array],
        attributes: Mapping[str, float | int],
    ) -> list[Array]:
        mx = _mx()

        def grads() -> list[Any]:
            tensors, outs = self._recorded(inputs, attributes)
            mx.autograd.backward(outs, head_grads=self._arrays(grad_outputs))
            return [t.grad for t in tensors]

        return self._numpy(grads)

    def prepare_forward(
        self, inputs: Sequence[Array], attributes: Mapping[str, float | int]
    ) -> Callable[[], object]:
        tensors = self._arrays(inputs)
        kwargs = attribute_values(self.spec, attributes)
        op = self.op
        return lambda: op(*tensors, **kwargs)

    def prepare_backward(
        self,
        grad_outputs: Sequence[Array],
        inputs: Sequence[Array],
        attributes: Mapping[str, float | int],
    ) -> Callable[[], object]:
        mx = _mx()
        tensors, outs = self._recorded(inputs, attributes)
        heads = self._arrays(grad_outputs)
        backward = mx.autograd.backward

        def run() -> object:
            backward(outs, head_grads=heads, retain_graph=True)
            return [t.grad for t in tensors]

        return run


def package_dir() -> Path:
    """The installed ``mxnet`` package's folder (found without importing it).

    :raises UsageError: when mxnet is not installed.
    """
    found = importlib.util.find_spec("mxnet")
    locations = list(found.submodule_search_locations or []) if found is not None else []
    if not locations:
        raise UsageError("mxnet is not installed here; pip install mxnet==1.9.1 numpy==1.23.5")
    return Path(locations[0])


def library_api(package: Path) -> tuple[Path, Path]:
    """The wheel's ``include`` folder and its ``src/lib_api.cc``.

    :raises UsageError: when the wheel lacks them (an MXNet before 1.7).
    """
    include, source = package / "include", package / "src" / "lib_api.cc"
    if not (include / "mxnet" / "lib_api.h").is_file() or not source.is_file():
        raise UsageError(
            f"mxnet at {package} ships no include/mxnet/lib_api.h and src/lib_api.cc; "
            f"custom operators need mxnet 1.9.1 (pip install mxnet==1.9.1 numpy==1.23.5)"
        )
    return include, source


class MXNetCustomOpGlue:
    """Builds a custom operator into an MXNet external operator library."""

    name = "mxnet"

    def available(self) -> bool:
        from d5_plugin_mxnet._mx import numpy_problem

        return importlib.util.find_spec("mxnet") is not None and numpy_problem() is None

    def version(self) -> str:
        return f"mxnet {importlib.metadata.version('mxnet')}"

    def build(self, request: Any, workdir: Path) -> Path:
        include, lib_api = library_api(package_dir())
        glue = workdir / "mxnet_glue.cpp"
        glue.write_text(glue_source(request.spec, request.source, op_name(request.unique)))
        artifact = workdir / f"d5op_{request.unique}_mxnet.so"
        request.compile([glue, lib_api], artifact, [f"-I{include}"])
        return artifact

    def load(self, artifact: Path, spec: Any) -> MXNetKernels:
        mx = _mx()
        mx.library.load(str(artifact.resolve()), verbose=False)
        unique = artifact.name[len("d5op_") : -len("_mxnet.so")]
        return MXNetKernels(getattr(mx.nd, op_name(unique)), spec)
