"""One compiled kernel module as a process sees it: absent, being built in the background, loaded,
or given up on.

``get()`` never waits on a compiler: it returns the kernels once they are loaded, else None (the
caller serves on torch ops), and meanwhile has them built by a separate process (the compiler holds
neither this process's GIL nor its scheduler loop) whose result it loads once that process is done.
``wait()`` builds in this process and returns the kernels (``radixlm build-kernels``, tests,
benchmarks). A machine that cannot build them (no AVX2, no compiler) or a failed build gives up once,
with one warning, and the torch ops serve from then on.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)
Kernels = TypeVar("Kernels")
POLL_SECONDS = 0.5  # how often a pending build is looked at (a look is a syscall, not a wait)


@dataclass(frozen=True)
class SlotBuilder:
    """How a slot finds out about, builds and loads its module (``build.py`` provides them)."""

    unavailable_reason: Callable[[], str | None]  # why it can never be built here, or None
    import_built: Callable[[], ModuleType | None]  # the finished build, or None when there is none
    build: Callable[[], ModuleType]  # build (or reuse) and import it in this process
    start_build: Callable[[], subprocess.Popen]  # build it in a separate process


class KernelSlot(Generic[Kernels]):
    """The kernels of one extension module (``name``), wrapped by ``wrap`` once loaded."""

    def __init__(self, name: str, wrap: Callable[[ModuleType], Kernels], builder: SlotBuilder) -> None:
        self.name, self._wrap, self._builder = name, wrap, builder
        self._kernels: Kernels | None = None
        self._given_up: str | None = None
        self._process: subprocess.Popen | None = None
        self._next_poll = 0.0
        self._lock = threading.Lock()

    def get(self) -> Kernels | None:
        """The kernels if loaded now, else None (starting or checking a background build)."""
        kernels = self._kernels
        if kernels is not None or self._given_up is not None or time.monotonic() < self._next_poll:
            return kernels
        with self._lock:
            if self._kernels is None and self._given_up is None:
                self._poll()
                self._next_poll = time.monotonic() + POLL_SECONDS
        return self._kernels

    def wait(self) -> Kernels | None:
        """The kernels, built in this process if need be; None (warned once) when they cannot be."""
        with self._lock:
            if self._kernels is None and self._given_up is None:
                reason = self._builder.unavailable_reason()
                if reason is not None:
                    self._give_up(reason)
                else:
                    try:
                        self._adopt(self._builder.build())
                    except Exception as exc:  # a compiler error must not take the server down
                        self._give_up(f"building {self.name} failed: {exc}")
        return self._kernels

    def pending(self) -> bool:
        """Whether a build may still make the kernels available to this process."""
        return self._kernels is None and self._given_up is None

    @contextlib.contextmanager
    def replaced(self, kernels: Kernels | None) -> Iterator[None]:
        """Serve ``kernels`` (None: the torch ops) inside the block (A/B benchmarks, tests)."""
        saved = self._kernels, self._given_up
        self._kernels, self._given_up = kernels, None if kernels is not None else "replaced"
        try:
            yield
        finally:
            self._kernels, self._given_up = saved

    def _poll(self) -> None:
        if self._process is None:
            reason = self._builder.unavailable_reason()
            if reason is not None:
                self._give_up(reason)
                return
            module = self._import_built()
            if module is not None:
                self._adopt(module)
                return
            self._process = self._builder.start_build()
            logger.warning("building the %s kernels in the background; torch ops serve meanwhile", self.name)
            return
        returncode = self._process.poll()
        if returncode is None:
            return
        module = self._import_built() if returncode == 0 else None
        if module is None:
            self._give_up(f"the background build of {self.name} failed (exit status {returncode})")
        else:
            self._adopt(module)
            logger.warning("the %s kernels are built and now serve", self.name)

    def _import_built(self) -> ModuleType | None:
        try:
            return self._builder.import_built()
        except Exception as exc:  # a corrupt library: rebuilt by the next build
            logger.warning("could not load the built %s kernels: %s", self.name, exc)
            return None

    def _adopt(self, module: ModuleType) -> None:
        self._kernels = self._wrap(module)

    def _give_up(self, reason: str) -> None:
        self._given_up = reason
        logger.warning("%s CPU kernels unavailable (%s); using torch ops", self.name, reason)
