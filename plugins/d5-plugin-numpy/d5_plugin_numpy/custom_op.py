"""The numpy glue of d5's C++ custom operators: a pybind11 module taking numpy arrays.

``d5 op build`` hands this glue the user's source; it generates a pybind11 module that
includes it, with two functions, ``forward(inputs, floats, ints)`` and
``backward(grad_outputs, inputs, floats, ints)``, which view the arrays (no copy), call
the user's functions with the GIL released and return new arrays. The numpy build is
the one the other frameworks' builds are validated against.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import sysconfig
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from d5core.api import UsageError

__all__ = ["NumpyCustomOpGlue", "NumpyKernels"]

_GLUE = r"""
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "d5_op.h"
#include "@SOURCE@"

namespace py = pybind11;

namespace {

d5::Tensor view(const py::array& a) {
  d5::Tensor t;
  t.dtype = a.itemsize() == 4 ? d5::DType::float32 : d5::DType::float64;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    t.shape.push_back(a.shape(i));
    t.strides.push_back(a.strides(i) / a.itemsize());
  }
  t.data = const_cast<void*>(a.data());
  return t;
}

d5::Attributes attributes(const py::dict& floats, const py::dict& ints) {
  d5::Attributes attrs;
  for (auto item : floats) {
    attrs.set_float(item.first.cast<std::string>(), item.second.cast<double>());
  }
  for (auto item : ints) {
    attrs.set_int(item.first.cast<std::string>(), item.second.cast<std::int64_t>());
  }
  return attrs;
}

std::vector<py::array> allocate(const py::array& like, std::size_t count, bool zero) {
  std::vector<py::array> made;
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<py::ssize_t> shape(like.shape(), like.shape() + like.ndim());
    py::array a(like.dtype(), shape);
    if (zero) std::memset(a.mutable_data(), 0, static_cast<std::size_t>(a.nbytes()));
    made.push_back(a);
  }
  return made;
}

std::vector<py::array> run_forward(const std::vector<py::array>& inputs, const py::dict& floats,
                                   const py::dict& ints) {
  d5::Attributes attrs = attributes(floats, ints);
  std::vector<py::array> outputs = allocate(inputs.at(0), @OUTPUTS@, false);
  d5::Inputs in;
  d5::Outputs out;
  for (const auto& a : inputs) in.push_back(view(a));
  for (const auto& a : outputs) out.push_back(view(a));
  {
    py::gil_scoped_release unlocked;
    ::forward(in, out, attrs);
  }
  return outputs;
}

std::vector<py::array> run_backward(const std::vector<py::array>& grad_outputs,
                                    const std::vector<py::array>& inputs, const py::dict& floats,
                                    const py::dict& ints) {
  d5::Attributes attrs = attributes(floats, ints);
  std::vector<py::array> grads;
  for (const auto& x : inputs) grads.push_back(allocate(x, 1, true)[0]);
  d5::Inputs gout, in;
  d5::Outputs gin;
  for (const auto& a : grad_outputs) gout.push_back(view(a));
  for (const auto& a : inputs) in.push_back(view(a));
  for (const auto& a : grads) gin.push_back(view(a));
  {
    py::gil_scoped_release unlocked;
    ::backward(gout, in, gin, attrs);
  }
  return grads;
}

}  // namespace

PYBIND11_MODULE(@MODULE@, m) {
  m.def("forward", &run_forward);
  m.def("backward", &run_backward);
}
"""


def _split(
    attributes: Mapping[str, float | int], spec: Any
) -> tuple[dict[str, float], dict[str, int]]:
    """The attributes as the module takes them: floats and ints apart."""
    kinds = {a.name: a.kind for a in spec.attributes}
    floats = {k: float(v) for k, v in attributes.items() if kinds.get(k) == "float"}
    ints = {k: int(v) for k, v in attributes.items() if kinds.get(k) == "int"}
    return floats, ints


class NumpyKernels:
    """The loaded module's functions, on numpy arrays."""

    device = "cpu"

    def __init__(self, module: ModuleType, spec: Any) -> None:
        self.module = module
        self.spec = spec

    def forward(
        self, inputs: Sequence[np.ndarray], attributes: Mapping[str, float | int]
    ) -> list[np.ndarray]:
        floats, ints = _split(attributes, self.spec)
        return list(self.module.forward(list(inputs), floats, ints))

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        attributes: Mapping[str, float | int],
    ) -> list[np.ndarray]:
        floats, ints = _split(attributes, self.spec)
        return list(self.module.backward(list(grad_outputs), list(inputs), floats, ints))

    def prepare_forward(
        self, inputs: Sequence[np.ndarray], attributes: Mapping[str, float | int]
    ) -> Callable[[], object]:
        floats, ints = _split(attributes, self.spec)
        arrays, run = list(inputs), self.module.forward
        return lambda: run(arrays, floats, ints)

    def prepare_backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        attributes: Mapping[str, float | int],
    ) -> Callable[[], object]:
        floats, ints = _split(attributes, self.spec)
        grads, arrays, run = list(grad_outputs), list(inputs), self.module.backward
        return lambda: run(grads, arrays, floats, ints)


class NumpyCustomOpGlue:
    """Builds a custom operator into a pybind11 module for numpy arrays."""

    name = "numpy"

    def available(self) -> bool:
        return True  # numpy is this plugin's own dependency; pybind11 is checked by build

    def version(self) -> str:
        pybind = (
            importlib.metadata.version("pybind11")
            if importlib.util.find_spec("pybind11") is not None
            else "missing"
        )
        return (
            f"numpy {np.__version__}; pybind11 {pybind}; "
            f"python {sys.implementation.cache_tag} {sysconfig.get_config_var('EXT_SUFFIX')}"
        )

    def build(self, request: Any, workdir: Path) -> Path:
        try:
            import pybind11
        except ImportError:
            raise UsageError(
                "building C++ custom operators for numpy needs pybind11's headers: "
                "pip install 'd5-plugin-numpy[customop]'"
            ) from None

        module = f"d5op_{request.unique}"
        glue = workdir / "numpy_glue.cpp"
        text = (
            _GLUE.replace("@SOURCE@", str(request.source))
            .replace("@OUTPUTS@", str(len(request.spec.outputs)))
            .replace("@MODULE@", module)
        )
        glue.write_text(text)
        artifact = workdir / f"{module}{sysconfig.get_config_var('EXT_SUFFIX')}"
        flags = [f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}",
                 "-fvisibility=hidden"]  # fmt: skip
        request.compile([glue], artifact, flags)
        return artifact

    def load(self, artifact: Path, spec: Any) -> NumpyKernels:
        name = artifact.name.split(".")[0]
        found = importlib.util.spec_from_file_location(name, artifact)
        if found is None or found.loader is None:
            raise ImportError(f"cannot load {artifact}")
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
        return NumpyKernels(module, spec)
