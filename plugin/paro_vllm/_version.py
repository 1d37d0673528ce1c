"""The plugin's version: its own module, so the methods can name it without importing the package
that registers them."""

__version__ = "0.1.0"
