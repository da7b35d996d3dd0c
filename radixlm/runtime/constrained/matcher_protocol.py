"""What the scheduler asks of a grammar matcher, whichever backend (outlines-core, llguidance) built it."""

from __future__ import annotations

from typing import Protocol

import torch

from radixlm.runtime.constrained.vocabulary import TokenVocabulary


class Matcher(Protocol):
    """One request's position in its grammar: which tokens may come next, and which came."""

    @property
    def vocab(self) -> TokenVocabulary:
        """The byte vocabulary the grammar was compiled for (jump-forward re-tokenizes with it)."""
        ...

    @property
    def token_ids(self) -> list[int]:
        """Tokens accepted so far (EOS excluded)."""
        ...

    @property
    def max_rollback(self) -> int:
        """How many accepted tokens ``rollback`` can undo right now."""
        ...

    def accept_token(self, token_id: int) -> bool:
        """Advance by one sampled token; False (state unchanged) if the grammar does not allow it."""
        ...

    def broken_reason(self) -> str | None:
        """Why the matcher can no longer advance (a native error), or None while it is sound."""
        ...

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed-token bits into row ``row`` of a CPU int32 ``[bs, ceil(vocab / 32)]`` mask."""
        ...

    def is_terminated(self) -> bool:
        """True when the output is complete: EOS was accepted, or nothing but EOS may follow."""
        ...

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens (an accepted EOS counts as one); ``n <= max_rollback``."""
        ...

    def copy(self) -> Matcher:
        """An independent matcher in the same state."""
        ...

    def forced_continuation(self) -> str:
        """The longest string the grammar forces next ('' if none)."""
        ...
