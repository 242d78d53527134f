"""d5-plugin-tinygemm: one operator (ONNX Gemm) and a graph executor, as a worked example."""

__version__ = "0.1.0"
