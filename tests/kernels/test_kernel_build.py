"""The compiled-kernel cache: it survives a build killed part way, serves concurrent loads, and is
reused by any checkout of the same sources."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import radixlm.kernels.cpu
from radixlm.kernels.cpu.build import build_directory, load_decode_kernels, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


def test_load_after_a_killed_build_left_torchs_lock_file() -> None:
    # torch's cpp_extension marks a build with a plain "lock" file; a build killed part way (a
    # session's end, Ctrl-C) leaves it, and torch's own load then waits for it forever
    assert load_decode_kernels() is not None  # built (or found) in this cache
    stale = build_directory("decode_kernels") / "lock"
    stale.touch()
    code = "from radixlm.kernels.cpu.build import load_decode_kernels; assert load_decode_kernels()"
    done = subprocess.run([sys.executable, "-c", code], timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not stale.exists()


def test_concurrent_loads_share_one_build() -> None:
    assert load_decode_kernels() is not None
    code = "from radixlm.kernels.cpu.build import load_decode_kernels; assert load_decode_kernels()"
    loads = [
        subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True) for _ in range(3)
    ]
    for load in loads:
        _, err = load.communicate(timeout=120)
        assert load.returncode == 0, err
    assert not (build_directory("decode_kernels") / "lock").exists()


def test_a_checkout_with_newer_file_times_reuses_the_build() -> None:
    # a clean clone or a worktree has the same sources with new mtimes: ninja must not rebuild
    assert load_decode_kernels() is not None
    library = build_directory("decode_kernels") / "radixlm_decode_kernels.so"
    built = library.stat().st_mtime_ns
    source = Path(radixlm.kernels.cpu.__file__).parent / "decode_attention.cpp"
    later = time.time() + 60
    os.utime(source, (later, later))
    code = "from radixlm.kernels.cpu.build import load_decode_kernels; assert load_decode_kernels()"
    done = subprocess.run([sys.executable, "-c", code], timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert library.stat().st_mtime_ns == built


def test_collecting_the_tests_compiles_nothing(tmp_path: Path) -> None:
    # kernels are built by session fixtures, when a test that needs them runs: never at import
    env = {**os.environ, "RADIXLM_CACHE": str(tmp_path / "cache")}
    repo = Path(radixlm.kernels.cpu.__file__).resolve().parents[3]
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"]
    done = subprocess.run(command, cwd=repo, env=env, timeout=600, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:]
    assert not (tmp_path / "cache" / "kernels").exists()


def test_the_build_directory_follows_the_torch_install_and_the_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two venvs with the same torch version, or two compilers, must not share (and rebuild in
    # turn) one build directory
    import torch

    here = build_directory("decode_kernels")
    monkeypatch.setattr(torch, "__file__", "/another/venv/lib/python3.11/site-packages/torch/__init__.py")
    other_venv = build_directory("decode_kernels")
    assert other_venv != here
    monkeypatch.undo()
    compiler = tmp_path / "c++"
    compiler.write_text("#!/bin/sh\necho 'another-c++ 99.1'\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    assert build_directory("decode_kernels") not in (here, other_venv)


def test_build_kernels_command_reports_what_it_built_and_where(monkeypatch: pytest.MonkeyPatch) -> None:
    from radixlm.kernels.cpu import build_command

    out = io.StringIO()
    assert build_command.build_kernels(out) == 0
    for name in ("decode_kernels", "gguf_linear"):
        assert f"{name}: already built: {build_directory(name)}" in out.getvalue()  # the session built them
    monkeypatch.setattr(build_command, "unavailable_reason", lambda: "this CPU lacks AVX2/FMA/F16C")
    out = io.StringIO()
    assert build_command.build_kernels(out) == 1
    assert "cannot build the CPU kernels here: this CPU lacks AVX2/FMA/F16C" in out.getvalue()


def test_build_kernels_command_says_when_it_waits_for_another_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from radixlm.kernels.cpu import build_command
    from radixlm.kernels.cpu.build import build_in_progress, exclusive_build

    monkeypatch.setattr(build_command, "MODULES", {"decode_kernels": []})  # one module is enough
    monkeypatch.setattr(build_command, "build", lambda name: None)  # the build itself is not the point
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path))  # nothing built here
    directory = build_directory("decode_kernels")
    assert not build_in_progress(directory)
    out = io.StringIO()
    with exclusive_build(directory):  # another process's build (flock: one per open file)
        assert build_in_progress(directory)
        assert build_command.build_kernels(out) == 0
    assert not build_in_progress(directory)
    assert f"decode_kernels: waiting for another process's build in {directory}" in out.getvalue()
