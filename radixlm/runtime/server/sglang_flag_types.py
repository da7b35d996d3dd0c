"""What an SGLang launch flag means here: the record types of the table in ``sglang_flags.py``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Status = Literal["implemented", "warned", "refused"]
# How an SGLang-only flag is spelled on a launch line: "" a switch, "1" one value, "?" an optional
# value, "+" / "*" a list (argparse's nargs).
Arity = Literal["", "1", "?", "+", "*"]


@dataclass(frozen=True)
class Nearest:
    """An SGLang value served as our ``value``, with a warning saying ``why``."""

    value: str
    why: str


@dataclass(frozen=True)
class Refuse:
    """An SGLang value we cannot honour: the launch stops with ``why``."""

    why: str


# An SGLang value of an implemented flag: our spelling (silent), the nearest of ours, or refused.
ValueOutcome = str | Nearest | Refuse


@dataclass(frozen=True)
class SGLangFlag:
    """One flag of SGLang's ``server_args.py`` and what a launch line with it does here.

    ``implemented``: the value reaches ``ServerArgs.<field>`` (through ``values`` where SGLang spells
    it differently). ``warned``: accepted, one warning. ``refused``: the launch stops with the reason.
    ``sglang`` says what the flag does in SGLang, ``here`` why it is ignored or refused (or a note).
    """

    name: str
    status: Status
    sglang: str = ""
    here: str = ""
    field: str | None = None
    values: Mapping[str, ValueOutcome] = dataclasses.field(default_factory=dict)
    arity: Arity = ""
    accepts: tuple[str, ...] = ()  # warned/refused: values that ask for what radixlm does anyway
    aliases: tuple[str, ...] = ()

    @property
    def dest(self) -> str:
        """The argparse destination of an SGLang-only flag (never a ``ServerArgs`` field)."""
        return "sglang_" + self.name.lstrip("-").replace("-", "_")

    def message(self) -> str:
        """The warning or error a launch line with this flag gets."""
        verb = "is ignored" if self.status == "warned" else "is not supported"
        return f"{self.name} {verb}. In SGLang it {self.sglang}. Here: {self.here}."


def flag_group(
    status: Status, sglang: str, here: str, spec: str, accepts: tuple[str, ...] = ()
) -> list[SGLangFlag]:
    """Flags sharing one explanation. ``spec``: flags separated by spaces, each ``--x`` (a switch),
    ``--x=`` (one value) or ``--x=+`` (argparse's nargs); ``--x|--y=`` gives an alias."""
    flags = []
    for item in spec.split():
        names, eq, arity = item.partition("=")
        name, *aliases = names.split("|")
        kind: Arity = (arity or "1") if eq else ""  # type: ignore[assignment]
        flags.append(
            SGLangFlag(name, status, sglang, here, arity=kind, accepts=accepts, aliases=tuple(aliases))
        )
    return flags
