"""The Engine's scheduler loop on a background thread, fed through one inbox of submissions."""

from __future__ import annotations

import logging
import queue
import threading
import traceback
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from radixlm.runtime.engine.tracker import RequestTracker, Sink
from radixlm.runtime.messages import (
    AbortReq,
    EncodeReq,
    FlushCacheReq,
    GetStatsReq,
    ProfileReq,
    ReleasePinsReq,
    TokenizedGenerateReq,
    UpdateWeightsReq,
)
from radixlm.runtime.requests.response_builder import TokenText

logger = logging.getLogger(__name__)

IDLE_POLL_S = 0.05


class EngineError(RuntimeError):
    """The engine's loop died; every pending and later call raises this with the cause."""


@dataclass(frozen=True)
class GenerateSubmission:
    """Track ``req`` (responses go to ``sink``) and hand it to the scheduler."""

    req: TokenizedGenerateReq
    token_text: TokenText | None  # set when logprob entries carry the token's text
    sink: Sink


@dataclass(frozen=True)
class SchedulerCall:
    """A control message for the scheduler; ``reply`` (when given) gets its answer or exception."""

    msg: AbortReq | FlushCacheReq | GetStatsReq | ReleasePinsReq | UpdateWeightsReq | ProfileReq | EncodeReq
    reply: Future | None = None


@dataclass(frozen=True)
class IntegrityCheck:
    """Check KV ownership once the scheduler is idle; ``reply`` gets True or the failure."""

    reply: Future


@dataclass(frozen=True)
class Wake:
    """Wakes the loop (to notice that it is stopping)."""


Submission = GenerateSubmission | SchedulerCall | IntegrityCheck | Wake


