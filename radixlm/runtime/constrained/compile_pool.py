"""Where grammars compile: a FIFO queue no slow schema can starve, with deadlines that really stop work.

- At most ``max_concurrent`` compiles run *young*; a compile running longer than ``slow_after_s`` stops
  counting against that cap (up to ``max_slow`` of them), so quick grammars queued behind slow ones
  start anyway: a slow schema delays only its own request.
- Past its deadline a job's future fails with ``TimeoutError`` at once, and the job is stopped through
  the kill hook it registered (a compile process is terminated and replaced on the next use). A job
  without one (an llguidance compile, bounded by its own fuel limits) keeps a slow slot until it ends.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

MAX_SLOW_COMPILES = 8
SLOW_AFTER_S = 0.5
# NOTE: a worker process imports outlines before it can compile; on a loaded machine that alone can
# outlast a short compile deadline, so starting one is bounded separately
WORKER_START_S = 120.0


class CompileJob:
    """One queued or running compile. The task may ``set_kill(fn)`` to make itself stoppable."""

    def __init__(self, task: Callable[[CompileJob], Any], timeout_s: float) -> None:
        self.task = task
        self.timeout_s = timeout_s
        self.future: Future = Future()
        self.started = 0.0  # monotonic time the pool started it (read only once running)
        self.starting_worker = False  # waiting for a fresh worker process: not yet the grammar's time
        self._kill: Callable[[], None] | None = None
        self.killed = False

    def worker_ready(self) -> None:
        """The fresh worker the job waited for is up: its deadline counts from now."""
        self.started = time.monotonic()
        self.starting_worker = False

    @property
    def limit_s(self) -> float:
        return WORKER_START_S if self.starting_worker else self.timeout_s

    def set_kill(self, kill: Callable[[], None]) -> None:
        self._kill = kill

    def kill(self) -> None:
        self.killed = True
        if self._kill is not None:
            self._kill()


class CompilePool:
    """Runs compile tasks on their own threads under the rules of the module docstring."""

    def __init__(
        self, max_concurrent: int = 2, slow_after_s: float = SLOW_AFTER_S, max_slow: int = MAX_SLOW_COMPILES
    ) -> None:
        if max_concurrent < 1:
            raise ValueError(f"grammar_max_concurrent_compiles must be >= 1, got {max_concurrent}")
        self.max_concurrent = max_concurrent
        self.slow_after_s = slow_after_s
        self.max_slow = max_slow
        self._queue: deque[CompileJob] = deque()
        self._running: list[CompileJob] = []
        self._cond = threading.Condition()
        self._closed = False
        self.stats = {"started": 0, "timed_out": 0}
        self._dispatcher = threading.Thread(target=self._dispatch, name="grammar-dispatch", daemon=True)
        self._dispatcher.start()

    def submit(self, task: Callable[[CompileJob], Any], timeout_s: float) -> Future:
        """Queue ``task(job)``; its result (or exception, or ``TimeoutError``) resolves the future."""
        job = CompileJob(task, timeout_s)
        with self._cond:
            if self._closed:
                raise RuntimeError("the grammar compile pool is shut down")
            self._queue.append(job)
            self._cond.notify_all()
        return job.future

    def _run(self, job: CompileJob) -> None:
        try:
            result = job.task(job)
        except BaseException as e:  # noqa: BLE001 - delivered to the waiting request
            self._resolve(job, error=e)
        else:
            self._resolve(job, result=result)
        finally:
            with self._cond:
                self._running.remove(job)
                self._cond.notify_all()

    @staticmethod
    def _resolve(job: CompileJob, result: Any = None, error: BaseException | None = None) -> None:
        fut = job.future
        with _RESOLVE_LOCK:
            if fut.done():
                return
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(result)

    def _dispatch(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                wake = min([now + 1.0, *(self._check(job, now) for job in self._running)])
                while self._queue and self._can_start(now):
                    job = self._queue.popleft()
                    if not job.future.done():  # not cancelled while queued
                        self._start(job, now)
                        wake = min(wake, now + self.slow_after_s)
                self._cond.wait(timeout=max(0.0, wake - time.monotonic()))

    def _check(self, job: CompileJob, now: float) -> float:
        """Stop ``job`` if past its deadline; when the dispatcher must look at it next."""
        deadline = job.started + job.limit_s
        if now >= deadline and not job.killed:
            self.stats["timed_out"] += 1
            what = "starting a grammar compile worker" if job.starting_worker else "grammar compilation"
            self._resolve(job, error=TimeoutError(f"{what} timed out after {job.limit_s:g} s"))
            job.kill()
        turns_slow = job.started + self.slow_after_s
        return min(deadline if not job.killed else now + 1.0, turns_slow if now < turns_slow else now + 1.0)

    def _start(self, job: CompileJob, now: float) -> None:
        job.started = now
        self._running.append(job)
        self.stats["started"] += 1
        threading.Thread(target=self._run, args=(job,), name="grammar-compile", daemon=True).start()

    def _can_start(self, now: float) -> bool:
        young = sum(1 for j in self._running if now - j.started < self.slow_after_s)
        return young < self.max_concurrent and len(self._running) < self.max_concurrent + self.max_slow

    def shutdown(self) -> None:
        """Fail queued jobs, stop running ones that can be stopped, end the dispatcher."""
        with self._cond:
            self._closed = True
            for job in self._queue:
                self._resolve(job, error=RuntimeError("the grammar compile pool is shut down"))
            self._queue.clear()
            for job in self._running:
                job.kill()
            self._cond.notify_all()


_RESOLVE_LOCK = threading.Lock()
