"""The expressions a program appends to its state: the IR shared by the interpreter and the tracer.

``s += expr`` accepts a ``str``, any ``Expr`` below, or a concatenation of them built with ``+``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional, Union

# Sentinels that let traced values survive ``str()``/f-strings: "\x00<kind>:<key>\x00".
_SENTINEL = re.compile(r"\x00(arg|var):([^\x00]*)\x00")

#: Keys of ``gen`` that go into ``sampling_params`` of a /generate request.
SAMPLING_KEYS = (
    "max_new_tokens", "min_new_tokens", "n", "stop", "stop_token_ids", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "ignore_eos", "dtype", "regex", "json_schema",
)
#: Keys of ``gen`` that are request-level options of a /generate request.
LOGPROB_KEYS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs")


class Expr:
    """Base of every IR expression; ``a + b`` concatenates."""

    def __add__(self, other: Any) -> "ExprList":
        return ExprList([self, as_expr(other)])

    def __radd__(self, other: Any) -> "ExprList":
        return ExprList([as_expr(other), self])

    def flatten(self) -> list["Expr"]:
        """The expression as a flat list of leaves (constants, gens, roles, ...)."""
        return [self]


@dataclass(eq=False)
class Constant(Expr):
    """Literal text."""

    value: str

    def flatten(self) -> list[Expr]:
        return split_sentinels(self.value)

    def __repr__(self) -> str:
        return repr(self.value)


@dataclass(eq=False)
class Argument(Expr):
    """A program argument left as a placeholder by ``trace()``."""

    name: str

    def __repr__(self) -> str:
        return f"arg({self.name})"


@dataclass(eq=False)
class VarRef(Expr):
    """The text of a variable generated earlier in the same program (only made by the tracer)."""

    key: str  # "<state id>.<var name>.<version>"

    def __repr__(self) -> str:
        return f"var({self.key})"


@dataclass(eq=False)
class Gen(Expr):
    """Generate into variable ``name``; ``params`` holds only the options the user set."""

    name: Optional[str]
    params: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"gen({self.name!r}{', ' + opts if opts else ''})"


@dataclass(eq=False)
class Select(Expr):
    """Pick one of ``choices`` by scoring each continuation; the choice is appended to the text."""

    name: Optional[str]
    choices: list[str]
    temperature: float = 0.0
    method: str = "token_length_normalized"

    def __repr__(self) -> str:
        return f"select({self.name!r}, {self.choices!r}, method={self.method})"


@dataclass(eq=False)
class RoleBegin(Expr):
    role: str

    def __repr__(self) -> str:
        return f"{self.role}_begin()"


@dataclass(eq=False)
class RoleEnd(Expr):
    role: str

    def __repr__(self) -> str:
        return f"{self.role}_end()"


@dataclass(eq=False)
class Image(Expr):
    """An image input; only multimodal models accept it."""

    path: str

    def __repr__(self) -> str:
        return f"image({self.path!r})"


@dataclass(eq=False)
class ExprList(Expr):
    """A concatenation of expressions."""

    items: list[Expr]

    def flatten(self) -> list[Expr]:
        return [leaf for item in self.items for leaf in item.flatten()]

    def __repr__(self) -> str:
        return " + ".join(repr(i) for i in self.items)


ExprLike = Union[str, Expr]


def as_expr(value: Any) -> Expr:
    """Coerce what a program appends into an expression; ``None`` and other types raise."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return Constant(value)
    if value is None:
        raise ValueError("tried to append None to a program state")
    if hasattr(value, "__sgl_expr__"):
        return value.__sgl_expr__()
    raise TypeError(f"cannot append a {type(value).__name__} to a program state; use str() first")


def split_sentinels(text: str) -> list[Expr]:
    """Split text into constants and the traced placeholders embedded in it."""
    out: list[Expr] = []
    pos = 0
    for m in _SENTINEL.finditer(text):
        if m.start() > pos:
            out.append(Constant(text[pos:m.start()]))
        out.append(Argument(m.group(2)) if m.group(1) == "arg" else VarRef(m.group(2)))
        pos = m.end()
    if pos < len(text) or not out:
        out.append(Constant(text[pos:]))
    return out


def sentinel(kind: str, key: str) -> str:
    """The text a traced placeholder turns into under ``str()``."""
    return f"\x00{kind}:{key}\x00"


def role(name: str, expr: Optional[ExprLike] = None) -> Expr:
    """``role("user", x)`` is ``user_begin() + x + user_end()`` (an empty turn without ``x``)."""
    if expr is None:
        return ExprList([RoleBegin(name), RoleEnd(name)])
    return ExprList([RoleBegin(name), as_expr(expr), RoleEnd(name)])
