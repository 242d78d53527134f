"""Versions of the d5 core distribution and of the plugin API it offers."""

__version__ = "0.1.0"

#: The version of the plugin contract: the names of :mod:`d5core.api` and the hook
#: specifications, nothing else. The major number changes when one of them is removed,
#: renamed or changed in a way that breaks plugins; the minor number when one is added.
PLUGIN_API_VERSION = "1.13"
