"""The long tail of ONNX operators, for the conformance suite; importing this package
registers them all:

- :mod:`.indexing`: index, scatter and rearrangement operators;
- :mod:`.normalization`: Lp, mean-variance and group normalization;
- :mod:`.sequences`: Swish, SwiGLU, CausalConvWithState, LinearAttention;
- :mod:`.resize`: Resize and Upsample;
- :mod:`.sampling`: GridSample, AffineGrid, RoiAlign, Col2Im, LpPool;
- :mod:`.spectral`: signal windows and DFT;
- :mod:`.quantize`: the quantization operators;
- :mod:`.control`: If, Scan and Loop.
"""

from __future__ import annotations

from d5_plugin_jax.graph.extra import (
    control,
    indexing,
    normalization,
    quantize,
    resize,
    sampling,
    sequences,
    spectral,
)

__all__ = [
    "control",
    "indexing",
    "normalization",
    "quantize",
    "resize",
    "sampling",
    "sequences",
    "spectral",
]
