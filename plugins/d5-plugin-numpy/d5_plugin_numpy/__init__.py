"""d5's reference backend, in numpy."""

__version__ = "0.1.0"
