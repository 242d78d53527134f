"""The plugin module: the plugin-API range (1.10 brought ``TrainingAlgorithm``).

d5 imports this module every time it starts; the algorithm and its optimizer are
imported only when a recipe names them.
"""

from __future__ import annotations

#: The d5 plugin-API versions this plugin works with.
d5_plugin_api = ">=1.10,<2"
