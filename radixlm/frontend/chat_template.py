"""Chat templates: how role segments render as text.

A program's roles (``system``/``user``/``assistant``) become ``prefix + content + suffix``. The
prefix and suffix of each role come from the chat template the backend reports for its model (a
Jinja template, rendered with marker contents, so roles render exactly as in training), or from a
named template in the registry (for OpenAI-style backends and base models).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from radixlm.frontend.sglang_templates import SGLANG_TEMPLATES, Spec, template_name_for_model_path

ROLES = ("system", "user", "assistant")
_MARK = "<<<radixlm-content>>>"


@dataclass(frozen=True)
class ChatTemplate:
    """Per-role ``(prefix, suffix)`` strings.

    ``default_system`` is text the model's template puts before the first turn when the
    conversation has no system message (for example SmolLM2's built-in system prompt); it is
    emitted when a program's first role is not ``system``. ``style`` ``"llama2"`` (SGLang's
    Llama 2 chat style) opens a first system turn with the user prefix and a second user turn
    with nothing, so the system prompt sits inside the first ``[INST]``.
    """

    name: str
    roles: dict[str, tuple[str, str]]
    default_system: str = ""
    stop_str: tuple[str, ...] = field(default_factory=tuple)
    style: str = "plain"

    def begin_text(self, role: str, first_turn: bool, second_turn: bool = False) -> str:
        """The text that opens a ``role`` turn (with the implicit system prompt before a first
        non-system turn)."""
        if self.style == "llama2":
            if role == "system" and first_turn:
                return self.prefix("user") + self.prefix("system")
            if role == "user" and second_turn:
                return ""
        lead = self.default_system if first_turn and role != "system" else ""
        return lead + self.prefix(role)

    def prefix(self, role: str) -> str:
        return self._pair(role)[0]

    def suffix(self, role: str) -> str:
        return self._pair(role)[1]

    def _pair(self, role: str) -> tuple[str, str]:
        if role not in self.roles:
            raise ValueError(f"chat template {self.name!r} has no role {role!r}")
        return self.roles[role]


@dataclass
class Turns:
    """Renders one program state's role markers as text: the first turn gets the template's
    implicit system prompt, and turns must not nest. The interpreter, the compiler and
    ``ProgramIR.leading_text`` all render roles through this."""

    template: ChatTemplate
    #: The role whose turn is open (``None`` between turns).
    open_role: str | None = None
    #: How many turns have begun (the implicit system prompt counts as none).
    count: int = 0

    def begin(self, role: str) -> str:
        """The text opening a ``role`` turn; raises ``ValueError`` inside an open turn."""
        if self.open_role is not None:
            raise ValueError(f"{role}_begin() inside an open {self.open_role} turn; end it first")
        text = self.template.begin_text(role, first_turn=self.count == 0, second_turn=self.count == 1)
        self.count += 1
        self.open_role = role
        return text

    def end(self, role: str) -> str:
        """The text closing the open ``role`` turn; raises ``ValueError`` if it is not open."""
        if self.open_role != role:
            raise ValueError(f"{role}_end() without a matching {role}_begin()")
        self.open_role = None
        return self.template.suffix(role)

    def copy(self) -> Turns:
        """The same position, for a fork."""
        return replace(self)


def _from_sglang(name: str, spec: Spec) -> ChatTemplate:
    """One of SGLang's named templates; its default system prompt becomes a whole system turn."""
    system_prompt, roles, stop, style = spec
    roles = {r: roles.get(r, ("", "")) for r in ROLES}
    default_system = ""
    if system_prompt:
        default_system = roles["system"][0] + system_prompt + roles["system"][1]
    return ChatTemplate(name, roles, default_system=default_system, stop_str=stop, style=style)


REGISTRY: dict[str, ChatTemplate] = {n: _from_sglang(n, spec) for n, spec in SGLANG_TEMPLATES.items()}
REGISTRY["llama-3"] = replace(REGISTRY["llama-3-instruct"], name="llama-3")


def get_chat_template(name: str) -> ChatTemplate:
    """A registered template by name: SGLang's names (``chatml``, ``llama-2-chat``,
    ``llama-3-instruct``, ``qwen``, ``vicuna_v1.1``, ``default``, ...) and ``llama-3``."""
    if name not in REGISTRY:
        raise ValueError(f"unknown chat template {name!r}; registered: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def get_chat_template_by_model_path(model_path: str) -> ChatTemplate:
    """The template SGLang's frontend picks for a model path by its name (``default`` if none)."""
    return REGISTRY[template_name_for_model_path(model_path)]


def register_chat_template(template: ChatTemplate) -> None:
    """Add or replace a named template."""
    REGISTRY[template.name] = template


def guess_chat_template(model_name: str) -> ChatTemplate:
    """The registry entry for a model family, by name (OpenAI-style backends, which report none)."""
    low = model_name.lower()
    if "llama-3" in low or "llama3" in low:
        return REGISTRY["llama-3"]
    if any(k in low for k in ("qwen", "smollm", "chatml", "hermes", "gpt")):
        return REGISTRY["chatml"]
    return REGISTRY["default"]


def from_jinja(source: str, name: str = "model", special: dict[str, str] | None = None) -> ChatTemplate:
    """Derive role prefixes and suffixes by rendering a Hugging Face Jinja chat template.

    Each role's segment is the difference between rendering a conversation with and without one
    more message of that role, whose content is a marker; the marker splits it into prefix and
    suffix. ``bos_token`` renders empty: the tokenizer adds it.
    """
    render = _jinja_renderer(source, special or {})
    sys_msg = {"role": "system", "content": "S"}
    user_msg = {"role": "user", "content": "U"}
    roles: dict[str, tuple[str, str]] = {}
    try:
        roles["system"] = _segment(render, [], "system")
        with_system = [sys_msg]
    except Exception:  # noqa: BLE001 - a template without a system role: system turns use user markers
        with_system = []
    roles["user"] = _segment(render, with_system, "user")
    roles["assistant"] = _segment(render, with_system + [user_msg], "assistant")
    roles.setdefault("system", roles["user"])
    default_system = ""
    only_user = render([{"role": "user", "content": _MARK}])
    before = only_user[: only_user.index(_MARK)]
    if before.endswith(roles["user"][0]):
        default_system = before[: len(before) - len(roles["user"][0])]
    stop = tuple(s for s in (roles["assistant"][1].strip(),) if s)
    return ChatTemplate(name, roles, default_system=default_system, stop_str=stop)


def _segment(render: Any, history: list[dict[str, str]], role: str) -> tuple[str, str]:
    head = render(history) if history else ""
    full = render(history + [{"role": role, "content": _MARK}])
    if not full.startswith(head):
        raise ValueError(f"chat template renders {role!r} turns inconsistently")
    prefix, suffix = full[len(head) :].split(_MARK)
    return prefix, suffix


def _jinja_renderer(source: str, special: dict[str, str]) -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    template = env.from_string(source)
    extra = {"bos_token": "", "eos_token": special.get("eos_token", "")}

    def render(messages: list[dict[str, str]]) -> str:
        return template.render(messages=messages, add_generation_prompt=False, **extra)

    return render
