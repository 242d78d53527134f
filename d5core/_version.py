"""Versions of the d5 core distribution and of the plugin API it offers."""

__version__ = "0.1.0"

#: The version of the hook specifications and level interfaces plugins are written
#: against. The major number changes when an existing hook or interface changes in a way
#: that breaks plugins; the minor number when hooks or interfaces are added.
PLUGIN_API_VERSION = "1.0"
