"""Level 2 interfaces: datasets, samplers and optimizers, and the native training path
(:class:`NativeTraining`) that executors and framework-native optimizers share."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from d5core.errors import UsageError

__all__ = [
    "ALGORITHMS_GROUP",
    "CHOICE_KEYS",
    "DATASETS_GROUP",
    "PROBLEM_KEYS",
    "RECIPE_KEYS",
    "CorrectCounter",
    "Dataset",
    "NativeTraining",
    "Optimizer",
    "Sampler",
    "TrainingAlgorithm",
    "check_options",
    "load_dataset",
    "preload_dataset",
    "preloads",
]

#: The entry-point group of datasets: factories ``(split, **options) -> Dataset``.
DATASETS_GROUP = "d5.datasets"
#: The entry-point group of training algorithms: :class:`TrainingAlgorithm` subclasses.
ALGORITHMS_GROUP = "d5.algorithms"


#: Keys that describe the problem: they belong in FIXED and nowhere else.
PROBLEM_KEYS: dict[str, str] = {
    "model": "zoo model name or .onnx path",
    "model_options": "options of the zoo builder (hidden sizes, depth, ...)",
    "dataset": "dataset name (digits, synthetic_images, cifar10, ...)",
    "dataset_options": "options of the dataset (root, samples, shape, ...)",
    "test_dataset_options": "options of the test split, added to dataset_options",
    "sampler": "sampler name (shuffle, sequential, ...)",
    "sampler_options": "options of the sampler",
    "epochs": "epochs at most",
    "max_steps": "optimisation steps at most",
    "time_budget": "seconds at most (budget_clock says which seconds count)",
    "loss": "the loss function (cross_entropy, or mse for regression)",
    "test_every": '"epoch" or a number of steps',
    "target_accuracy": "test accuracy that ends training and stops time-to-accuracy",
    "target_perplexity": "validation perplexity that ends training and stops time-to-perplexity",
    "patience": "test passes without improvement before stopping",
    "target_loss": "mean test loss that ends training and stops time-to-loss",
    "budget_clock": '"wall" (time_budget counts everything) or "training" (not test passes)',
}
#: Keys a competitor chooses: in MUTABLE, or in FIXED where the recipe freezes them.
CHOICE_KEYS: dict[str, str] = {
    "executor": "graph executor (numpy, torch, ...)",
    "optimizer": "optimizer name in d5.optimizers",
    "lr": "learning rate",
    "optimizer_options": "optimizer hyperparameters (momentum, betas, weight_decay, ...)",
    "schedule": "learning-rate schedule spec",
    "batch_size": "training batch size",
    "eval_batch_size": "test batch size",
    "modifiers": "gradient modifiers spec (clipping, weight decay)",
    "transforms": "training-batch transforms spec",
    "seed": "the one seed every randomness derives from (--seed overrides)",
    "algorithm": "training algorithm in d5.algorithms, or an optimizer as a baseline",
    "hyperparameters": "the algorithm's hyperparameters (a point of its search space)",
}
#: Every key a training recipe may set, with its meaning.
RECIPE_KEYS: dict[str, str] = {**PROBLEM_KEYS, **CHOICE_KEYS}


class Dataset(ABC):
    """Labelled examples addressed by index; registered in ``d5.datasets``.

    ``batch`` returns ``x`` as float32 of shape ``(len(indices), *input_shape)`` and
    ``y`` as int64 class indices, or float32 targets when ``num_classes`` is ``None``.
    """

    #: The name the dataset was loaded by (with its split, e.g. ``"digits/train"``).
    name: str = ""
    #: The shape of one example's input.
    input_shape: tuple[int, ...] = ()
    #: The number of classes, or ``None`` for regression.
    num_classes: int | None = None

    @abstractmethod
    def __len__(self) -> int:
        """Number of examples."""

    @abstractmethod
    def batch(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The inputs and labels of the examples at ``indices``."""


