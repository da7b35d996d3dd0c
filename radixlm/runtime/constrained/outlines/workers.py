"""Grammar worker processes (``compile_worker``): reused while healthy, killed at a deadline, replaced on
demand, each with its address space capped (``WORKER_MEMORY_BYTES``). outlines-core compiles and checks
regexes there, and the grammars whose structure a client controls (``ebnf``, ``structural_tag``) are
turned into llguidance grammars and checked there before the scheduler compiles them: a crash or a
runaway allocation ends only the worker, and the request with a 400."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from radixlm.runtime.constrained.compile_pool import CompileJob
from radixlm.runtime.constrained.outlines.compile_worker import read_sized_frame, write_frame
from radixlm.runtime.constrained.vocabulary import TokenVocabulary

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[4])
WORKER_MEMORY_BYTES = 4 << 30


class _Worker:
    def __init__(self, vocab: TokenVocabulary) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "radixlm.runtime.constrained.outlines.compile_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are pipes
        self._requests, self._replies = self.proc.stdin, self.proc.stdout
        write_frame(self._requests, (vocab.eos_token_id, vocab.byte_map(), WORKER_MEMORY_BYTES))

    def wait_ready(self) -> None:
        """Block until the process has imported its libraries and read its vocabulary."""
        read_sized_frame(self._replies)

    def call(self, request: tuple) -> tuple[Any, int]:
        """The reply to ``request`` and its size in bytes."""
        write_frame(self._requests, request)
        return read_sized_frame(self._replies)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        """Stop the process (safe from another thread: a pending read then sees EOF)."""
        if self.proc.poll() is None:
            self.proc.kill()

    def kill(self) -> None:
        self.terminate()
        self.proc.wait()
        for stream in (self._requests, self._replies):
            try:
                stream.close()
            except OSError:
                pass


class GrammarWorkers:
    """Idle worker processes for one vocabulary; every call runs inside a ``CompilePool`` job."""

    def __init__(self, vocab: TokenVocabulary) -> None:
        self.vocab = vocab
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False

    def compile(self, job: CompileJob, kind: str, text: str, whitespace_pattern: str) -> tuple:
        """``(regex, index, fsm, size)`` from a worker process, ``size`` the bytes the compiled grammar
        took to send (about what it holds in memory); ``ValueError`` for an unsupported grammar."""
        return self.call(job, ("compile", kind, text, whitespace_pattern))

    def check_regex(self, job: CompileJob, regex: str) -> None:
        """``ValueError`` unless outlines-core can compile ``regex``."""
        self.call(job, ("check_regex", regex))

    def llguidance_grammar(self, job: CompileJob, kind: str, text: str, whitespace_pattern: str) -> str:
        """llguidance's grammar text for ``(kind, text)``, built and checked where a crash is harmless;
        ``ValueError`` naming what llguidance rejects."""
        return self.call(job, ("llguidance_grammar", kind, text, whitespace_pattern))[0]

    def call(self, job: CompileJob, request: tuple) -> tuple:
        """The result of ``request`` in a worker; ``ValueError`` for the worker's error, ``TimeoutError``
        when the job was stopped at its deadline, ``ValueError`` too when the worker died (a crash or
        its memory cap: the grammar is what killed it)."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        fresh = worker is None
        if worker is None:
            job.starting_worker = True
            worker = _Worker(self.vocab)
        job.set_kill(worker.terminate)
        try:
            if fresh:
                worker.wait_ready()
                job.worker_ready()
            reply, size = worker.call(request)
        except (EOFError, OSError):
            worker.kill()
            if job.killed:
                raise TimeoutError("grammar compilation was stopped at its deadline") from None
            limit = WORKER_MEMORY_BYTES >> 30
            raise ValueError(
                f"the grammar crashed its compile worker (exit {worker.proc.returncode}) or needed more "
                f"than its {limit} GiB memory limit"
            ) from None
        with self._lock:
            if worker.alive() and not job.killed and not self._closed:
                self._idle.append(worker)
            else:
                worker.kill()
        if reply[0] == "error":
            raise ValueError(reply[1])
        return (*reply[1:], size)

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()
