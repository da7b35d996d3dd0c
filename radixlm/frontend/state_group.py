"""The group of states ``fork`` returns: shared by the running state and the tracer's state."""
from __future__ import annotations

from typing import Any, Generic, Iterator, TypeVar

from radixlm.frontend.ir import Expr

S = TypeVar("S")


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
