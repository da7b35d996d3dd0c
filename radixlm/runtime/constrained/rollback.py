"""The rollback both grammar matchers share: an accepted EOS counts as one token of its own."""

from __future__ import annotations


class EosAwareRollback:
    """``rollback(n)`` undoes an accepted EOS first, then ``_rollback_tokens`` the grammar's tokens.

    Subclasses set ``_ended`` when they accept EOS and provide ``max_rollback`` and ``_rollback_tokens``.
    """

    _ended: bool

    @property
    def max_rollback(self) -> int:
        raise NotImplementedError

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (an accepted EOS counts as one); ``n <= max_rollback``."""
        if n > self.max_rollback:
            raise ValueError(f"cannot roll back {n} tokens, at most {self.max_rollback}")
        if n and self._ended:
            self._ended = False
            n -= 1
        if n:
            self._rollback_tokens(n)

    def _rollback_tokens(self, n: int) -> None:
        raise NotImplementedError
