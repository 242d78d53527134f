"""The plugin module: hook implementations and the plugin-API range.

d5 imports this module every time it starts. Keep imports of your framework (and of the
component modules, which import it) inside the hook functions, so that
``d5 list-plugins`` never pays for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5core.api import hookimpl

#: The d5 plugin-API versions this plugin works with.
d5_plugin_api = ">=1.1,<2"


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    """Facts stored with every run: your framework's version, build options, devices."""
    import numpy as np

    from d5_plugin_template import __version__

    return {"d5-plugin-template": __version__, "numpy": np.__version__}


@hookimpl
def d5_plugin_check() -> list[str]:
    """Prove the plugin can work here (``d5 list-plugins --check``): run one operator on
    a tiny input and compare with the known answer. Return one-line problems, or none."""
    import numpy as np

    from d5_plugin_template.operators import TemplateBackend
    from d5core.api import TensorDescriptor

    x = np.array([-1.0, 2.0], dtype=np.float32)
    relu = TemplateBackend().create("Relu", {}, [TensorDescriptor.of(x)])
    (y,) = relu.forward([x])
    if not np.array_equal(y, [0.0, 2.0]):
        return [f"Relu of [-1, 2] gave {y.tolist()}, not [0, 2]; the backend is broken here"]
    return []
