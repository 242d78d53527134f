"""Level 1 hooks: networks given as ONNX graphs, and transformations of them.

Graph executors are selected by name through the ``d5.frameworks`` entry-point group;
these hooks let plugins add models and graph passes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from d5core.hookspecs._markers import hookspec

__all__ = ["d5_graph_passes", "d5_model_zoo"]


# -------------------------------------------------------------------------
# Models and passes
# -------------------------------------------------------------------------


@hookspec
def d5_model_zoo() -> Mapping[str, Callable[..., Any]] | None:
    """Contribute named models to the zoo used by ``d5 bench net`` and recipes.

    A model builder takes keyword arguments such as ``input_shape``, ``classes`` and
    ``seed`` and returns an ``onnx.ModelProto``. Builders must be deterministic for a seed
    and must not download anything.

    :return: a mapping from model name to builder, or ``None``.

    Not firstresult: the mappings of all plugins are merged by name. d5's own models
    (``mlp``, ``lenet5``, the ResNets, ``vgg``) come before every plugin's ordinary
    implementation (d5's internal ``builtins`` plugin implements this hook
    ``tryfirst``); a name offered a second time is left out and reported as a clash
    naming both plugins.

    .. versionadded:: 1.0
    """


@hookspec
def d5_graph_passes() -> Mapping[str, Callable[..., Any]] | None:
    """Contribute graph transformations (passes) by name.

    A pass takes an ONNX model and keyword options and returns a new model; it must not
    change what the network computes beyond a documented tolerance.

    :return: a mapping from pass name to pass factory, or ``None``.

    Not firstresult: the mappings of all plugins are merged by name. d5's own passes
    (``infer_shapes``) come before every plugin's ordinary implementation (d5's internal
    ``builtins`` plugin implements this hook ``tryfirst``); a name offered a second time
    is left out and reported as a clash naming both plugins.

    No ``d5`` command applies a pass yet: passes are applied from Python with
    :func:`d5core.lv1.passes.apply_pass`, where this hook is called.

    .. versionadded:: 1.0
    """
