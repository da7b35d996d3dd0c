"""The tracer: runs a program function on stand-in states and records its statements as IR.

Generated values are placeholders. They may flow into text (``s += x``, ``"a" + x``, f-strings,
``str(x)``), which the IR records as variable reads; anything that would need the actual value
(comparisons, ``bool``, ``len``, ``int``, string methods, ``s.text()``) raises
``DynamicProgramError``: the program's control flow depends on generated values and it must run in
the interpreter. Arguments left as placeholders (``trace()``/``compile()`` without them) flow into
text the same way, except f-strings: as in SGLang's tracer, formatting one raises ``TypeError``.

A program that calls another ``@function`` while it is traced traces the callee into the same IR
(a ``Call`` statement starts its state), so the whole call tree compiles to one request graph.
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from radixlm.frontend.errors import DynamicProgramError
from radixlm.frontend.ir import (
    Argument,
    Expr,
    ExprLike,
    ExprList,
    VarKey,
    VarRef,
    VarVersions,
    as_expr,
    sentinel,
)
from radixlm.frontend.program_ir import Call, Extend, Fork, Join, ProgramIR, SetVar
from radixlm.frontend.state_base import StateBase, StateGroupBase


class _Placeholder:
    """Stands for a value unknown while tracing; usable only as text."""

    def __init__(self, kind: str, key: str | VarKey) -> None:
        self._kind = kind
        self._key = key

    def __sgl_expr__(self) -> Expr:
        return VarRef(self._key) if isinstance(self._key, VarKey) else Argument(self._key)

    def __str__(self) -> str:
        return sentinel(self._kind, self._key)

    def __format__(self, spec: str) -> str:
        if self._kind == "arg":
            raise ArgumentFormatError(
                f"cannot put argument {self._key!r} inside an f-string while tracing (SGLang's tracer "
                "refuses it too); concatenate it with + instead, or pass its value"
            )
        if spec:
            self._dynamic(f"format spec {spec!r}")
        return str(self)

    def __add__(self, other: Any) -> ExprList:
        return ExprList([self.__sgl_expr__(), as_expr(other)])

    def __radd__(self, other: Any) -> ExprList:
        return ExprList([as_expr(other), self.__sgl_expr__()])

    def __repr__(self) -> str:
        return f"<traced {self._kind} {self._key}>"

    def __hash__(self) -> int:
        return id(self)

    def _dynamic(self, what: str) -> Any:
        raise DynamicProgramError(f"{what} reads the value of {self._kind} {self._key!r}")

    def __eq__(self, other: Any) -> bool:
        return self._dynamic("==")

    def __ne__(self, other: Any) -> bool:
        return self._dynamic("!=")

    def __lt__(self, other: Any) -> bool:
        return self._dynamic("<")

    def __gt__(self, other: Any) -> bool:
        return self._dynamic(">")

    def __bool__(self) -> bool:
        return self._dynamic("a truth test")

    def __len__(self) -> int:
        return self._dynamic("len()")

    def __iter__(self) -> Iterator[Any]:
        return self._dynamic("iteration")

    def __contains__(self, item: Any) -> bool:
        return self._dynamic("'in'")

    def __getitem__(self, item: Any) -> Any:
        return self._dynamic("indexing")

    def __int__(self) -> int:
        return self._dynamic("int()")

    def __float__(self) -> float:
        return self._dynamic("float()")

    def __index__(self) -> int:
        return self._dynamic("use as an integer (range(), an index)")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._dynamic(f".{name}")


class ArgumentFormatError(TypeError):
    """An argument placeholder was formatted (f-string): ``trace()`` and ``compile()`` raise it."""


@dataclass
class _Trace:
    """What all stand-in states of one trace share."""

    ir: ProgramIR
    versions: VarVersions = field(default_factory=VarVersions)
    state_count: int = 0

    def new_state_id(self) -> int:
        self.state_count += 1
        return self.state_count - 1


class TracerState(StateBase):
    """Mimics ``ProgramState`` and records what the program does with it."""

    def __init__(self, trace: _Trace) -> None:
        self._trace = trace
        self._ir = trace.ir
        self.state_id = trace.new_state_id()
        self._vars: dict[str, Any] = {}

    def _submit(self, expr: ExprLike) -> None:
        leaves = as_expr(expr).flatten()
        for leaf in leaves:
            if leaf.output_var is not None:
                key = self._trace.versions.next_key(self.state_id, leaf.output_var)
                self._vars[leaf.output_var] = _Placeholder("var", key)
        self._ir.statements.append(Extend(self.state_id, leaves))

    def __contains__(self, name: str) -> bool:
        return name in self._vars

    def get_var(self, name: str) -> Any:
        if name not in self._vars:
            raise KeyError(f"program state has no variable {name!r}")
        return self._vars[name]

    def set_var(self, name: str, value: Any) -> None:
        self._vars[name] = value
        self._ir.statements.append(SetVar(self.state_id, name, value))

    def _dynamic(self, what: str) -> Any:
        raise DynamicProgramError(f"the program calls {what} while it runs")

    def text(self) -> str:
        return self._dynamic("s.text()")

    def messages(self) -> list:
        return self._dynamic("s.messages()")

    def get_meta_info(self, name: str) -> Any:
        return self._dynamic("s.get_meta_info()")

    def text_iter(self, var_name: str | None = None) -> Any:
        return self._dynamic("s.text_iter()")

    def sync(self) -> TracerState:
        return self

    def error(self) -> None:
        return None

    def fork(self, size: int = 1) -> TracerStateGroup:
        children = [TracerState(self._trace) for _ in range(int(size))]
        for child in children:
            child._vars = dict(self._vars)
        self._ir.statements.append(Fork(self.state_id, [c.state_id for c in children]))
        return TracerStateGroup(children, self)


class TracerStateGroup(StateGroupBase[TracerState]):
    """Mimics ``ProgramStateGroup``."""

    def join(self, mode: str = "gather_variable") -> None:
        if mode == "gather_variable":
            parent_vars = self.parent._vars
            for name in dict.fromkeys(k for c in self.states for k in c._vars if k not in parent_vars):
                parent_vars[name] = [c._vars.get(name) for c in self.states]
        self.parent._ir.statements.append(Join(self.parent.state_id, [c.state_id for c in self.states], mode))


_current: contextvars.ContextVar[_Trace | None] = contextvars.ContextVar("radixlm_trace", default=None)


def tracing() -> bool:
    """Whether a program is being traced in this thread (a ``@function`` call is then traced too)."""
    return _current.get() is not None


def trace_program(
    func: Callable[..., Any], args: tuple, kwargs: dict[str, Any], placeholders: bool
) -> ProgramIR:
    """Trace ``func(s, *args, **kwargs)``. With ``placeholders``, parameters not given (with a
    default or not) become argument placeholders. The program's own errors mark the IR dynamic,
    except ``ArgumentFormatError``, which is raised."""
    ir = ProgramIR(name=getattr(func, "__name__", "program"))
    trace = _Trace(ir)
    token = _current.set(trace)
    try:
        if placeholders:
            kwargs = {**_placeholders(func, args, kwargs), **kwargs}
        if func(TracerState(trace), *args, **kwargs) is not None:
            ir.dynamic_reason = "the program returns a value"
    except ArgumentFormatError:
        raise
    except DynamicProgramError as exc:
        ir.dynamic_reason = str(exc)
    except Exception as exc:  # noqa: BLE001 - the interpreter reruns the program and raises it for real
        ir.dynamic_reason = f"tracing raised {type(exc).__name__}: {exc}"
    finally:
        _current.reset(token)
    return ir


def trace_call(func: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> TracerState:
    """Trace a ``@function`` called by the program being traced into the same IR; returns its state
    (what the call returns while tracing, as in SGLang). Its arguments are the caller's, as in any
    Python call: none become placeholders."""
    trace = _current.get()
    if trace is None:
        raise RuntimeError("trace_call() outside a trace")
    state = TracerState(trace)
    trace.ir.statements.append(Call(state.state_id, getattr(func, "__name__", "program")))
    if func(state, *args, **kwargs) is not None:
        raise DynamicProgramError(f"the called program {getattr(func, '__name__', '?')} returns a value")
    return state


def _placeholders(func: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """An argument placeholder for each named parameter of ``func`` not given."""
    params = list(inspect.signature(func).parameters.values())[1:]
    given = {p.name for p in params[: len(args)]} | set(kwargs)
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: _Placeholder("arg", p.name) for p in params if p.name not in given and p.kind in named}
