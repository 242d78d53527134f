"""The ``onnxruntime`` graph executor: one ``InferenceSession`` per network, inference only.

The session is created once, in the constructor, from the model's bytes. Its options are
fixed so that runs are comparable (see :func:`default_session_options`):

- ``intra_op_num_threads`` is ``OMP_NUM_THREADS`` when that is set to a positive integer,
  else the number of cores this process may run on (``os.sched_getaffinity``);
- ``inter_op_num_threads`` is 1 and the execution mode sequential;
- the graph optimisation level is ``ORT_ENABLE_ALL`` (ONNX Runtime's default).

A model that imports an opset newer than ORT's newest released one (``onnx.helper``
stamps onnx's newest by default) is refused by ORT; the error says so in one line.

An operator ONNX Runtime cannot run, a model it cannot load, and an attempt to train are
one-line :class:`~d5core.api.UsageError` s.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from d5core.api import GraphExecutor, UsageError

__all__ = ["OnnxRuntimeExecutor", "default_session_options", "default_threads", "profile_runs"]

_PREFIX = re.compile(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")
#: A C++ source location and function signature ORT puts before some messages.
_SOURCE = re.compile(r"^\S+\.(?:cc|cpp|h):\d+\s.*?\)\s+(?=[A-Z])")
_MAX_IR = re.compile(r"max supported IR version:\s*(\d+)")
_NO_OP = re.compile(
    r'In Node, \("(?P<node>[^"]*)", (?P<op>[\w.]+), "(?P<domain>[^"]*)".*?'
    r"No Op registered for \S+ with domain_version of (?P<version>\d+)",
    re.S,
)
_NO_KERNEL = re.compile(
    r"Could not find an implementation for (?P<op>[\w.]+)\((?P<version>\d+)\) node "
    r"with name '(?P<node>[^']*)'"
)
_NOT_REGISTERED = re.compile(
    r"(?:(?P<domain>[\w.]*):)?(?P<op>\w+)\((?P<version>-?\d+)\) is not a registered function/op"
)
#: The suffix of a node's kernel event in an ONNX Runtime profile.
_KERNEL_SUFFIX = "_kernel_time"
_OPSET_TOO_NEW = re.compile(
    r"Opset (?P<used>\d+) is under development.*?domain (?P<domain>[\w.]+) is till opset "
    r"(?P<max>\d+)",
    re.S,
)


def default_threads() -> int:
    """Threads per operator: ``OMP_NUM_THREADS`` if set to a positive integer, else the
    number of cores this process may run on."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_session_options(threads: int | None = None) -> ort.SessionOptions:
    """The session options every executor uses (see the module docstring)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads if threads is not None else default_threads()
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 4  # fatal only: load errors become exceptions anyway
    return options


def _one_line(exc: BaseException) -> str:
    text = _PREFIX.sub("", str(exc).strip())
    text = _SOURCE.sub("", text)
    return " ".join(text.split())


def _model_proto(network: Any) -> onnx.ModelProto:
    if isinstance(network, onnx.ModelProto):
        return network
    model = getattr(network, "model", None)
    if isinstance(model, onnx.ModelProto):
        return model
    raise UsageError(
        f"the onnxruntime executor needs an onnx.ModelProto or a d5 Network, "
        f"not {type(network).__name__}"
    )


def _providers(device: str) -> tuple[list[Any], str, int]:
    kind, _, index = device.partition(":")
    if kind == "cpu":
        return ["CPUExecutionProvider"], "cpu", 0
    if kind == "cuda":
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise UsageError(
                f"onnxruntime {ort.__version__} has no CUDA provider for device {device!r}: "
                "pip install onnxruntime-gpu"
            )
        device_id = int(index) if index.isdigit() else 0
        return (
            [("CUDAExecutionProvider", {"device_id": device_id}), "CPUExecutionProvider"],
            "cuda",
            device_id,
        )
    raise UsageError(f"the onnxruntime executor runs on 'cpu' or 'cuda[:N]', not {device!r}")


def _load_error(
    exc: BaseException, model: onnx.ModelProto, executor: GraphExecutor | None = None
) -> UsageError:
    """The one-line error for a model ONNX Runtime refused to load; for a missing
    operator, it names the other installed executors that run it (``executor``'s
    :meth:`~d5core.api.GraphExecutor.alternatives`)."""
    raw = str(exc)
    for pattern in (_NO_OP, _NO_KERNEL, _NOT_REGISTERED):
        found = pattern.search(raw)
        if found:
            parts = found.groupdict()
            where = [f"node {parts['node']!r}" if parts.get("node") else "unnamed node"]
            where.append(f"domain {parts.get('domain') or 'ai.onnx'}")
            if not parts["version"].startswith("-"):
                where.append(f"opset {parts['version']}")
            others = ""
            if executor is not None:
                op_type = parts["op"].rpartition(".")[2]
                version = int(parts["version"]) if parts["version"].isdigit() else None
                others = "; " + executor.alternatives(op_type, parts.get("domain") or "", version)
            return UsageError(
                f"onnxruntime {ort.__version__} cannot run operator {parts['op']} "
                f"({', '.join(where)}): no implementation registered{others}"
            )
    found = _OPSET_TOO_NEW.search(raw)
    if found:
        ops = sorted({n.op_type for n in model.graph.node})
        listed = ", ".join(ops[:5]) + (", ..." if len(ops) > 5 else "")
        return UsageError(
            f"onnxruntime {ort.__version__} supports {found['domain']} opsets up to "
            f"{found['max']}; the model imports opset {found['used']} for {listed}"
        )
    return UsageError(f"onnxruntime {ort.__version__} cannot load the model: {_one_line(exc)}")


@functools.lru_cache(maxsize=1)
def _cpu_kernels() -> dict[tuple[str, str], list[tuple[int, int]]]:
    """ONNX Runtime's CPU kernels: (domain, operator) -> opset ranges."""
    from onnxruntime.capi import _pybind_state

    found: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for kernel in _pybind_state.get_all_opkernel_def():
        if kernel.provider == "CPUExecutionProvider":
            domain = "" if kernel.domain == "ai.onnx" else kernel.domain
            low, high = kernel.version_range
            found.setdefault((domain, kernel.op_name), []).append((int(low), int(high)))
    return found


