from typing import Any

import numpy as np

def isa() -> str: ...
def available_isas() -> list[str]: ...
def set_isa(name: str) -> None: ...
def num_threads() -> int: ...
def set_num_threads(n: int) -> None: ...
def openmp_version() -> int: ...
def compiler() -> str: ...
def blocking(isa: str, dtype: str) -> dict[str, int]: ...
def peak_gflops(isa: str, dtype: str, seconds: float) -> float: ...
def trace_start() -> None: ...
def trace_stop() -> tuple[list[tuple[str, int, int, int]], int]: ...
def trace_active() -> bool: ...
def trace_now_ns() -> int: ...
def trace_capacity() -> int: ...
def gemm(
    a: np.ndarray,
    b: np.ndarray,
    y: np.ndarray,
    alpha: float,
    beta: float,
    c: np.ndarray | None = ...,
) -> None: ...
def gemm_batched(a: np.ndarray, b: np.ndarray, y: np.ndarray, alpha: float) -> None: ...
def conv2d_forward(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, y: np.ndarray, group: int, params: Any
) -> None: ...
def conv2d_forward_algorithm(
    dtype: str,
    x: tuple[int, ...],
    m: int,
    kernel: tuple[int, ...],
    out: tuple[int, ...],
    group: int,
    params: tuple[int, ...],
) -> str: ...
def conv2d_backward(
    x: np.ndarray,
    w: np.ndarray,
    dy: np.ndarray,
    dx: np.ndarray | None,
    dw: np.ndarray,
    db: np.ndarray | None,
    group: int,
    params: Any,
) -> None: ...
def max_pool_forward(
    x: np.ndarray, y: np.ndarray, indices: np.ndarray | None, params: Any, storage_order: int
) -> None: ...
def max_pool_backward(x: np.ndarray, dy: np.ndarray, dx: np.ndarray, params: Any) -> None: ...
def avg_pool_forward(
    x: np.ndarray, y: np.ndarray, params: Any, count_include_pad: bool
) -> None: ...
def avg_pool_backward(
    dy: np.ndarray, dx: np.ndarray, params: Any, count_include_pad: bool
) -> None: ...
def relu_forward(x: np.ndarray, y: np.ndarray) -> None: ...
def relu_backward(x: np.ndarray, dy: np.ndarray, dx: np.ndarray) -> None: ...
def softmax_forward(x: np.ndarray, y: np.ndarray, outer: int, axis: int, inner: int) -> None: ...
def softmax_backward(
    y: np.ndarray, dy: np.ndarray, dx: np.ndarray, outer: int, axis: int, inner: int
) -> None: ...
def batch_norm_forward(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    y: np.ndarray,
    running_mean: np.ndarray | None,
    running_var: np.ndarray | None,
    epsilon: float,
    momentum: float,
    training: bool,
) -> None: ...
def batch_norm_backward(
    x: np.ndarray,
    scale: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    dy: np.ndarray,
    d_rm: np.ndarray | None,
    d_rv: np.ndarray | None,
    dx: np.ndarray,
    dscale: np.ndarray,
    dbias: np.ndarray,
    dmean: np.ndarray,
    dvar: np.ndarray,
    epsilon: float,
    momentum: float,
    training: bool,
) -> None: ...
def layer_norm_forward(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray | None,
    y: np.ndarray,
    mean: np.ndarray,
    inv_std: np.ndarray,
    rows: int,
    width: int,
    epsilon: float,
) -> None: ...
def layer_norm_backward(
    x: np.ndarray,
    scale: np.ndarray,
    mean: np.ndarray,
    inv_std: np.ndarray,
    dy: np.ndarray,
    dmean: np.ndarray | None,
    dinv_std: np.ndarray | None,
    dx: np.ndarray,
    dscale: np.ndarray,
    dbias: np.ndarray | None,
    rows: int,
    width: int,
) -> None: ...
def erf_forward(x: np.ndarray, y: np.ndarray) -> None: ...
def erf_backward(x: np.ndarray, dy: np.ndarray, dx: np.ndarray) -> None: ...
def gelu_forward(x: np.ndarray, y: np.ndarray, tanh_form: bool) -> None: ...
def gelu_backward(x: np.ndarray, dy: np.ndarray, dx: np.ndarray, tanh_form: bool) -> None: ...
def gather_forward(
    data: np.ndarray, indices: np.ndarray, y: np.ndarray, outer: int, axis: int, inner: int
) -> None: ...
def gather_backward(
    indices: np.ndarray, dy: np.ndarray, dx: np.ndarray, outer: int, axis: int, inner: int
) -> None: ...
