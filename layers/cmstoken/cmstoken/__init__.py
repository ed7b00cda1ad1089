"""Shared library of the credential-rotation functions (the Lambda layer's package)."""

__version__ = "0.1.0"