class Sampler(ABC):
    """Decides which examples form each minibatch of an epoch.

    :param drop_last: leave out an epoch's last batch when it is smaller than
        ``batch_size``.
    """

    def __init__(
        self, size: int, batch_size: int, *, seed: int = 0, drop_last: bool = False
    ) -> None:
        self.size, self.batch_size, self.seed = size, batch_size, seed
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``: samplers that shuffle derive their order from it."""
        self.epoch = epoch

    def num_examples(self) -> int:
        """How many indices an epoch yields before batching (``size`` by default)."""
        return self.size

    def __len__(self) -> int:
        """Number of batches per epoch."""
        n = self.num_examples()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _batches(self, order: np.ndarray) -> Iterator[np.ndarray]:
        """Cut ``order`` into batches of ``batch_size``, honouring ``drop_last``."""
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            if self.drop_last and len(chunk) < self.batch_size:
                return
            yield chunk

    @abstractmethod
    def __iter__(self) -> Iterator[np.ndarray]:
        """Index arrays, one per minibatch, for the current epoch."""


class Optimizer(ABC):  # noqa: B024 (subclasses override step or update)
    """Updates parameters from their gradients; registered in ``d5.optimizers``.

    An optimizer is built as ``cls(lr=..., **hyper)``; ``hyper`` may hold only the names
    in :attr:`defaults`. The trainer sets :attr:`lr` before every step (from a schedule).
    :meth:`step` updates numpy parameters in place; per-parameter state (moments,
    accumulators) is created lazily on a parameter's first step, with its dtype.

    Framework-native optimizers set :attr:`native` to the framework name (``"torch"``):
    :meth:`bind` hands them the executor's live parameter tensors once, and
    :meth:`native_step` updates those from native gradients, with no numpy round trip.
    They still implement :meth:`step` on numpy arrays (by converting), so any optimizer
    works with any executor.
    """

    #: The name users select the optimizer by.
    name: ClassVar[str] = ""
    #: The framework whose tensors :meth:`bind` / :meth:`native_step` take, or ``None``.
    native: ClassVar[str | None] = None
    #: Hyper-parameters besides ``lr``, with their defaults.
    defaults: ClassVar[Mapping[str, float]] = {}

    def __init__(self, lr: float = 0.01, **hyper: float) -> None:
        from d5core.errors import UsageError

        unknown = sorted(set(hyper) - set(self.defaults))
        if unknown:
            known = ", ".join(["lr", *self.defaults]) or "lr"
            raise UsageError(
                f"optimizer {self.name!r} has no option {unknown[0]!r}; its options: {known}"
            )
        for key, value in {"lr": lr, **hyper}.items():
            if not isinstance(value, int | float) or isinstance(value, str):
                raise UsageError(
                    f"optimizer {self.name!r}: option {key!r} must be a number, not {value!r}"
                )
        #: The learning rate of the next step.
        self.lr: float = float(lr)
        #: Every hyper-parameter besides ``lr``, defaults filled in.
        self.hyper: dict[str, float] = {**self.defaults, **hyper}
        #: Per-parameter state arrays, by parameter name then state name.
        self.state: dict[str, dict[str, np.ndarray]] = {}
        #: Steps taken per parameter name (bias corrections count from 1).
        self.steps: dict[str, int] = {}

    def step(self, params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> None:
        """Update ``params`` in place from ``grads``; a parameter without a gradient is
        left alone. The default calls :meth:`update` once per gradient."""
        from d5core.errors import UsageError

        for key, grad in grads.items():
            if key not in params:
                raise UsageError(f"optimizer {self.name!r}: gradient {key!r} has no parameter")
            param = params[key]
            g = np.asarray(grad, dtype=param.dtype)
            if g.shape != param.shape:
                raise UsageError(
                    f"optimizer {self.name!r}: gradient {key!r} has shape {g.shape}, "
                    f"parameter has {param.shape}"
                )
            self.steps[key] = self.steps.get(key, 0) + 1
            self.update(param, g, self.state.setdefault(key, {}), self.steps[key])

    def update(
        self, param: np.ndarray, grad: np.ndarray, state: dict[str, np.ndarray], t: int
    ) -> None:
        """Update one parameter in place: ``state`` is its own (empty on its first step),
        ``t`` its step count starting at 1. Subclasses override this or :meth:`step`."""
        raise NotImplementedError(f"{type(self).__name__} implements neither step nor update")

    def zeros(self, state: dict[str, np.ndarray], key: str, like: np.ndarray) -> np.ndarray:
        """The state array ``key``, created as zeros shaped and typed like ``like``."""
        if key not in state:
            state[key] = np.zeros_like(like)
        return state[key]

    def state_dict(self) -> dict[str, object]:
        """A copy of everything needed to resume: ``lr``, ``hyper`` and per-parameter state."""
        return {
            "name": self.name,
            "lr": self.lr,
            "hyper": dict(self.hyper),
            "steps": dict(self.steps),
            "state": {k: {s: a.copy() for s, a in v.items()} for k, v in self.state.items()},
        }

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Resume from a :meth:`state_dict` (arrays are copied)."""
        from d5core.errors import UsageError

        if state.get("name", self.name) != self.name:
            raise UsageError(
                f"optimizer {self.name!r} cannot load the state of {state.get('name')!r}"
            )
        lr, hyper, steps, arrays = (state.get(k) for k in ("lr", "hyper", "steps", "state"))
        if isinstance(lr, int | float):
            self.lr = float(lr)
        if isinstance(hyper, Mapping):
            self.hyper = {**self.defaults, **hyper}
        self.steps = (
            {str(k): int(v) for k, v in steps.items()} if isinstance(steps, Mapping) else {}
        )
        self.state = (
            {str(k): {str(s): np.array(a) for s, a in v.items()} for k, v in arrays.items()}
            if isinstance(arrays, Mapping)
            else {}
        )

    def reset(self) -> None:
        """Forget all per-parameter state, as if no step had been taken."""
        self.state.clear()
        self.steps.clear()

    def bind(self, executor: object) -> None:
        """Native optimizers: take ``executor``'s live parameter tensors to update."""
        from d5core.errors import UsageError

        raise UsageError(f"optimizer {self.name!r} is not framework-native; call step()")

    def native_step(self, native_grads: object) -> None:
        """Native optimizers: update the bound tensors from the executor's native gradients."""
        from d5core.errors import UsageError

        raise UsageError(f"optimizer {self.name!r} is not framework-native; call step()")


