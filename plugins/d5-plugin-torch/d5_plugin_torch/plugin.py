"""The plugin module of d5-plugin-torch.

Nothing here imports torch: listing plugins, or a run on another framework, must not pay
for it. Each hook reads torch only if the work being measured already imported it (the
environment then records its threads and backends; otherwise only its installed
version, and a hook about a CUDA device does nothing).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any

from d5core.api import hookimpl

if TYPE_CHECKING:
    from d5core.api import TraceProfiler

d5_plugin_api = ">=1.12,<2"


def _torch_if_loaded() -> Any:
    """torch, if the measured work already imported it; never import it just for a hook."""
    return sys.modules.get("torch")


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    torch = _torch_if_loaded()
    if torch is None:
        # Not imported by the work measured in this process (another framework's run, or
        # a bench that imports torch in its workers): the version from the metadata,
        # without the import, which costs a second or more.
        return {"torch": _installed_version(), "imported": False}
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "cuda_available": torch.cuda.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
    }
    if torch.cuda.is_available():
        info["cuda"] = torch.version.cuda
        info["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def _installed_version() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


@hookimpl
def d5_synchronize(device: str) -> None:
    torch = _torch_if_loaded()
    if torch is not None and device.startswith("cuda"):
        torch.cuda.synchronize(device)


@hookimpl
def d5_memory_peak(device: str) -> Mapping[str, int] | None:
    torch = _torch_if_loaded()
    if torch is None or not device.startswith("cuda"):
        return None
    return {"torch.cuda": int(torch.cuda.max_memory_allocated(device))}


@hookimpl
def d5_memory_reset_peak(device: str) -> None:
    torch = _torch_if_loaded()
    if torch is not None and device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


@hookimpl
def d5_thread_settings() -> Mapping[str, str] | None:
    torch = _torch_if_loaded()
    if torch is None:
        return None
    return {
        "torch.get_num_threads()": str(torch.get_num_threads()),
        "torch.get_num_interop_threads()": str(torch.get_num_interop_threads()),
    }


@hookimpl
def d5_plugin_check() -> list[str]:
    try:
        import torch
    except Exception as exc:
        return [f"cannot import torch ({exc}); pip install torch==2.13.0"]
    x = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    expected = torch.tensor([[5.0, 14.0], [14.0, 50.0]], dtype=torch.float64)
    if not torch.equal(x @ x.T, expected):
        return [f"torch {torch.__version__} computed a wrong 2x3 matrix product"]
    return []


@hookimpl
def d5_custom_op_glue() -> Any:
    """The torch glue of C++ custom operators (``TORCH_LIBRARY`` with autograd)."""
    from d5_plugin_torch.custom_op import TorchCustomOpGlue

    return TorchCustomOpGlue()


@hookimpl
def d5_trace_profiler(executor: str, level: str) -> TraceProfiler | None:
    """torch's profiler for a traced run of the executor or operator backend ``torch``;
    ``None`` for any other executor. It needs no instance (it records the torch
    operators of the thread that starts it, at ``full`` of every thread), so it is
    offered in a training run too. Creating it imports nothing; ``start()`` imports
    torch."""
    from d5_plugin_torch.trace import EXECUTORS, TorchTraceProfiler

    return TorchTraceProfiler(level) if executor in EXECUTORS else None
