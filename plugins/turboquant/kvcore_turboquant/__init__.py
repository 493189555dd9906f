"""kvcore plugin: turboquant."""

__version__ = "0.1.0"
