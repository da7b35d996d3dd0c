"""A hook a test installs in a server process: validators that wait while their input holds ``MARKER``.

Imported by a ``sitecustomize`` (``install_dir``) when ``RADIXLM_TEST_BLOCK_DIR`` is set. A wrapped
function given a string containing ``MARKER`` creates ``entered`` in that folder, then waits until
``release`` exists there. Where it waits tells whether the work runs on the HTTP event loop: there,
``/health`` cannot answer until the test releases it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from radixlm import _env  # noqa: F401  (before anything imports torch, as serve_cli does)

MARKER = "zqBLOCKzq"
ENV = "RADIXLM_TEST_BLOCK_DIR"
WAIT_LIMIT_S = 120.0
# (module, function): the input-sized validation of a request before it is tokenized
HOOKED = [
    ("radixlm.runtime.sampling.stop_regex", "compile_stop_regex"),
    ("radixlm.runtime.requests.request_limits", "check_ebnf_shape"),
    ("radixlm.runtime.requests.request_limits", "check_regex_repeats"),
    ("radixlm.runtime.server.function_call.constraints", "json_schema_to_regex"),
]


def _marked(args: tuple[Any, ...]) -> bool:
    return any(isinstance(a, str) and MARKER in a for a in args)


def _blocking(fn: Callable[..., Any], folder: Path) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _marked(args):
            (folder / "entered").touch()
            deadline = time.monotonic() + WAIT_LIMIT_S
            while not (folder / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return fn(*args, **kwargs)

    return wrapper


def install(folder: Path) -> None:
    import importlib

    for module_name, name in HOOKED:
        module = importlib.import_module(module_name)
        setattr(module, name, _blocking(getattr(module, name), folder))


def install_dir(tmp: Path) -> Path:
    """A folder holding a ``sitecustomize`` that installs the hook (put it first on ``PYTHONPATH``)."""
    site = tmp / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import os\n"
        f"if os.environ.get({ENV!r}):\n"
        "    from pathlib import Path\n"
        "    from tests.helpers import blocking_hook\n"
        f"    blocking_hook.install(Path(os.environ[{ENV!r}]))\n"
    )
    return site
