"""The interpreter: runs a program's expressions eagerly, one executor per program state.

Each executor owns a state's text, model context (``radixlm.program.context``: the text plus
each gen's token ids), messages and variables. Expressions are queued and executed in
order on a worker thread (or inline), so ``s += gen(...)`` returns at once and ``s["x"]`` waits only
for ``x``. A failure is kept with its cause and re-raised from ``s[...]``, ``sync()`` and ``run()``;
nothing is swallowed. After a compiled run, the same executors replay the program with the graph's
results instead of calling the backend (``radixlm.frontend.replay``).
"""

from __future__ import annotations

import copy
import itertools
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from radixlm.frontend.api_speculation import ChatTurn, first_output, speculation
from radixlm.frontend.backends.base import Backend
from radixlm.frontend.chat_template import ChatTemplate, Turns
from radixlm.frontend.errors import ProgramError
from radixlm.frontend.ir import (
    Argument,
    Constant,
    Expr,
    Gen,
    Image,
    RoleBegin,
    RoleEnd,
    Select,
    SeparateReasoning,
    VarKey,
    VarRef,
    VarScopeBegin,
    VarScopeEnd,
    VarVersions,
    as_expr,
)
from radixlm.program.context import Context, extend
from radixlm.program.protocols import drive, gen_outcome, gen_protocol, gen_request
from radixlm.program.reasoning import separate_reasoning
from radixlm.program.sampling import sampling_options

Replay = dict[tuple[int, int], tuple[Any, dict[str, Any]]]  # (state id, op index) -> (value, meta_info)


@dataclass
class RunContext:
    """What all states of one program run share."""

    backend: Backend | None
    defaults: dict[str, Any]
    chat_template: ChatTemplate
    stream: bool = False
    replay: Replay | None = None
    api_spec_tokens: int | None = None  # SGLang's num_api_spec_tokens (radixlm.frontend.api_speculation)
    var_refs: dict[VarKey, Any] = field(default_factory=dict)  # each generation's value, for VarRef reads
    # NOTE: shared by the states' worker threads; safe because each thread numbers only its own state's keys.
    versions: VarVersions = field(default_factory=VarVersions)
    executors: list[StreamExecutor] = field(default_factory=list)
    _ids: Any = field(default_factory=itertools.count)

    def next_state_id(self) -> int:
        return next(self._ids)

    def end_all(self) -> None:
        """The program finished: stop every state's worker."""
        for executor in self.executors:
            executor.end()


