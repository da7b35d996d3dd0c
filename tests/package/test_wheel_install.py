"""A normal install (a wheel, not ``pip install -e``) carries everything the C++ kernels build from:
installed into a fresh venv, with an empty kernel cache, ``radixlm build-kernels`` builds them from
the installed package and they load."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from radixlm.kernels.cpu.build import unavailable_reason

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]

_CHECK = """
import sys, radixlm
from radixlm.kernels.cpu.build import load_decode_kernels, load_gguf_kernels
assert radixlm.__file__.startswith(sys.prefix), radixlm.__file__
assert load_decode_kernels() is not None, "decode kernels did not build"
assert load_gguf_kernels() is not None, "GGUF kernels did not build"
print(radixlm.__file__)
"""


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_kernels_build_and_load_from_an_installed_wheel(tmp_path: Path) -> None:
    source = tmp_path / "source"  # built from a copy: the build leaves build/ and egg-info behind
    shutil.copytree(REPO / "radixlm", source / "radixlm", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)], tmp_path)
    (wheel,) = wheels.glob("radixlm-*.whl")

    venv = tmp_path / "venv"  # the system's torch and dependencies, this wheel's radixlm
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp_path)
    python = str(venv / "bin" / "python")
    _run([python, *pip[1:], "install", "--no-deps", str(wheel)], tmp_path)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["RADIXLM_CACHE"] = str(tmp_path / "cache")  # empty: everything is compiled from the wheel's files
    built = _run([str(venv / "bin" / "radixlm"), "build-kernels"], tmp_path, env)
    for name in ("decode_kernels", "gguf_linear"):
        assert f"{name}: built in" in built and str(tmp_path / "cache" / "kernels" / name) in built
    installed = _run([python, "-c", _CHECK], tmp_path, env).strip()
    assert Path(installed).resolve().is_relative_to(venv.resolve())
