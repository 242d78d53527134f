"""Level 1 interfaces: graph executors that run an ONNX network."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from d5core.errors import UsageError

if TYPE_CHECKING:
    import onnx

    from d5core.onnx.network import Network

__all__ = [
    "GraphExecutor",
    "executors_supporting",
    "missing_operator_message",
    "operator_alternatives",
]


class GraphExecutor(ABC):
    """Runs one ONNX network with one framework; registered in ``d5.frameworks``.

    :param network: the :class:`~d5core.onnx.network.Network` to run (an ``onnx.ModelProto``
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
        from d5core.onnx.network import Network

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
        with respect to every trainable parameter (``network.trainable``), by name.

        Optional, since plugin API 1.13: ``inference_and_backprop_streamed(feeds, loss)``,
        the same with the gradients as a ``Mapping`` that reads each back when first asked,
        in the order the backward pass finishes them; the trainer's numpy path prefers it."""
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

    @classmethod
    def supports(cls, op_type: str, domain: str = "", opset: int | None = None) -> bool | None:
        """Whether the executor runs operator ``op_type`` of ``domain`` (``""`` is ONNX's
        default domain) at ``opset`` (``None``: any version).

        ``None`` means it cannot tell. The default answers from :attr:`supported_ops`,
        and ``None`` when that is empty; an executor that knows better (a framework with
        a kernel registry, a fallback that runs more operators) overrides it. d5 asks it
        to name, in the error for an operator one executor lacks, the executors that
        have it. Added in plugin API 1.5.
        """
        if not cls.supported_ops:
            return None
        return op_type in cls.supported_ops

    def details(self) -> dict[str, Any]:
        """Facts about how this executor runs its network that reports should show,
        JSON-serialisable: for example the nodes it hands to a fallback engine. The
        default has none. Added in plugin API 1.5."""
        return {}

    def unsupported(
        self, op_type: str, node: str, domain: str = "", opset: int | None = None
    ) -> UsageError:
        """The error for a node whose operator this executor cannot run: one line
        naming the operator, the node and the installed executors that do run it
        (:func:`missing_operator_message`). Raise it from :meth:`check_supported`."""
        return UsageError(
            missing_operator_message(self._label, op_type, node, domain=domain, opset=opset)
        )

    def alternatives(self, op_type: str, domain: str = "", opset: int | None = None) -> str:
        """The end of :meth:`unsupported`'s message, for an executor that words its own
        refusal: ``"executors that do: a, b"`` (or that none does). Added in plugin API
        1.5."""
        return operator_alternatives(op_type, domain, opset, exclude=self.name)

    def check_supported(self) -> None:
        """Raise a one-line UsageError naming the first node whose operator this
        executor does not run, as :meth:`supports` says (nothing is refused where it
        cannot tell), and the installed executors that run it."""
        opsets = {o.domain or "": int(o.version) for o in self.model.opset_import}
        for node in self.network.nodes:
            opset = opsets.get(node.domain or "")
            if self.supports(node.op_type, node.domain, opset) is False:
                raise self.unsupported(node.op_type, node.name, node.domain, opset)


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


def executors_supporting(
    op_type: str, domain: str = "", opset: int | None = None, *, exclude: str = ""
) -> tuple[list[str], list[str]]:
    """The installed executors (``d5.frameworks``) that run ``op_type``, and those that
    cannot tell (their :meth:`GraphExecutor.supports` says ``None``), each sorted.

    Each entry is imported to ask it: this runs on an error path only. An entry that
    fails to load, or whose ``supports`` raises, is left out.
    """
    from d5core.plugins import get_plugin_manager

    manager = get_plugin_manager()
    yes: list[str] = []
    unknown: list[str] = []
    for name in manager.names("d5.frameworks"):
        if name == exclude:
            continue
        try:
            factory = manager.load("d5.frameworks", name)
            ask = getattr(factory, "supports", None)
            if callable(ask):
                answer = ask(op_type, domain, opset)
            else:
                listed = getattr(factory, "supported_ops", None)
                answer = (op_type in listed) if listed else None
        except Exception:  # a broken plugin must not break the message
            continue
        if answer is True:
            yes.append(name)
        elif answer is None:
            unknown.append(name)
    return sorted(yes), sorted(unknown)


def missing_operator_message(
    executor: str, op_type: str, node: str, *, domain: str = "", opset: int | None = None
) -> str:
    """One line for a node ``executor`` cannot run: the operator, the node, and the
    installed executors that run the operator (:func:`executors_supporting`)."""
    what = f"{domain}.{op_type}" if domain not in ("", "ai.onnx") else op_type
    head = f"the {executor} executor does not support operator {what!r} (node {node!r})"
    return f"{head}; {operator_alternatives(op_type, domain, opset, exclude=executor)}"


def operator_alternatives(
    op_type: str, domain: str = "", opset: int | None = None, *, exclude: str = ""
) -> str:
    """Which other installed executors run ``op_type``, as the end of an error message:
    ``"executors that do: numpy, torch"``, or that none does; executors that cannot
    tell are named as ones that may."""
    yes, unknown = executors_supporting(op_type, domain, opset, exclude=exclude)
    if yes:
        tail = f"executors that do: {', '.join(yes)}"
    else:
        tail = "no other installed executor does ('d5 list-plugins' lists them)"
    if unknown:
        tail += f"; {', '.join(unknown)} may (they do not say)"
    return tail
