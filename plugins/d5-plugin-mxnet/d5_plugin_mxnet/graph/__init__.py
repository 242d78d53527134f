"""The translation of ONNX graphs into MXNet: node functions by operator family, the
translator, and the programs that run them imperatively or compile them into a symbol."""

from d5_plugin_mxnet.graph.base import Context, Step
from d5_plugin_mxnet.graph.translation import SUPPORTED_OPS, Translator, fold_constants

__all__ = ["SUPPORTED_OPS", "Context", "Step", "Translator", "fold_constants"]
