"""The scheduler's operations messages: a weight update (``/update_weights_from_disk``) and the
profiler (``/start_profile``, ``/stop_profile``).

Requests in flight when weights are updated finish on the old weights: while any runs, the update
answers ``busy``, new prompts are not admitted (they wait in the queue) and the sender retries. Once
none runs the weights are swapped and the prefix cache is dropped (its KV came from the old weights);
the waiting requests then prefill on the new ones.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from radixlm.runtime.messages import ProfileOut, ProfileReq, UpdateWeightsOut, UpdateWeightsReq
from radixlm.runtime.scheduler.step_profiler import StepProfiler

if TYPE_CHECKING:
    from radixlm.runtime.scheduler.scheduler import Scheduler

logger = logging.getLogger(__name__)
# how long admission stays held after an update found requests running (the sender retries sooner)
UPDATE_HOLD_S = 2.0


def update_weights(sched: Scheduler, msg: UpdateWeightsReq) -> UpdateWeightsOut:
    """Swap in new weights once no request runs (until then hold admission and answer busy)."""
    if sched.running or sched.chunked:
        sched.hold_admission_until = time.monotonic() + UPDATE_HOLD_S
        return UpdateWeightsOut(False, "waiting for the running requests to finish", busy=True)
    sched.hold_admission_until = 0.0
    from radixlm.runtime.executor.weight_update import update_weights_from_disk

    try:
        message = update_weights_from_disk(sched.runner, msg.model_path, msg.load_format)
    except Exception as exc:  # noqa: BLE001 - any failure to load leaves the old weights serving
        logger.warning("weights not updated from %s: %r", msg.model_path, exc)
        return UpdateWeightsOut(False, f"weights not updated: {exc}")
    sched.pins.release_all()
    sched.cache.weights_changed(msg.model_path)
    logger.info("weights updated: %s", message)
    return UpdateWeightsOut(True, message)


def profile(profiler: StepProfiler, msg: ProfileReq) -> ProfileOut:
    """Start or stop ``profiler``; misuse (already started, not started, bad options) fails."""
    try:
        if msg.action == "start":
            where = profiler.start(msg.output_dir, msg.num_steps, msg.activities)
            return ProfileOut(True, f"profiling; the trace goes to {where}")
        return ProfileOut(True, f"trace written to {profiler.stop()}")
    except (ValueError, OSError, RuntimeError) as exc:  # misuse, an unwritable directory, torch's refusal
        return ProfileOut(False, str(exc))