@functools.lru_cache(maxsize=1024)
def _ort_supports(op_type: str, domain: str, opset: int | None) -> bool:
    if domain == "" and op_type == "Constant":
        return True  # made an initializer when the session loads the graph
    ranges = _cpu_kernels().get((domain, op_type))
    if ranges and (opset is None or any(lo <= opset <= hi for lo, hi in ranges)):
        return True
    try:
        schema = (
            onnx.defs.get_schema(op_type, opset, domain)
            if opset is not None
            else onnx.defs.get_schema(op_type, domain=domain)
        )
    except Exception:  # onnx does not define it either
        return False
    # a function operator: ORT inlines its body (onnx's stubs lack these attributes)
    return bool(
        getattr(schema, "has_function", False)
        or getattr(schema, "has_context_dependent_function", False)
    )


def profile_runs(events: list[dict[str, Any]]) -> list[list[tuple[str, str, str, float]]]:
    """Split an ONNX Runtime profile (its JSON events) into runs of node kernel times.

    Each ``model_run`` event is one run; a ``Node`` event ``<node>_kernel_time`` belongs
    to the run whose span holds it. Durations are in microseconds in the profile.
    """
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
        key=lambda e: int(e["ts"]),
    )
    spans = [(int(r["ts"]), int(r["ts"]) + int(r["dur"])) for r in runs]
    per_run: list[list[tuple[str, str, str, float]]] = [[] for _ in runs]
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX):
            continue
        ts = int(event["ts"])
        index = next((i for i, (t0, t1) in enumerate(spans) if t0 <= ts <= t1), None)
        if index is None:
            continue
        op_type = str(event.get("args", {}).get("op_name", "?"))
        node = name.removesuffix(_KERNEL_SUFFIX)
        per_run[index].append((node, op_type, "forward", int(event["dur"]) / 1e6))
    return per_run


