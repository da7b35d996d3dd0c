"""``ServerArgs`` loads no torch or numpy: a spawned scheduler process unpickles its ``ServerArgs``
before it applies its thread variables (``run_scheduler_process``), so torch imported by that
unpickling ran with the server process's thread limits and the scheduler answered control messages
(stats, health of a running request) only when its batch ended."""

from __future__ import annotations

import subprocess
import sys


def test_server_args_imports_no_torch_or_numpy():
    code = "import sys, radixlm.runtime.server_args; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
