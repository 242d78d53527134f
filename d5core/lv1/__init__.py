"""Level 1, networks: an internal plugin package of d5core.

The model zoo (:mod:`~d5core.lv1.zoo`, :mod:`~d5core.lv1.zoo_sequence`), graph passes,
ONNX's conformance suite (``d5 conformance``), the runner of ``d5 bench net`` and
``d5 validate net`` (:mod:`~d5core.lv1.runner`), their commands, the measurement job and
the networks' and conformance figures. The ONNX model itself, :class:`Network`, is part
of the ONNX helper library, :mod:`d5core.onnx.network`. It reaches the kernel through the
hooks of :mod:`d5core.lv1.plugin`.

Importing this package imports nothing else: d5 imports :mod:`d5core.lv1.plugin` at
every start.
"""