class OnnxRuntimeExecutor(GraphExecutor):
    """Runs an ONNX network with ONNX Runtime; inference only.

    :param network: a d5 ``Network`` or an ``onnx.ModelProto``; it is not modified.
    :param device: ``"cpu"`` (default) or ``"cuda[:N]"`` where onnxruntime-gpu is installed.
    :param threads: ``intra_op_num_threads``; :func:`default_threads` when ``None``.
    :raises UsageError: when ONNX Runtime cannot load the model or run one of its operators.
    """

    name: ClassVar[str] = "onnxruntime"
    trains: ClassVar[bool] = False

    @classmethod
    def supports(cls, op_type: str, domain: str = "", opset: int | None = None) -> bool:
        """Whether ONNX Runtime has a CPU kernel for ``op_type`` of ``domain`` (at
        ``opset``; any version when ``None``), or ONNX defines the operator as a function
        (which ONNX Runtime inlines)."""
        return _ort_supports(op_type, "" if domain == "ai.onnx" else domain, opset)

    def check_supported(self) -> None:
        """Nothing left to check: creating the session (in the constructor) already
        refused, in one line, any operator ONNX Runtime cannot run."""

    def __init__(self, network: Any, *, device: str = "cpu", threads: int | None = None) -> None:
        super().__init__(network, device=device)
        self._model = _model_proto(getattr(self, "network", network))
        self._providers, self._device_type, self._device_id = _providers(device)
        self.session_options = default_session_options(threads)
        self.session = self._create_session(self._providers)
        self._input_names = [i.name for i in self.session.get_inputs()]
        self._optional_names = {i.name for i in self.session.get_overridable_initializers()}
        self.output_names: list[str] = [o.name for o in self.session.get_outputs()]

    def _create_session(
        self, providers: list[Any], options: ort.SessionOptions | None = None
    ) -> ort.InferenceSession:
        model = self._model
        for _ in range(2):
            try:
                return ort.InferenceSession(
                    model.SerializeToString(), options or self.session_options,
                    providers=providers,
                )  # fmt: skip
            except Exception as exc:
                found = _MAX_IR.search(str(exc))
                if found is None or model is not self._model:
                    raise _load_error(exc, self._model, self) from None
                # An IR version newer than this ORT reads: run a copy stamped with the
                # newest one it accepts (onnx.helper writes the newest by default).
                model = onnx.ModelProto()
                model.CopyFrom(self._model)
                model.ir_version = int(found.group(1))
        raise AssertionError("unreachable")  # pragma: no cover

    # -- feeds ----------------------------------------------------------------------

    def _check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        missing = [n for n in self._input_names if n not in feeds]
        if missing:
            raise UsageError(
                f"missing input(s) {', '.join(missing)}; the model takes "
                f"{', '.join(self._input_names)}"
            )
        unknown = [n for n in feeds if n not in self._input_names and n not in self._optional_names]
        if unknown:
            raise UsageError(
                f"unknown input(s) {', '.join(unknown)}; the model takes "
                f"{', '.join(self._input_names)}"
            )
        return {
            k: np.ascontiguousarray(v) if isinstance(v, np.ndarray) else v for k, v in feeds.items()
        }

    # -- GraphExecutor -------------------------------------------------------------

    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the session on ``feeds`` and return every graph output by name."""
        prepared = self._check_feeds(feeds)
        try:
            outputs = self.session.run(self.output_names, prepared)
        except Exception as exc:
            raise UsageError(f"onnxruntime could not run the model: {_one_line(exc)}") from None
        return dict(zip(self.output_names, outputs, strict=True))

    def prepare_inference(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """Bind ``feeds`` (copied to the device) and the outputs once; the callable runs
        only ``session.run_with_iobinding`` (and waits for the device on a GPU)."""
        prepared = self._check_feeds(feeds)
        session = self.session
        if not all(isinstance(v, np.ndarray) for v in prepared.values()):
            names = self.output_names

            def run_feeds() -> object:  # sequences and optionals cannot be bound
                return session.run(names, prepared)

            return run_feeds
        binding = session.io_binding()
        for name, value in prepared.items():
            # A copy: on the CPU an OrtValue shares the array's memory, and the caller's
            # array may change between preparing and timing.
            copied = np.array(value, order="C", copy=True)
            binding.bind_ortvalue_input(
                name, ort.OrtValue.ortvalue_from_numpy(copied, self._device_type, self._device_id)
            )
        for name in self.output_names:
            binding.bind_output(name, self._device_type, self._device_id)
        run_with_iobinding = session.run_with_iobinding
        if self._device_type == "cpu":

            def run_bound() -> object:
                run_with_iobinding(binding)
                return binding

            return run_bound

        def run_bound_synchronized() -> object:
            run_with_iobinding(binding)
            binding.synchronize_outputs()
            return binding

        return run_bound_synchronized

    def profile_nodes(
        self, feeds: Mapping[str, np.ndarray], repeats: int
    ) -> list[list[tuple[str, str, str, float]]]:
        """Per-node kernel times of ``repeats`` runs on ``feeds``, from ONNX Runtime's
        profiler: ``[(node, op_type, "forward", seconds), ...]`` per run.

        A second session with profiling on runs one untimed warm-up and then the
        ``repeats`` runs; the timed session is left alone. Nodes are those of the graph
        ONNX Runtime optimised, under its names: fused nodes (Conv with its Relu, for
        example) appear once, with the fused operator's type.
        """
        prepared = self._check_feeds(feeds)
        with tempfile.TemporaryDirectory(prefix="d5-ort-profile-") as tmp:
            session = self.profiling_session(os.path.join(tmp, "profile"))
            try:
                for _ in range(repeats + 1):
                    session.run(self.output_names, prepared)
            except Exception as exc:
                raise UsageError(f"onnxruntime could not run the model: {_one_line(exc)}") from None
            events = json.loads(Path(session.end_profiling()).read_text())
        return profile_runs(events)[1:]

    def profiling_session(self, prefix: str) -> ort.InferenceSession:
        """A new session like :attr:`session` (same model, providers and threads) with
        ONNX Runtime's profiler on from its creation; ``end_profiling()`` writes the
        profile to ``<prefix>_<date and time>.json`` and returns its path.

        The executor's own session is left alone: a caller that wants the executor's
        runs profiled puts this one in :attr:`session` before preparing them.
        """
        options = default_session_options(self.session_options.intra_op_num_threads)
        options.enable_profiling = True
        options.profile_file_prefix = prefix
        return self._create_session(self._providers, options)

    def inference_and_backprop(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Refused: d5 uses ONNX Runtime for inference only."""
        raise UsageError(
            "the onnxruntime executor runs inference only: choose an executor that trains "
            "(for example torch) for inference_and_backprop"
        )

    def get_parameters(self) -> dict[str, np.ndarray]:
        """The model's initializers by name (ONNX Runtime does not change them)."""
        return {t.name: numpy_helper.to_array(t) for t in self._model.graph.initializer}

    def set_parameters(self, params: Mapping[str, np.ndarray]) -> None:
        """Replace initializers by name, then create the session again from the model."""
        super().set_parameters(params)
        self._model = _model_proto(getattr(self, "network", self._model))
        self.session = self._create_session(self._providers)
