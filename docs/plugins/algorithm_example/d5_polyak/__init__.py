"""A d5 training algorithm: momentum SGD, evaluated on a Polyak (exponential) average of
its parameters. The worked example of docs/plugins/algorithms.md."""

__version__ = "0.1.0"
