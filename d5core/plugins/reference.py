"""Which installed implementation is the reference that others are validated against.

``d5 validate op`` compares an operator backend with the reference backend (a
``d5.operators`` entry) and ``d5 validate net`` an executor with the reference executor (a
``d5.frameworks`` entry). The reference is a setting, not a plugin the core knows:

- the ``reference`` argument of the runner (:func:`~d5core.lv0.runner.validate_op`,
  :func:`~d5core.lv1.runner.validate_network`), when given;
- else the environment variable :data:`REFERENCE_ENV` (``D5_REFERENCE=torch``);
- else :data:`DEFAULT_REFERENCE`.

The same name is looked up in the group that is being validated, so one setting selects
a plugin's backend and its executor together.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from d5core.errors import UsageError
from d5core.plugins import PluginManager, get_plugin_manager

__all__ = ["DEFAULT_REFERENCE", "REFERENCE_ENV", "reference_name"]

#: The environment variable that names the reference implementation.
REFERENCE_ENV = "D5_REFERENCE"
#: The reference when neither the runner's argument nor :data:`REFERENCE_ENV` names one.
DEFAULT_REFERENCE = "numpy"

_WHAT = {"d5.operators": "operator backend", "d5.frameworks": "graph executor"}


def reference_name(
    group: str,
    explicit: str | None = None,
    *,
    manager: PluginManager | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The name of the reference entry of ``group`` (``d5.operators`` or ``d5.frameworks``).

    :param explicit: the runner's ``reference`` argument; ``None`` reads the setting.
    :param environ: the environment to read :data:`REFERENCE_ENV` from (default: this
        process's).
    :raises UsageError: one line, when the name is not an installed entry of ``group``,
        saying where the name came from and listing the installed ones.
    """
    env = os.environ if environ is None else environ
    from_env = env.get(REFERENCE_ENV, "").strip()
    if explicit:
        name, source = explicit, "reference"
    elif from_env:
        name, source = from_env, REFERENCE_ENV
    else:
        name, source = DEFAULT_REFERENCE, "the default reference"
    installed = (manager or get_plugin_manager()).names(group)
    if name in installed:
        return name
    what = _WHAT.get(group, group)
    choices = ", ".join(installed) or "none is installed"
    raise UsageError(
        f"{source} {name!r} is not an installed {what}; set {REFERENCE_ENV} to one of: {choices}"
    )
