"""The frontend IR's expressions: what a program appends to a state, and how variables are named.

Expressions: ``s += expr`` accepts a ``str``, any ``Expr`` below, or a concatenation of them built
with ``+``. The interpreter runs them; the tracer records them (as the statements of
``radixlm.frontend.program_ir``).

Variables: every generation of a variable is named by a ``VarKey`` (state, name, version), numbered
by ``VarVersions`` the same way wherever a program's generations are walked (tracer, interpreter,
compiler, the trace graph), so a traced read of a variable finds the generation that produced it.
A ``var_scope`` block counts as one generation of its variable, numbered at its end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: Regular expressions for ``gen(regex=...)`` with SGLang's names (``sglang.lang.ir``; importable as
#: ``radixlm.lang.ir``). Numbers may end in spaces or newlines so that ``stop=[" ", "\n"]`` can end them.
REGEX_INT = r"[+-]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[+-]?[0-9]*\.?[0-9]+[ \n]*"
REGEX_BOOL = r"(True|False)"
#: A double-quoted string of letters, digits, underscores and whitespace (no escapes).
REGEX_STR = r'"[\w\s]*"'

# Sentinels that let traced values survive ``str()``/f-strings: "\x00<kind>:<key>\x00".
_SENTINEL = re.compile(r"\x00(arg|var):([^\x00]*)\x00")


# ---- variable keys --------------------------------------------------------------------------
@dataclass(frozen=True)
class VarKey:
    """The ``version``-th value variable ``name`` got in state ``state`` (a program may generate
    into the same name several times). ``str()`` gives ``"<state>.<name>.<version>"``."""

    state: int
    name: str
    version: int

    def __str__(self) -> str:
        return f"{self.state}.{self.name}.{self.version}"

    @classmethod
    def parse(cls, text: str) -> VarKey:
        """The key whose ``str()`` is ``text`` (names may contain dots)."""
        state, rest = text.split(".", 1)
        name, version = rest.rsplit(".", 1)
        return cls(int(state), name, int(version))


class VarVersions:
    """Hands out the ``VarKey`` of each generation: versions count from 0 per state and name."""

    def __init__(self) -> None:
        self._next: dict[tuple[int, str], int] = {}

    def next_key(self, state: int, name: str) -> VarKey:
        version = self._next.get((state, name), 0)
        self._next[(state, name)] = version + 1
        return VarKey(state, name, version)


# ---- expressions ----------------------------------------------------------------------------
class Expr:
    """Base of every IR expression; ``a + b`` concatenates."""

    def __add__(self, other: Any) -> ExprList:
        return ExprList([self, as_expr(other)])

    def __radd__(self, other: Any) -> ExprList:
        return ExprList([as_expr(other), self])

    def flatten(self) -> list[Expr]:
        """The expression as a flat list of leaves (constants, gens, roles, ...)."""
        return [self]

    @property
    def output_var(self) -> str | None:
        """The variable this expression generates into (``gen`` and ``select`` with a name)."""
        return None


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

    key: VarKey

    def __repr__(self) -> str:
        return f"var({self.key})"


@dataclass(eq=False)
class Gen(Expr):
    """Generate into variable ``name``; ``params`` holds only the options the user set."""

    name: str | None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def output_var(self) -> str | None:
        return self.name

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"gen({self.name!r}{', ' + opts if opts else ''})"


@dataclass(eq=False)
class Select(Expr):
    """Pick one of ``choices`` by scoring each continuation; the choice is appended to the text."""

    name: str | None
    choices: list[str]
    temperature: float = 0.0
    method: str = "token_length_normalized"

    @property
    def output_var(self) -> str | None:
        return self.name

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
    """An image input (a path, bytes or URL); only multimodal models accept it."""

    path: str | bytes

    def __repr__(self) -> str:
        return f"image({self.path!r})" if isinstance(self.path, str) else f"image(<{len(self.path)} bytes>)"


@dataclass(eq=False)
class SeparateReasoning(Expr):
    """Split variable ``name`` into its answer (``name``) and thinking (``name + "_reasoning_content"``)."""

    name: str
    model_type: str

    def __repr__(self) -> str:
        return f"separate_reasoning({self.name!r}, model_type={self.model_type!r})"


@dataclass(eq=False)
class VarScopeBegin(Expr):
    """Start of a ``with s.var_scope(name):`` block: the text appended until its end becomes ``name``."""

    name: str

    def __repr__(self) -> str:
        return f"var_scope_begin({self.name!r})"


@dataclass(eq=False)
class VarScopeEnd(Expr):
    """End of a ``var_scope`` block; it produces the variable (one generation of it)."""

    name: str

    @property
    def output_var(self) -> str | None:
        return self.name

    def __repr__(self) -> str:
        return f"var_scope_end({self.name!r})"


@dataclass(eq=False)
class ExprList(Expr):
    """A concatenation of expressions."""

    items: list[Expr]

    def flatten(self) -> list[Expr]:
        return [leaf for item in self.items for leaf in item.flatten()]

    def __repr__(self) -> str:
        return " + ".join(repr(i) for i in self.items)


ExprLike = str | Expr


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
            out.append(Constant(text[pos : m.start()]))
        out.append(Argument(m.group(2)) if m.group(1) == "arg" else VarRef(VarKey.parse(m.group(2))))
        pos = m.end()
    if pos < len(text) or not out:
        out.append(Constant(text[pos:]))
    return out


def sentinel(kind: str, key: str | VarKey) -> str:
    """The text a traced placeholder turns into under ``str()``."""
    return f"\x00{kind}:{key}\x00"


def role(name: str, expr: ExprLike | None = None) -> Expr:
    """``role("user", x)`` is ``user_begin() + x + user_end()`` (an empty turn without ``x``)."""
    if expr is None:
        return ExprList([RoleBegin(name), RoleEnd(name)])
    return ExprList([RoleBegin(name), as_expr(expr), RoleEnd(name)])
