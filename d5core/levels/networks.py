"""Level 1 interfaces: graph executors that run an ONNX network."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

__all__ = ["GraphExecutor"]


class GraphExecutor(ABC):
    """Runs one ONNX model with one framework; registered in ``d5.frameworks``.

    :param model: the ``onnx.ModelProto`` to run.
    :param device: where to run it, ``"cpu"`` by default.
    """

    #: The name users select the executor by, for example ``"torch"``.
    name: ClassVar[str] = ""
    #: Whether :meth:`inference_and_backprop` is supported.
    trains: ClassVar[bool] = True

    def __init__(self, model: Any, *, device: str = "cpu") -> None:
        self.model = model
        self.device = device

    @abstractmethod
    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the graph forward on ``feeds`` and return every graph output by name."""

    def inference_and_backprop(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Run forward and backward; return the outputs and the gradient of ``loss``
        with respect to every trainable parameter (initializer), by name."""
        raise NotImplementedError(
            f"the {self.name or type(self).__name__} executor only runs inference"
        )
