"""A forward pass failing again and again is no longer one bad batch but a broken runtime.

One failure is batch-wide (``TokenProcessor.fail_batch``). The same failure ``max_forward_failures``
times in a row (a corrupted device, a model that cannot run): ``BrokenRuntime`` is raised out of
``step()``, the scheduler process exits, the server fails every client and exits. Under tensor
parallelism the first failure already does: the ranks' collectives are out of step.
"""

from __future__ import annotations


class BrokenRuntime(RuntimeError):
    """The runtime can no longer serve (a forward pass failing again and again): the process exits."""


class ForwardFailures:
    """Counts forward passes that raised in a row; ``limit`` of them is a broken runtime."""

    def __init__(self, limit: int) -> None:
        self.limit = max(int(limit), 1)
        self.in_a_row = 0

    def on_success(self) -> None:
        self.in_a_row = 0

    def on_failure(self, exc: BaseException) -> None:
        """Record one failure; raise ``BrokenRuntime`` when it makes ``limit`` in a row."""
        self.in_a_row += 1
        if self.in_a_row >= self.limit:
            raise BrokenRuntime(
                f"the forward pass failed {self.in_a_row} times in a row; last: {type(exc).__name__}: {exc}"
            ) from exc
