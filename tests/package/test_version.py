"""The version is written once (``radixlm/version.py``); the distribution's metadata carries the same."""

from __future__ import annotations

import email.parser
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import radixlm

ROOT = Path(__file__).resolve().parents[2]


def _metadata_version(metadata_dir: Path) -> str:
    (dist_info,) = metadata_dir.glob("*.dist-info")
    return email.parser.Parser().parsestr((dist_info / "METADATA").read_text())["Version"]


def test_metadata_built_from_this_checkout_has_the_package_version(tmp_path: Path) -> None:
    # The build backend's metadata hook, as pip runs it, on this checkout's pyproject.toml.
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, setuptools.build_meta as b; b.prepare_metadata_for_build_wheel(sys.argv[1])",
            str(tmp_path),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert _metadata_version(tmp_path) == radixlm.__version__


def test_installed_distribution_has_the_package_version() -> None:
    installed = importlib.metadata.version("radixlm")
    assert installed == radixlm.__version__, (
        f"installed radixlm {installed} but the source says {radixlm.__version__}: reinstall it"
    )
