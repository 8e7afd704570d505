"""The package's version: a leaf, so every layer can name it without importing the package's own `__init__`."""

__version__ = "0.1.0"
