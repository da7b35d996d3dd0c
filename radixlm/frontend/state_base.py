"""What the running state (``ProgramState``) and the tracer's stand-in (``TracerState``) share:
appending, item access, the role methods, and the group of states ``fork`` returns."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from radixlm.frontend.ir import Expr, ExprLike, RoleBegin, RoleEnd, VarScopeBegin, VarScopeEnd, role

S = TypeVar("S")


class StateBase:
    """``s += expr``, ``s[name]`` and ``s.user(...)``-style roles on top of ``_submit``,
    ``get_var`` and ``set_var``, which subclasses define."""

    def _submit(self, expr: ExprLike) -> None:
        """Append ``expr`` to this state."""
        raise NotImplementedError

    def get_var(self, name: str) -> Any:
        raise NotImplementedError

    def set_var(self, name: str, value: Any) -> None:
        raise NotImplementedError

    def __iadd__(self, other: ExprLike):
        self._submit(other)
        return self

    def __getitem__(self, name: str) -> Any:
        return self.get_var(name)

    def __setitem__(self, name: str, value: Any) -> None:
        self.set_var(name, value)

    # ---- roles ------------------------------------------------------------------------------
    def system(self, expr: ExprLike | None = None) -> Any:
        return self._role("system", expr)

    def user(self, expr: ExprLike | None = None) -> Any:
        return self._role("user", expr)

    def assistant(self, expr: ExprLike | None = None) -> Any:
        return self._role("assistant", expr)

    def fork(self, size: int = 1) -> Any:
        raise NotImplementedError

    @contextlib.contextmanager
    def copy(self) -> Iterator[Any]:
        """``with s.copy() as c:`` one fork of this state, joined back (``gather_variable``) at the end."""
        group = self.fork(1)
        try:
            yield group[0]
        finally:
            group.join()

    @contextlib.contextmanager
    def var_scope(self, name: str) -> Iterator[None]:
        """``with s.var_scope("x"):`` the text appended inside the block becomes variable ``x``."""
        self._submit(VarScopeBegin(name))
        yield
        self._submit(VarScopeEnd(name))

    def _role(self, name: str, expr: ExprLike | None) -> Any:
        """With ``expr``: append a whole turn. Without: a context manager around the turn."""
        if expr is not None:
            self._submit(role(name, expr))
            return None
        return self._role_block(name)

    @contextlib.contextmanager
    def _role_block(self, name: str) -> Iterator[None]:
        self._submit(RoleBegin(name))
        yield
        self._submit(RoleEnd(name))


class StateGroupBase(Generic[S]):
    """A fixed list of forked states; ``+=`` appends to every fork. Subclasses define ``join``."""

    def __init__(self, states: list[S], parent: S) -> None:
        self.states = states
        self.parent = parent

    def __getitem__(self, i: int) -> S:
        return self.states[i]

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[S]:
        return iter(self.states)

    def __setitem__(self, i: int, value: S) -> None:
        if self.states[i] is not value:
            raise ValueError("cannot replace a forked state")

    def __iadd__(self, other: Any):
        """Append to every fork: the same expression, one per fork from a list, or ``f(i)``."""
        if callable(other) and not isinstance(other, Expr):
            for i, s in enumerate(self.states):
                s += other(i)
        elif isinstance(other, (list, tuple)):
            if len(other) != len(self.states):
                raise ValueError(f"{len(other)} expressions for {len(self.states)} forks")
            for s, expr in zip(self.states, other):
                s += expr
        else:
            for s in self.states:
                s += other
        return self

    def join(self, mode: str = "gather_variable") -> None:
        raise NotImplementedError
