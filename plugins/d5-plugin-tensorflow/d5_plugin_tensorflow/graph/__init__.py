"""The TensorFlow graph executor's parts.

- :mod:`.translation`: what a translated node is (:class:`~.translation.NodeFn`);
- :mod:`.nodes`: the :class:`~.nodes.Translator`, made of the node families in
  :mod:`.layers` (products, convolution, pooling, normalization, Dropout, losses),
  :mod:`.arithmetic` (element-wise), :mod:`.shaping` (data movement, casts) and
  :mod:`.reductions`;
- :mod:`.windows`: convolution and pooling windows with ONNX semantics;
- :mod:`.layout`: the channels-last layout of TensorFlow's CPU kernels;
- :mod:`.program`: the nodes run while the ``tf.function`` is traced, with folding of
  values known then;
- :mod:`.profile`: per-node times from TensorFlow's profiler.
"""
