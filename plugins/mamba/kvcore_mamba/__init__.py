"""kvcore plugin: mamba."""

__version__ = "0.1.0"
