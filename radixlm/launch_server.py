"""``python -m radixlm.launch_server --model-path ...``: SGLang's launch line (``radixlm serve``'s flags).

Importing this module as ``radixlm.launch_server`` replaces the package attribute of that name (the
``launch_server`` function); the module therefore stays callable as that function.
"""

from __future__ import annotations

import sys
import types
from typing import Any


def launch_server(*args: Any, **kwargs: Any) -> Any:
    """``radixlm.runtime.server.launch.launch_server``: start a server subprocess."""
    from radixlm.runtime.server.launch import launch_server as launch

    return launch(*args, **kwargs)


def main() -> None:
    from radixlm.runtime.server.serve_cli import main as serve_main

    serve_main()


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return launch_server(*args, **kwargs)


if __name__ == "__main__":
    main()
else:
    sys.modules[__name__].__class__ = _CallableModule
