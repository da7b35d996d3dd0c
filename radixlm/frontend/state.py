"""``ProgramState``: what a program function receives as ``s`` and what ``run()`` returns."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from radixlm.frontend.interpreter import StreamExecutor
from radixlm.frontend.ir import ExprLike
from radixlm.frontend.state_base import StateBase, StateGroupBase


class ProgramState(StateBase):
    """The text, messages and variables of one running program (or one fork of it).

    ``s += expr`` appends (returns at once); ``s["x"]`` waits for variable ``x``; ``text()`` and
    ``messages()`` wait for everything queued. A failed generation raises ``ProgramError`` (its
    ``__cause__`` is the original error) from ``s[...]``, ``sync()``, ``text()`` and ``run()``.
    """

    def __init__(self, executor: StreamExecutor) -> None:
        self.executor = executor
        #: What the program function returned (``None`` for most programs).
        self.ret_value: Any = None
        #: ``"graph"`` when the program ran as a compiled request graph, else ``"interpreter"``.
        self.execution_path = "interpreter"

    @property
    def stream_executor(self) -> StreamExecutor:
        """SGLang's name for ``executor`` (``text_``, ``variables``, ``meta_info``, ``messages_``,
        ``sync()``, ``is_finished``)."""
        return self.executor

    # ---- appending and variables ------------------------------------------------------------
    def _submit(self, expr: ExprLike) -> None:
        self.executor.submit(expr)

    def __contains__(self, name: str) -> bool:
        return name in self.executor.variables

    def get_var(self, name: str) -> Any:
        """The variable's value, waiting until it is generated."""
        return self.executor.get_var(name)

    def set_var(self, name: str, value: Any) -> None:
        self.executor.set_var(name, value)

    def get_meta_info(self, name: str) -> Any:
        """The runtime's meta_info of the request that produced ``name`` (token counts, logprobs...)."""
        self.executor.get_var(name)
        return self.executor.meta_info.get(name)

    # ---- whole state ------------------------------------------------------------------------
    def sync(self) -> ProgramState:
        """Wait for every queued expression; raise if one failed."""
        self.executor.sync()
        return self

    def text(self) -> str:
        self.sync()
        return self.executor.text_

    def messages(self) -> list[dict[str, str]]:
        """The finished role turns as ``[{"role", "content"}]``."""
        self.sync()
        return list(self.executor.messages_)

    def error(self) -> BaseException | None:
        """The exception that stopped this state, if any (without raising it)."""
        return self.executor.error_

    # ---- fork -------------------------------------------------------------------------------
    def fork(self, size: int = 1) -> ProgramStateGroup:
        """``size`` states continuing from this one; they share its prefix (and its KV cache)."""
        children = [ProgramState(e) for e in self.executor.fork(int(size))]
        return ProgramStateGroup(children, self)

    # ---- streaming --------------------------------------------------------------------------
    def text_iter(self, var_name: str | None = None) -> Iterator[str]:
        """Yield text as it is appended (with ``run(stream=True)``, token by token); with
        ``var_name`` only that variable's chunks. The chunks concatenate to the final text."""
        return self.executor.iter_chunks(var_name)

    async def text_async_iter(self, var_name: str | None = None) -> AsyncIterator[str]:
        """``text_iter`` for asyncio code."""
        it = self.executor.iter_chunks(var_name)
        while True:
            chunk: str | None = await asyncio.to_thread(next, it, None)  # chunks are never None
            if chunk is None:
                return
            yield chunk

    def __repr__(self) -> str:
        return f"ProgramState({self.executor.text_!r})"


class ProgramStateGroup(StateGroupBase[ProgramState]):
    """The states made by ``fork``; ``join()`` merges their variables back into the parent."""

    def join(self, mode: str = "gather_variable") -> None:
        """Wait for the forks. ``gather_variable`` (default): each variable the forks generated
        becomes a list in the parent; ``concate_and_append``: their texts are appended to it."""
        self.parent.executor.join([s.executor for s in self.states], mode)
