"""The package version, importable from anywhere without loading the language or the runtime.

The one place it is written: ``pyproject.toml`` reads it for the distribution's metadata.
"""

from __future__ import annotations

__version__ = "0.1.0"
