"""Where a kernel build is cached: one directory per combination of everything that changes the binary.

Two processes asking for the same key share one build (under a lock); a different key (other sources,
flags, torch version or install, Python ABI, compiler) never rebuilds over another key's directory,
so two venvs or two checkouts never rebuild a shared cache in turn.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import torch


def cache_root() -> Path:
    """``$RADIXLM_CACHE``, default ``~/.cache/radixlm``."""
    return Path(os.environ.get("RADIXLM_CACHE") or Path.home() / ".cache" / "radixlm").expanduser()


def compiler_command() -> str:
    """The C++ compiler torch's extension builder runs (``$CXX``, default ``c++``)."""
    return os.environ.get("CXX", "c++")


@functools.lru_cache(maxsize=8)
def compiler_identity(command: str) -> str:
    """The compiler's resolved path and the first line of its ``--version`` ("" when absent)."""
    path = shutil.which(command)
    if path is None:
        return ""
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    return f"{os.path.realpath(path)} {version.splitlines()[0] if version else ''}"


def torch_install() -> str:
    """The torch this process imported: its version and where it is installed."""
    return f"{torch.__version__} {Path(torch.__file__).resolve().parent}"


def python_abi() -> str:
    """What an extension module must match to be imported by this interpreter."""
    return f"{sys.implementation.cache_tag} {sysconfig.get_config_var('EXT_SUFFIX')}"


def build_key(files: dict[str, bytes], flags: list[str]) -> str:
    """A digest of the build's inputs (every file it reads, by name), its flags, torch (version and
    install), the Python ABI and the compiler."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name] + b"\0")
    for part in (" ".join(flags), torch_install(), python_abi(), compiler_identity(compiler_command())):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def keyed_directory(name: str, files: dict[str, bytes], flags: list[str]) -> Path:
    """``$RADIXLM_CACHE/kernels/<name>-<torch version>-<key>``."""
    version = torch.__version__.replace("+", "_")
    return cache_root() / "kernels" / f"{name}-{version}-{build_key(files, flags)}"
