"""The package version, importable from anywhere without loading the language or the runtime."""

from __future__ import annotations

__version__ = "0.1.0"
