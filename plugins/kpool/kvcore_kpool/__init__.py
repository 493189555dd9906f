"""kvcore plugin: kpool."""

__version__ = "0.1.0"
