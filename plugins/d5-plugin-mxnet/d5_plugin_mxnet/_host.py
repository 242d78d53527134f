"""Writing host (numpy) values into CPU ``NDArray``s without a trip through MXNet's engine.

``NDArray._sync_copyfrom`` (what ``array[:] = value`` and ``mx.nd.array`` end in) asks
the engine for write access even when nothing is pending: the request is queued to the
engine's worker thread and the caller waits for it, about 65 µs here on an idle engine,
against 5 µs for the copy out (``asnumpy``, which has a fast path for an array nothing
writes to). d5's numpy-path training step writes every feed and every parameter each
step, so those waits were most of what the path cost beside MXNet's own optimizer.

The copies here write into the array's memory directly, through the data pointer MXNet's
C API gives (``MXNDArrayGetData``, which first reorders an array a oneDNN operator left
in its own layout back to the plain one, as ``asnumpy`` would). That is safe only when
the engine has nothing pending on the array:

- :func:`filled` writes into an array it has just allocated, which nothing can have work
  pending on;
- :func:`write_all` first waits for the whole engine (``mx.nd.waitall``, which returns
  in under a microsecond when the engine is idle, as it is after a step whose outputs
  were read back), then writes.

Arrays on another device than the CPU take MXNet's own synchronous copy.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from d5_plugin_mxnet._mx import mxnet

__all__ = ["filled", "host_view", "write_all"]

mx = mxnet()
_get_data = mx.base._LIB.MXNDArrayGetData
_check = mx.base.check_call


def host_view(array: Any) -> npt.NDArray[Any]:
    """A numpy array over the memory of the CPU ``NDArray`` ``array`` (plain layout).

    The caller makes sure nothing on the engine reads or writes ``array`` while the view
    is used, and does not keep the view: MXNet may move the data (a layout reorder).
    """
    pointer = ctypes.c_void_p()
    _check(_get_data(array.handle, ctypes.byref(pointer)))
    dtype = np.dtype(array.dtype)
    shape = array.shape
    size = math.prod(shape) * dtype.itemsize  # np.prod of a tuple costs ~10 µs
    if pointer.value is None or size == 0:
        raise ValueError("the NDArray has no memory to view")
    raw = (ctypes.c_char * size).from_address(pointer.value)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _on_cpu(context: Any) -> bool:
    return bool(context.device_type == "cpu")


def filled(value: npt.NDArray[Any], context: Any) -> Any:
    """A new ``NDArray`` on ``context`` holding a copy of ``value`` (its dtype and shape).

    ``value`` must not be empty (MXNet 1.9.1 has no zero-size tensors).
    """
    array = mx.nd.empty(value.shape, ctx=context, dtype=value.dtype)
    if _on_cpu(context):
        np.copyto(host_view(array), value, casting="no")
    else:
        array._sync_copyfrom(value)
    return array


def write_all(pairs: Iterable[tuple[Any, npt.NDArray[Any]]]) -> None:
    """Copy each numpy value into its live ``NDArray`` (same shape; cast to its dtype),
    after the engine has finished everything queued."""
    waited = False
    for live, value in pairs:
        if not _on_cpu(live.context):
            live._sync_copyfrom(value.astype(live.dtype, copy=False).reshape(live.shape))
            continue
        if not waited:
            mx.nd.waitall()
            waited = True
        view = host_view(live)
        np.copyto(view, value.reshape(view.shape), casting="unsafe")