class EngineLoop:
    """Runs ``scheduler.step()`` while there is work; applies submissions between steps."""

    def __init__(self, scheduler: Any, tokenizer: Any) -> None:
        self.scheduler = scheduler
        self.tokenizer = tokenizer
        self.error: BaseException | None = None
        self._inbox: queue.Queue[Submission] = queue.Queue()
        self._trackers: dict[str, RequestTracker] = {}
        # NOTE: client rids are reserved by the caller's thread before submission, with the internal
        # ids of the requests they spawned (their samples), and freed by the loop when the last one
        # finishes: two requests in flight never share a rid, and an abort names exactly one family.
        self._families: dict[str, set[str]] = {}  # client rid -> internal ids still running
        self._parent_of: dict[str, str] = {}  # internal id -> client rid
        self._rids_lock = threading.Lock()
        self._deferred: list[IntegrityCheck] = []  # integrity checks wait for idle
        self._encodes: dict[str, Future] = {}  # EncodeReq rid -> its caller's answer (take_replies)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="radixlm-engine", daemon=True)
        self._thread.start()

    def submit(self, submission: Submission) -> None:
        """Queue ``submission``; raises ``EngineError`` when the loop died or was stopped."""
        self.check_alive()
        self._inbox.put(submission)

    def reserve(self, reqs: list[TokenizedGenerateReq]) -> None:
        """Claim the client rids of ``reqs`` (a sample's is its ``group_rid``) and register the
        samples under them; ``ValueError`` (and nothing claimed) when a client rid is in flight."""
        with self._rids_lock:
            parents = {req.rid: req.group_rid or req.rid for req in reqs}
            taken = next((p for p in parents.values() if p in self._families), None)
            if taken is not None:
                raise ValueError(f"a request with rid {taken!r} is already running")
            for rid, parent in parents.items():
                self._families.setdefault(parent, set()).add(rid)
                self._parent_of[rid] = parent

    def reserve_encode(self, rid: str) -> None:
        """Claim ``rid`` for an ``EncodeReq`` (its own family, so ``Engine.abort`` names it); freed
        when its answer comes; ``ValueError`` when a request with that rid is in flight."""
        with self._rids_lock:
            if rid in self._families:
                raise ValueError(f"a request with rid {rid!r} is already running")
            self._families[rid] = {rid}
            self._parent_of[rid] = rid

    def family(self, rid: str) -> list[str]:
        """The internal ids still running for client rid ``rid`` (none when it is not in flight)."""
        with self._rids_lock:
            return sorted(self._families.get(rid, ()))

    def _release(self, rid: str) -> None:
        with self._rids_lock:
            parent = self._parent_of.pop(rid, None)
            family = self._families.get(parent) if parent is not None else None
            if family is not None:
                family.discard(rid)
                if not family:
                    del self._families[parent]

    def post(self, submission: Submission) -> None:
        """Queue ``submission`` without checking the loop (fire and forget)."""
        self._inbox.put(submission)

    def call(self, msg: FlushCacheReq | GetStatsReq | UpdateWeightsReq | ProfileReq | EncodeReq) -> Any:
        """The scheduler's answer to a control message (waits for the loop)."""
        reply: Future = Future()
        self.submit(SchedulerCall(msg, reply))
        return reply.result()

    def check_integrity(self) -> None:
        reply: Future = Future()
        self.submit(IntegrityCheck(reply))
        reply.result()

    def check_alive(self) -> None:
        if self.error is not None:
            raise EngineError(f"the engine loop died: {self.error!r}") from self.error
        if self._stopping.is_set():
            raise EngineError("the engine is shut down")

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stopping.set()
        self._inbox.put(Wake())
        self._thread.join(timeout=timeout_s)

    # ---- the loop thread ----------------------------------------------------------------------
    def _run(self) -> None:
        sched = self.scheduler
        try:
            while not self._stopping.is_set():
                for submission in self._drain_inbox(block=not sched.has_work() and not self._deferred):
                    self._apply(submission)
                for out in sched.step():
                    tracker = self._trackers.get(out.rid)
                    if tracker is not None:
                        tracker.on_output(out)
                        if out.finished:
                            del self._trackers[out.rid]
                            self._release(out.rid)
                for reply in sched.take_replies():
                    self._release(reply.rid)
                    future = self._encodes.pop(reply.rid, None)
                    if future is not None:
                        future.set_result(reply)
                if self._deferred and not sched.has_work():
                    self._run_integrity_checks()
        except BaseException as e:
            logger.error("engine loop died:\n%s", traceback.format_exc())
            self.error = e
        finally:
            for tracker in self._trackers.values():
                tracker.sink(None)
            self._trackers.clear()
            with self._rids_lock:
                self._families.clear()
                self._parent_of.clear()
            for check in self._deferred:
                check.reply.set_exception(EngineError("the engine stopped"))
            for future in self._encodes.values():
                future.set_exception(EngineError("the engine stopped"))

    def _drain_inbox(self, block: bool) -> list[Submission]:
        items: list[Submission] = []
        try:
            items.append(self._inbox.get(timeout=IDLE_POLL_S) if block else self._inbox.get_nowait())
            while True:
                items.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        return items

    def _apply(self, submission: Submission) -> None:
        if isinstance(submission, GenerateSubmission):
            req, sink = submission.req, submission.sink
            self._trackers[req.rid] = RequestTracker(req, self.tokenizer, submission.token_text, sink)
            self.scheduler.handle(req)  # an error taking it in fails this request only
        elif isinstance(submission, IntegrityCheck):
            self._deferred.append(submission)
        elif isinstance(submission, SchedulerCall) and isinstance(submission.msg, EncodeReq):
            if submission.reply is not None:  # answered after the step that completes it
                self._encodes[submission.msg.rid] = submission.reply
            try:
                self.scheduler.handle(submission.msg)
            except Exception as e:
                self._release(submission.msg.rid)
                future = self._encodes.pop(submission.msg.rid, None)
                if future is not None:
                    future.set_exception(e)
        elif isinstance(submission, SchedulerCall):
            try:
                answer = self.scheduler.handle(submission.msg)
            except Exception as e:
                if submission.reply is not None:
                    submission.reply.set_exception(e)
                return
            if submission.reply is not None:
                submission.reply.set_result(answer)

    def _run_integrity_checks(self) -> None:
        for check in self._deferred:
            try:
                self.scheduler.check_kv_integrity()
                check.reply.set_result(True)
            except BaseException as e:  # report to the caller, keep serving
                check.reply.set_exception(e)
        self._deferred = []
