"""``radixlm.global_config``: SGLang's ``sglang.global_config`` settings that mean something here."""

from __future__ import annotations

from typing import Any

from radixlm.frontend import default_backend


class GlobalConfig:
    """Process-wide frontend settings (SGLang's names).

    - ``default_backend``: the backend ``run()`` uses when it gets none (the same one
      ``set_default_backend`` sets; assign ``None`` to clear it).
    - ``verbosity``: ``2`` prints each program's final text after ``run()`` (not with ``stream=True``).
    - ``enable_precache_with_tracing``: ``run_batch`` prefills the text every program of the batch
      starts with, found by tracing, before running them.
    - ``enable_parallel_encoding``: accepted for compatibility; ``concate_and_append`` joins always
      append the forks' text (there is no KV concatenation to turn off).
    """

    def __init__(self) -> None:
        self.verbosity = 0
        self.enable_precache_with_tracing = True
        self.enable_parallel_encoding = True

    @property
    def default_backend(self) -> Any:
        return default_backend.current_default_backend()

    @default_backend.setter
    def default_backend(self, backend: Any) -> None:
        default_backend.set_default_backend(backend)


global_config = GlobalConfig()
