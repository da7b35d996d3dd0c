"""The torch profiler around the scheduler's steps (``/start_profile``, ``/stop_profile``).

One Chrome trace (``.trace.json.gz``, readable by Perfetto and ``chrome://tracing``) per scheduler
process, written when profiling stops: by ``/stop_profile`` or after ``num_steps`` forward steps.
"""

from __future__ import annotations

import contextlib
import os
import time

import torch
from torch.profiler import ProfilerActivity

ENV_DIR = "SGLANG_TORCH_PROFILER_DIR"  # SGLang's variable, honoured when --profile-dir is not given
ACTIVITIES = ("CPU", "GPU", "CUDA", "MEM")


class StepProfiler:
    """At most one profile at a time; ``start``/``stop`` raise ValueError on misuse."""

    def __init__(self, default_dir: str | None, rank: int = 0) -> None:
        self.default_dir = default_dir or os.environ.get(ENV_DIR) or "/tmp"
        self.rank = rank
        self._prof: torch.profiler.profile | None = None
        self._dir = ""
        self._steps_left: int | None = None
        self.last_trace: str | None = None

    @property
    def active(self) -> bool:
        return self._prof is not None

    def start(self, output_dir: str | None, num_steps: int | None, activities: list[str] | None) -> str:
        """Begin recording; returns where the trace will go."""
        if self._prof is not None:
            raise ValueError("profiling is already running: call /stop_profile first")
        if num_steps is not None and num_steps < 1:
            raise ValueError(f"num_steps must be at least 1, got {num_steps}")
        names = [a.upper() for a in (activities or ["CPU", "GPU"])]
        unknown = [a for a in names if a not in ACTIVITIES]
        if unknown:
            raise ValueError(f"unsupported profiler activities {unknown}; use {list(ACTIVITIES)}")
        kinds = [ProfilerActivity.CPU] if "CPU" in names or not names else []
        if ("GPU" in names or "CUDA" in names) and torch.cuda.is_available():
            kinds.append(ProfilerActivity.CUDA)
        directory = output_dir or self.default_dir
        os.makedirs(directory, exist_ok=True)
        prof = torch.profiler.profile(activities=kinds or None, profile_memory="MEM" in names)
        prof.start()
        self._prof, self._dir, self._steps_left = prof, directory, num_steps
        return directory

    def span(self, name: str) -> contextlib.AbstractContextManager[object]:
        """A named range in the trace while profiling (our CPU kernels are not dispatcher ops, so a
        forward's products would otherwise be unnamed time); nothing otherwise."""
        return torch.profiler.record_function(name) if self._prof is not None else contextlib.nullcontext()

    def on_forward_step(self) -> None:
        """Count a step that ran the model; stops by itself after ``num_steps`` of them."""
        if self._steps_left is None:
            return
        self._steps_left -= 1
        if self._steps_left <= 0:
            self.stop()

    def stop(self) -> str:
        """Stop and write the trace; returns its path."""
        if self._prof is None:
            raise ValueError("profiling is not running: call /start_profile first")
        prof, self._prof, self._steps_left = self._prof, None, None
        prof.stop()
        name = f"{time.strftime('%Y%m%d-%H%M%S')}-pid{os.getpid()}-rank{self.rank}.trace.json.gz"
        path = os.path.join(self._dir, name)
        prof.export_chrome_trace(path)
        self.last_trace = path
        return path