class StreamExecutor:
    """Executes the expressions of one program state."""

    def __init__(self, ctx: RunContext, use_thread: bool = True) -> None:
        self.ctx = ctx
        self.state_id = ctx.next_state_id()
        ctx.executors.append(self)
        self.text_ = ""
        self.context: Context = []  # what the model sees: text_ with each gen's output ids, and images:
        self.images: list[str] = []  # the image() payloads, in order (their placeholders are in text_)
        self.messages_: list[dict[str, str]] = []
        self.variables: dict[str, Any] = {}
        self.meta_info: dict[str, Any] = {}
        self.error_: BaseException | None = None
        self._var_events: dict[str, threading.Event] = {}
        self._turns = Turns(ctx.chat_template)
        self._role_start = 0  # where the open turn's content starts in text_
        self._op_index = self._fork_point = 0
        self._scopes: dict[str, int] = {}  # open var_scope blocks: name -> where their text starts
        self._spec_chat, self._spec_text = speculation(ctx.backend, ctx.api_spec_tokens, ctx.stream)
        self._spec_turn: ChatTurn | None = None  # the open assistant turn, held back (chat API)
        # Streaming: every appended piece of text as (variable name or None, chunk).
        self._chunks: list[tuple[str | None, str]] = []
        self._cond = threading.Condition()
        self._finished = self._ended = False
        self._queue: queue.Queue | None = None
        if use_thread:
            self._queue = queue.Queue()
            threading.Thread(target=self._work, daemon=True, name=f"radixlm-state-{self.state_id}").start()

    @property
    def is_finished(self) -> bool:
        """Whether the state's program has ended (SGLang's ``stream_executor.is_finished``)."""
        return self._finished

    # ---- submission -------------------------------------------------------------------------
    def submit(self, expr: Any) -> None:
        """Queue an expression (or run it now without a worker thread)."""
        if self._finished or self._ended:
            raise RuntimeError("this program has finished; run another program to continue")
        leaves = as_expr(expr).flatten()
        for leaf in leaves:
            if leaf.output_var is not None:
                self._var_events.setdefault(leaf.output_var, threading.Event()).clear()
        if self._queue is not None:
            self._queue.put(leaves)
        else:
            self._run(leaves)
            self._raise_if_failed()

    def end(self) -> None:
        """No more expressions: let the worker exit and text iterators finish."""
        if self._ended:
            return
        self._ended = True
        if self._queue is not None:
            self._queue.put(None)
        else:
            self._finish()

    def sync(self) -> None:
        """Wait until every queued expression ran; raise ``ProgramError`` if one failed."""
        if self._queue is not None:
            self._queue.join()
        self._raise_if_failed()

    def _work(self) -> None:
        assert self._queue is not None
        while True:
            leaves = self._queue.get()
            try:
                if leaves is None:
                    self._finish()
                    return
                if self.error_ is None:
                    self._run(leaves)
            finally:
                self._queue.task_done()

    def _run(self, leaves: list[Expr]) -> None:
        try:
            for leaf in leaves:
                self._execute(leaf)
        except BaseException as exc:  # noqa: BLE001 - kept and re-raised to the program's caller
            self.error_ = exc
            for event in self._var_events.values():
                event.set()
            with self._cond:
                self._cond.notify_all()

    def _finish(self) -> None:
        with self._cond:
            self._finished = True
            self._cond.notify_all()

    def _raise_if_failed(self) -> None:
        if self.error_ is not None:
            raise ProgramError.wrapping(self.error_) from self.error_

    # ---- variables --------------------------------------------------------------------------
    def get_var(self, name: str) -> Any:
        """The value of ``name``, waiting until it is generated."""
        event = self._var_events.get(name)
        if event is not None:
            event.wait()
        if name not in self.variables:
            self._raise_if_failed()
            raise KeyError(f"program state has no variable {name!r}")
        return self.variables[name]

    def set_var(self, name: str, value: Any) -> None:
        self.variables[name] = value
        self._var_events.setdefault(name, threading.Event()).set()

    # ---- execution of one leaf --------------------------------------------------------------
    def _execute(self, leaf: Expr) -> None:
        if isinstance(leaf, Constant):
            self._fill(leaf.value)
        elif isinstance(leaf, Gen):
            self._gen(leaf)
        elif isinstance(leaf, Select):
            self._select(leaf)
        elif isinstance(leaf, RoleBegin):
            self._role_begin(leaf.role)
        elif isinstance(leaf, RoleEnd):
            self._role_end(leaf.role)
        elif isinstance(leaf, VarRef):
            self._fill(str(self.ctx.var_refs[leaf.key]))
        elif isinstance(leaf, Image):
            placeholder, payload = self._backend().image_input(leaf.path)
            self.images.append(payload)  # every later request of this state carries it
            self._fill(placeholder)
        elif isinstance(leaf, SeparateReasoning):
            reasoning, answer = separate_reasoning(str(self.get_var(leaf.name)), leaf.model_type)
            self.set_var(leaf.name, answer)
            self.set_var(f"{leaf.name}_reasoning_content", reasoning)
        elif isinstance(leaf, VarScopeBegin):
            self._scopes[leaf.name] = len(self.text_)
        elif isinstance(leaf, VarScopeEnd):
            self._store(leaf.name, self.text_[self._scopes.pop(leaf.name, len(self.text_)) :], {})
        elif isinstance(leaf, Argument):
            raise ValueError(f"argument {leaf.name!r} was not given a value")
        else:
            raise TypeError(f"unknown expression {leaf!r}")

    def _fill(self, text: str) -> None:
        """Append the program's own text; under API speculation it is held back or checked first."""
        if self._spec_turn is not None:
            return self._spec_turn.fill(text)
        if self._spec_text is not None:
            self._spec_text.fill(text)
        self._append(text)

    def _append(self, text: str, var: str | None = None) -> None:
        """Append visible text (and the same text to the context)."""
        self._extend(text, var, [{"text": text}])

    def _extend(self, text: str, var: str | None, segments: Context) -> None:
        """Append ``text`` to the visible text and ``segments`` to the context."""
        self.text_ += text
        extend(self.context, segments)
        with self._cond:
            self._chunks.append((var, text))
            self._cond.notify_all()

    def _next_op(self) -> tuple[int, int]:
        key = (self.state_id, self._op_index)
        self._op_index += 1
        return key

    def _store(self, name: str | None, value: Any, meta: dict[str, Any]) -> None:
        if name is None:
            return
        self.ctx.var_refs[self.ctx.versions.next_key(self.state_id, name)] = value
        self.variables[name] = value
        self.meta_info[name] = meta
        self._var_events.setdefault(name, threading.Event()).set()

    def _gen(self, gen: Gen) -> None:
        key = self._next_op()
        options = sampling_options(self.ctx.defaults, gen.params)
        if self.ctx.replay is not None:
            value, meta = self.ctx.replay[key]
            self._append(value if isinstance(value, str) else "", gen.name)
        elif self._spec_turn is not None:
            return self._spec_turn.add_gen(gen.name, options)  # filled when the turn ends
        elif self._spec_text is not None:
            value, meta = self._spec_text.gen(options, self._spec_generate)
            self._append(value, gen.name)
        elif self.ctx.stream and options.get("n", 1) == 1:
            value, meta = self._gen_streaming(options, gen.name)
        else:
            value, meta, segments = drive(gen_protocol(self.context, options), self._generate)
            self._extend(value if isinstance(value, str) else "", gen.name, segments)
        self._store(gen.name, value, meta)

    def _spec_generate(self, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return first_output(self._generate(gen_request(self.context, options)))

    def _gen_streaming(self, options: dict[str, Any], name: str | None) -> tuple[Any, dict[str, Any]]:
        """Show text chunks as they arrive; the context gets the final outcome's segments."""
        req = self._with_messages(gen_request(self.context, options))
        backend = self._backend()
        backend.check_request(req)
        sent = 0
        last: dict[str, Any] | None = None
        for last in backend.generate_stream(req):
            text = last["text"]
            if len(text) > sent:
                self._extend(text[sent:], name, [])
                sent = len(text)
        if last is None:
            raise RuntimeError("the backend's stream ended without a response")
        outcome = gen_outcome(last, options)
        extend(self.context, outcome.continuation)
        return outcome.value, outcome.meta_info

    def _select(self, sel: Select) -> None:
        key = self._next_op()
        if self.ctx.replay is not None:
            value, meta = self.ctx.replay[key]
        elif self._spec_turn is not None:
            raise ValueError("select in an assistant turn under num_api_spec_tokens: use gen there")
        else:
            value, meta = self._backend().select(
                self.context, sel.choices, sel.method, self._messages_for_request()
            )
        self._append(value, sel.name)
        self._store(sel.name, value, meta)

    def _generate(self, req: dict[str, Any]) -> Any:
        req = self._with_messages(req)
        backend = self._backend()
        backend.check_request(req)
        return backend.generate(req)

    def _with_messages(self, req: dict[str, Any]) -> dict[str, Any]:
        req = {**req, "image_data": list(self.images)} if self.images else req
        if self.ctx.backend is not None and self.ctx.backend.chat_mode:
            req = {**req, "messages": self._messages_for_request()}
        return req

    def _messages_for_request(self) -> list[dict[str, str]]:
        """Finished turns plus the open one (its content so far), for chat-completion APIs."""
        msgs = list(self.messages_)
        if self._turns.open_role is not None:
            msgs.append({"role": self._turns.open_role, "content": self.text_[self._role_start :]})
        return msgs

    def _backend(self) -> Backend:
        if self.ctx.backend is None:
            raise ValueError("no backend: pass backend= or call radixlm.set_default_backend()")
        return self.ctx.backend

    # ---- roles ------------------------------------------------------------------------------
    def _role_begin(self, role: str) -> None:
        self._fill(self._turns.begin(role))
        self._role_start = len(self.text_)
        self._spec_turn = ChatTurn(self._spec_chat) if self._spec_chat and role == "assistant" else None

    def _role_end(self, role: str) -> None:
        if self._spec_turn is not None:
            turn, self._spec_turn = self._spec_turn, None
            pieces, meta = turn.resolve(self._spec_generate)
            for piece in pieces:
                self._append(piece.text, piece.name)
                self._store(piece.name, piece.text, meta)
        suffix = self._turns.end(role)
        self.messages_.append({"role": role, "content": self.text_[self._role_start :]})
        self._fill(suffix)

    # ---- fork and join ----------------------------------------------------------------------
    def fork(self, size: int) -> list[StreamExecutor]:
        """Child executors that start from this state's text, messages and variables."""
        self.sync()
        if self.ctx.replay is None and self.ctx.backend is not None and self.context:
            self.ctx.backend.cache_prefix(self.context)
        children = []
        for _ in range(size):
            child = StreamExecutor(self.ctx, use_thread=self.ctx.replay is None)
            child.text_ = self.text_
            child.context, child.images = list(self.context), list(self.images)
            child.messages_ = list(self.messages_)
            child.variables = dict(self.variables)
            child.meta_info = dict(self.meta_info)
            child._turns, child._role_start = self._turns.copy(), self._role_start
            child._fork_point = len(self.text_)
            child._scopes = dict(self._scopes)
            child._spec_turn, child._spec_text = copy.deepcopy((self._spec_turn, self._spec_text))
            children.append(child)
        return children

    def join(self, children: list[StreamExecutor], mode: str) -> None:
        """``gather_variable``: new variables of the children become lists here.
        ``concate_and_append``: the children's text after the fork point is appended in order."""
        for child in children:
            child.sync()
        if mode == "gather_variable":
            for name in dict.fromkeys(k for c in children for k in c.variables if k not in self.variables):
                self.set_var(name, [c.variables.get(name) for c in children])
                self.meta_info[name] = [c.meta_info.get(name) for c in children]
        elif mode == "concate_and_append":
            self.submit("".join(c.text_[c._fork_point :] for c in children))
            self.sync()
        else:
            raise ValueError(f"invalid join mode {mode!r}; use gather_variable or concate_and_append")
        for child in children:
            child.end()

    # ---- streaming --------------------------------------------------------------------------
    def iter_chunks(self, var_name: str | None = None) -> Iterator[str]:
        """Yield appended text as it arrives (only ``var_name``'s chunks when given)."""
        index = 0
        while True:
            with self._cond:
                while index >= len(self._chunks) and not self._finished and self.error_ is None:
                    self._cond.wait()
                pending = self._chunks[index:]
                index = len(self._chunks)
                done = self._finished or self.error_ is not None
            for var, chunk in pending:
                if var_name is None or var == var_name:
                    yield chunk
            if done and index >= len(self._chunks):
                self._raise_if_failed()
                return
