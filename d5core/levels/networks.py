"""Level 1 interfaces: graph executors that run an ONNX network."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from d5core.errors import UsageError

if TYPE_CHECKING:
    import onnx

    from d5core.networks.network import Network

__all__ = ["GraphExecutor"]


class GraphExecutor(ABC):
    """Runs one ONNX network with one framework; registered in ``d5.frameworks``.

    :param network: the :class:`~d5core.networks.Network` to run (an ``onnx.ModelProto``
        is wrapped in one, and checked).
    :param device: where to run it, ``"cpu"`` by default.

    ``self.network`` is the network and ``self.model`` its ``ModelProto``. Executors that
    convert the graph or the parameters into framework objects do so in ``__init__`` or in
    :meth:`prepare_inference` / :meth:`prepare_train_step`, never inside the callable
    those return, which is what benchmarks time.
    """

    #: The name users select the executor by, for example ``"torch"``.
    name: ClassVar[str] = ""
    #: Whether :meth:`inference_and_backprop` is supported; by default, whether the
    #: subclass overrides it.
    trains: ClassVar[bool] = True
    #: Operator types (ONNX ``op_type``) the executor runs; empty means no restriction.
    supported_ops: ClassVar[frozenset[str]] = frozenset()
    #: True when a step returns before its work is done, on the CPU too (MXNet's
    #: engine): the measurement engine then calls ``d5_synchronize`` before every clock
    #: read. Added in plugin API 1.4.
    asynchronous: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "trains" not in cls.__dict__:
            cls.trains = cls.inference_and_backprop is not GraphExecutor.inference_and_backprop

    def __init__(self, network: Network | onnx.ModelProto, *, device: str = "cpu") -> None:
        from d5core.networks.network import Network

        self.network = network if isinstance(network, Network) else Network(network)
        self.model = self.network.model
        self.device = device

    @property
    def _label(self) -> str:
        return self.name or type(self).__name__

    @abstractmethod
    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the graph forward on ``feeds`` and return every graph output by name."""

    def inference_and_backprop(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Run forward and backward; return the outputs and the gradient of ``loss``
        with respect to every trainable parameter (``network.trainable``), by name."""
        raise UsageError(
            f"the {self._label} executor runs inference only; to train, choose "
            f"{_executors_that_train(exclude=self.name)}"
        )

    def prepare_inference(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """Convert ``feeds`` once and return a callable that runs inference on them.

        The default calls :meth:`inference`; framework executors override it so that the
        callable times the framework alone.
        """
        return lambda: self.inference(feeds)

    def prepare_train_step(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> Callable[[], object]:
        """Like :meth:`prepare_inference`, for one forward-and-backward step."""
        return lambda: self.inference_and_backprop(feeds, loss)

    def get_parameters(self) -> dict[str, np.ndarray]:
        """The current parameters (initializers) by name, as numpy arrays.

        The default reads ``self.network``; executors that hold converted parameters
        override this and :meth:`set_parameters` together.
        """
        return self.network.parameters

    def set_parameters(self, params: Mapping[str, np.ndarray]) -> None:
        """Replace parameters by name; an unknown name is a UsageError."""
        known = set(self.network.parameters)
        unknown = sorted(set(params) - known)
        if unknown:
            raise UsageError(
                f"network {self.network.name!r} has no parameter {unknown[0]!r}; see "
                f"get_parameters() for the names"
            )
        for key, value in params.items():
            self.network.set_parameter(key, value)

    def check_supported(self) -> None:
        """Raise a one-line UsageError naming the first node whose operator this
        executor does not run (nothing is checked when ``supported_ops`` is empty)."""
        if not self.supported_ops:
            return
        for node in self.network.nodes:
            if node.op_type not in self.supported_ops:
                raise UsageError(
                    f"the {self._label} executor does not support operator "
                    f"{node.op_type!r} (node {node.name!r}); choose another executor"
                )


def _executors_that_train(exclude: str = "") -> str:
    """The installed executors (``d5.frameworks``) that train, as words for a message.

    Each entry is imported to read its ``trains`` flag: this runs on an error path only.
    """
    from d5core.plugins import get_plugin_manager

    manager = get_plugin_manager()
    names = []
    for name in manager.names("d5.frameworks"):
        if name == exclude:
            continue
        try:
            factory = manager.load("d5.frameworks", name)
        except Exception:  # a broken entry is simply not offered
            continue
        if getattr(factory, "trains", False) is True:
            names.append(name)
    if not names:
        return "an executor that trains (none is installed; 'd5 list-plugins' shows them)"
    return f"one of the installed executors that train: {', '.join(names)}"
