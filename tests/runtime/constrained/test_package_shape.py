"""What the package layout promises: a compile worker loads no torch, and every lazy export resolves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import radixlm.runtime.constrained as constrained

REPO = Path(__file__).resolve().parents[3]


def test_compile_worker_imports_no_torch():
    """The outlines compile worker is a fresh process per worker: torch would cost it seconds and memory."""
    code = (
        "import sys, radixlm.runtime.constrained.outlines.compile_worker\n"
        "print(sorted(m for m in ('torch', 'llguidance') if m in sys.modules))"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"


def test_every_lazy_export_resolves():
    for name in constrained.__all__:
        assert getattr(constrained, name).__name__ == name
