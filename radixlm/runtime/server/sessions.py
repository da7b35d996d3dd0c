"""Sessions (SGLang's ``/open_session``, ``/close_session`` and ``session_params`` on ``/generate``).

A session remembers its turns: each turn's full prompt ids and, once it finished, its output ids. A
turn sends only its new text (or ids) and names the turn it continues with ``session_params``:

    {"id": session id, "rid": the turn to continue (None: start a new branch from nothing),
     "offset": keep only this many tokens of that turn's context (None or 0: all of it),
     "replace": drop the continued turn's other branches (with no rid: every turn),
     "drop_previous_output": continue from that turn's prompt without its output}

The runtime continues from the token ids the model produced (no re-tokenization of its text), and
every finished turn's context stays pinned in the radix tree (``pin_children=1``) until the next
turn that continues it is admitted, so a conversation's earlier turns are served from the cache.

Bounds, so abandoned sessions cannot hold the KV pool: at most ``max_sessions`` are open; a session
idle for ``session_timeout`` seconds is closed (its pins released) and its pins expire in the
scheduler after as long; the scheduler drops pins first whenever a request could not be admitted.
``capacity_of_str_len`` bounds a session's context in tokens (SGLang names it in characters).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.messages import ReleasePinsReq, ReqTextOut
from radixlm.runtime.requests.request_ids import InvalidRid, check_client_rid
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.tokenizer_manager import GenerateItem, TokenizerManager

SESSION_PARAMS = {"id", "rid", "offset", "replace", "drop_previous_output"}
_PARAM_TYPES = {"id": (str,), "rid": (str,), "replace": (bool,), "drop_previous_output": (bool,)}
EXPIRY_POLL_S = 1.0


@dataclass
class Turn:
    """One request of a session: its full prompt ids and, when finished, its output ids."""

    rid: str
    parent: str | None
    input_ids: list[int]
    max_new_tokens: int
    output_ids: list[int] = field(default_factory=list)
    finished: bool = False
    pinned: bool = False  # its context is pinned in the scheduler until a child is admitted
    children: list[str] = field(default_factory=list)
    group: Any = None  # the ReqGroup it runs as, once submitted (its finish is matched by this)

    def context(self, drop_output: bool) -> list[int]:
        if drop_output:
            return list(self.input_ids)
        return self.input_ids + self.output_ids[: self.max_new_tokens]


@dataclass
class Session:
    id: str
    capacity: int  # the longest context a turn may build, in tokens
    last_used: float
    turns: dict[str, Turn] = field(default_factory=dict)


class SessionStore:
    """The open sessions of one server (the TokenizerManager's event loop is its only user)."""

    def __init__(
        self,
        tm: TokenizerManager,
        max_sessions: int,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tm = tm
        self.max_sessions = max_sessions
        self.timeout_s = timeout_s
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        # NOTE: running turns by their ReqGroup's identity, never by rid: once a turn finished, any
        # client may reuse its rid, and that request's output must not rewrite the session's history.
        self._running: dict[int, Turn] = {}
        self._task: asyncio.Task | None = None
        tm.finish_hooks.append(self._on_finished)

    def start(self) -> None:
        """Start closing idle sessions (call inside the running event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._expiry_loop())

    # ---- open / close ------------------------------------------------------------------------
    async def open(self, body: Any) -> str:
        """``{"capacity_of_str_len": int, "session_id": optional str}`` -> the session id."""
        if not isinstance(body, dict):
            raise ApiError("the request body must be a JSON object")
        await self.expire()
        capacity = body.get("capacity_of_str_len", self.tm.context_length)
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ApiError("capacity_of_str_len must be an integer >= 1", param="capacity_of_str_len")
        sid = body.get("session_id")
        if sid is not None:
            try:
                check_client_rid(sid)
            except InvalidRid as e:
                raise ApiError(str(e).replace("rid", "session_id", 1), param="session_id") from e
        sid = sid or uuid.uuid4().hex
        if sid in self.sessions:
            raise ApiError(f"session {sid!r} is already open", param="session_id")
        if len(self.sessions) >= self.max_sessions:
            raise ApiError(f"too many open sessions ({self.max_sessions}): close one first", 429)
        self.sessions[sid] = Session(sid, capacity, self.clock())
        return sid

    async def close(self, session_id: Any) -> None:
        session = self.sessions.pop(session_id, None) if isinstance(session_id, str) else None
        if session is None:
            raise ApiError(f"no open session {session_id!r}", param="session_id")
        await self._release(session)

    async def expire(self) -> None:
        """Close every session idle for longer than the timeout."""
        now = self.clock()
        for sid in [s.id for s in self.sessions.values() if now - s.last_used > self.timeout_s]:
            await self._release(self.sessions.pop(sid))

    async def _release(self, session: Session) -> None:
        """Abort the session's running turns and release the pins of its finished ones."""
        for turn in session.turns.values():
            await self._stop(turn)
            if turn.finished and turn.pinned:
                turn.pinned = False
                await self.tm.send(ReleasePinsReq([turn.rid]))

    async def _expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(min(EXPIRY_POLL_S, self.timeout_s / 4))
            await self.expire()

    # ---- turns -------------------------------------------------------------------------------
    async def prepare_turn(self, item: GenerateItem, params: Any) -> GenerateItem:
        """The item of a session turn: the continued context plus its new tokens, pinned for the next
        turn. Raises ``ApiError`` naming what is wrong with ``session_params``."""
        await self.expire()
        if not isinstance(params, dict) or not set(params) <= SESSION_PARAMS:
            raise ApiError(
                f"session_params must be an object with keys among {sorted(SESSION_PARAMS)}",
                param="session_params",
            )
        for key, kinds in _PARAM_TYPES.items():
            if params.get(key) is not None and not isinstance(params[key], kinds):
                raise ApiError(f"session_params.{key} must be a {kinds[0].__name__}", param="session_params")
        session = self.sessions.get(params.get("id"))  # type: ignore[arg-type]
        if session is None:
            raise ApiError(
                f"no open session {params.get('id')!r} (closed, expired or never opened)",
                param="session_params",
            )
        if item.sampling_params.n != 1:
            raise ApiError("a session turn needs n == 1", param="session_params")
        offset = params.get("offset")
        if offset is not None and (not isinstance(offset, int) or isinstance(offset, bool) or offset < 0):
            raise ApiError("session_params.offset must be an integer >= 0", param="session_params")
        parent = self._parent(session, params)
        if params.get("replace"):
            await self._drop_branches(session, parent)
        context: list[int] = []
        if parent is not None:
            context = parent.context(bool(params.get("drop_previous_output")))
            context = context[:offset] if offset else context
            item.add_special_tokens = False  # no BOS in the middle of a conversation
        ids = context + self.tm.tokenize(item)
        if len(ids) > session.capacity:
            raise ApiError(
                f"the session's context would hold {len(ids)} tokens, more than its capacity "
                f"({session.capacity})",
                param="session_params",
            )
        rid = item.rid or uuid.uuid4().hex
        if rid in session.turns:
            raise ApiError(f"rid {rid!r} is already a turn of this session", param="rid")
        turn = Turn(rid, parent.rid if parent else None, ids, item.sampling_params.max_new_tokens)
        session.turns[rid] = turn
        session.last_used = self.clock()
        unpin = []
        if parent is not None:
            parent.children.append(rid)
            if parent.pinned:  # this turn's admission releases the parent's pin (its own lock takes over)
                parent.pinned = False
                unpin = [parent.rid]
        return GenerateItem(
            item.sampling_params,
            input_ids=ids,
            rid=rid,
            return_logprob=item.return_logprob,
            logprob_start_len=item.logprob_start_len,
            top_logprobs_num=item.top_logprobs_num,
            pin_children=1,
            unpin_rids=unpin,
            pin_timeout_s=self.timeout_s,
            priority=item.priority,
        )

    def forget_turn(self, session_id: Any, rid: str) -> None:
        """A turn the front door rejected: it never ran and continues nothing."""
        session = self.sessions.get(session_id)
        turn = session.turns.pop(rid, None) if session else None
        if turn is not None:
            parent = session.turns.get(turn.parent) if turn.parent else None
            if parent is not None and rid in parent.children:
                parent.children.remove(rid)

    def _parent(self, session: Session, params: dict[str, Any]) -> Turn | None:
        rid = params.get("rid")
        if rid is None:
            return None
        turn = session.turns.get(rid)
        if turn is None:
            raise ApiError(
                f"session_params.rid {rid!r} is not a turn of session {session.id!r}", param="session_params"
            )
        if not turn.finished:
            raise ApiError(
                f"turn {rid!r} has not finished: a turn continues a finished one", param="session_params"
            )
        return turn

    async def _drop_branches(self, session: Session, parent: Turn | None) -> None:
        """``replace``: forget the turns after the continued one (with no rid: every turn); running
        ones are aborted, pinned ones released."""
        doomed = list(session.turns) if parent is None else self._descendants(session, parent)
        for rid in doomed:
            turn = session.turns.pop(rid)
            await self._stop(turn)
            if turn.finished and turn.pinned:
                turn.pinned = False
                await self.tm.send(ReleasePinsReq([rid]))
        if parent is not None:
            parent.children = []

    def _descendants(self, session: Session, turn: Turn) -> list[str]:
        out, stack = [], list(turn.children)
        while stack:
            rid = stack.pop()
            child = session.turns.get(rid)
            if child is not None:
                out.append(rid)
                stack.extend(child.children)
        return out

    def bind(self, session_id: str, rid: str, group: Any) -> None:
        """Turn ``rid`` of the session was submitted as ``group``: from now on its output is the
        output of exactly that group."""
        session = self.sessions.get(session_id)
        turn = session.turns.get(rid) if session is not None else None
        if turn is not None:
            turn.group = group
            self._running[id(group)] = turn

    async def _stop(self, turn: Turn) -> None:
        """Abort a running turn (its own group, not whatever runs under its rid now)."""
        if turn.group is not None and self._running.pop(id(turn.group), None) is turn:
            await self.tm.abort(turn.group)

    def _on_finished(self, sample: Any, out: ReqTextOut) -> None:
        turn = self._running.get(id(sample.group))
        if turn is None or turn.group is not sample.group:
            return
        del self._running[id(sample.group)]
        turn.output_ids = [int(t) for t in out.output_ids]
        turn.finished = True
        reason = out.meta_info.get("finish_reason") or {}
        turn.pinned = reason.get("type") != "abort"  # the scheduler pins a turn that ended normally
