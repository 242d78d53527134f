"""An example third-party d5 plugin."""