class TrainingAlgorithm(ABC):
    """A training algorithm, compared with others on fixed workloads (AlgoPerf's five
    functions in d5 terms); registered in ``d5.algorithms``.

    A workload is a recipe whose FIXED section is the problem; ``workload`` is its name.
    The algorithm chooses MUTABLE keys: :meth:`settings` (AlgoPerf's
    ``init_optimizer_state`` and ``update_params``: the update rule is a ``d5.optimizers``
    entry, built once and stepped by the trainer) and :meth:`get_batch_size`. Two
    optional hooks act while it trains: :meth:`prepare_for_eval` and
    :meth:`data_selection`. A recipe selects it with ``algorithm = NAME`` and the point
    of :attr:`search_space` to use with ``hyperparameters = {...}``.
    """

    #: The name recipes select the algorithm by.
    name: ClassVar[str] = ""
    #: Each hyperparameter: ``{distribution = "uniform" | "log_uniform" | "int_uniform",
    #: min, max}``, ``{distribution = "choice", values = [...]}``, or a plain fixed value.
    search_space: ClassVar[Mapping[str, Any]] = {}

    def get_batch_size(self, workload: str) -> int | None:
        """The training batch size on ``workload``; ``None`` keeps the recipe's."""
        return None

    @abstractmethod
    def settings(self, workload: str, hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
        """The MUTABLE recipe keys (``optimizer``, ``lr``, ``optimizer_options``,
        ``schedule``, ``modifiers``, ``transforms``) to train ``workload`` with, given a
        point of :attr:`search_space` (every key present)."""

    def prepare_for_eval(
        self, params: Mapping[str, np.ndarray], optimizer: Optimizer
    ) -> Mapping[str, np.ndarray] | None:
        """The parameters to evaluate with before a test pass (an average, say), or
        ``None`` for the live ones; training goes on from the live ones."""
        return None

    def data_selection(
        self, indices: np.ndarray, step: int, rng: np.random.Generator
    ) -> np.ndarray:
        """The example indices of step ``step``'s batch, chosen from the sampler's
        ``indices`` (all of them by default); ``rng`` is seeded by the run's seed."""
        return indices


@runtime_checkable
class CorrectCounter(Protocol):
    """What an executor's ``native_correct_counter()`` returns (optional, native path).

    It counts the correct predictions of training batches where the logits live (the
    executor's device) and reads the count back only when asked, so that a training
    step needs no device-to-host sync for its accuracy. An executor without
    ``native_correct_counter`` gets the per-step count (an argmax and one ``.item()``).
    """

    def add(self, logits: Any, labels: Any) -> None:
        """Count the rows where ``logits.argmax(-1) == labels``, later: no host sync.

        The counter may keep ``logits`` and ``labels`` until :meth:`take`; the caller
        must not change them in place before then.
        """

    def take(self) -> int:
        """The count of everything added since the last take (one host sync); resets."""
        ...


@runtime_checkable
class NativeTraining(Protocol):
    """The native training path: what a graph executor offers so that an optimizer of
    its own framework trains the executor's tensors in place, with no numpy round trip.

    Tensors here are the framework's own (``torch.Tensor`` for torch); d5core never
    looks inside them. The trainer takes this path when the executor is a
    ``NativeTraining`` (``isinstance`` checks that the three methods exist), the
    optimizer's :attr:`Optimizer.native` is the executor's ``name``, and no gradient
    modifiers are set (see ``native_capable`` in docs/training.md). Each step then runs
    ``feeds = executor.to_native(...)``, ``outputs, grads =
    executor.native_train_step(feeds, loss)`` and ``optimizer.native_step(grads)``;
    ``optimizer.bind(executor)`` reads :meth:`native_parameters` once before the first.

    Two more methods are optional, looked up by name and not part of the check:

    - ``native_correct_counter() -> CorrectCounter``: a counter of correct predictions
      kept on the device, read once per epoch instead of once per step;
    - ``apply_running_stats() -> None``: write the running statistics of the last
      training pass (BatchNormalization) into the parameters; called after every
      optimizer step, on this path and on the numpy one.
    """

    def to_native(self, feeds: Mapping[str, Any]) -> Mapping[str, Any]:
        """``feeds`` (numpy arrays or native tensors, by input name) as native tensors
        on the executor's device, converted once."""
        ...

    def native_parameters(self) -> Mapping[str, Any]:
        """The live trainable tensors by name, in the executor's trainable order: updating
        them in place changes the network (no copy)."""
        ...

    def native_train_step(
        self, feeds: Mapping[str, Any], loss: str
    ) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        """:meth:`GraphExecutor.inference_and_backprop` in native tensors: every graph
        output (detached) and the gradient of every trainable parameter (zeros where the
        loss does not depend on it), nothing converted to numpy."""
        ...


def check_options(what: str, factory: Any, options: dict[str, Any], skip: int = 0) -> None:
    """Raise a one-line :class:`UsageError` when ``factory`` takes no option in ``options``.

    :param skip: leading positional parameters that are not options.
    """
    try:
        params = list(inspect.signature(factory).parameters.values())[skip:]
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    known = [p.name for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UsageError(
            f"{what} has no option {unknown[0]!r}; its options: {', '.join(known) or 'none'}"
        )
    missing = [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and p.name not in options
    ]
    if missing:
        raise UsageError(f"{what} needs the option {missing[0]!r}")


_Factory = TypeVar("_Factory", bound=Callable[..., Any])


def preloads(imports: Callable[[], object]) -> Callable[[_Factory], _Factory]:
    """Mark a dataset factory with what it imports, to be done before a run's clock.

    A factory that imports a library when it is called (to keep the library optional)
    makes that import part of the run's time to accuracy, which a hand-written script,
    importing at its top, does not count. Decorated with ``@preloads(f)``, the factory
    carries ``f`` as its ``preload`` attribute; ``d5 run`` calls it
    (:func:`preload_dataset`) before the run's clock starts. ``f`` takes no argument;
    what it raises is ignored there, and the factory reports the problem when called.
    """

    def mark(factory: _Factory) -> _Factory:
        factory.preload = imports  # type: ignore[attr-defined]
        return factory

    return mark


def preload_dataset(name: str) -> None:
    """Import the dataset ``name``'s reader and what it declares with :func:`preloads`.

    Nothing is raised: an unknown dataset or a missing library is reported by
    :func:`load_dataset`, with its one-line message.
    """
    from d5core.plugins.manager import get_plugin_manager

    try:
        factory = get_plugin_manager().load(DATASETS_GROUP, name)
        preload = getattr(factory, "preload", None)
        if callable(preload):
            preload()
    except Exception:  # reported by load_dataset, where the run needs the data
        return


def load_dataset(name: str, split: str = "train", **options: Any) -> Dataset:
    """The split ``split`` of the dataset ``name``, built with ``options``.

    :raises UsageError: one line, for an unknown dataset (naming the installed ones),
        an unknown split, an unknown or missing option, or missing or corrupt files.
    """
    from d5core.plugins.manager import get_plugin_manager

    factory = get_plugin_manager().load(DATASETS_GROUP, name)
    check_options(f"dataset {name!r}", factory, options, skip=1)
    dataset = factory(split, **options)
    if not isinstance(dataset, Dataset):
        raise UsageError(
            f"dataset {name!r} returned {type(dataset).__name__}, not a Dataset; "
            f"its plugin is broken"
        )
    return dataset
