"""SGLang's launch flags on our parser: spellings of our options, SGLang's value names, and the flags
we do not implement (accepted with one warning, or refused with the reason). The table is
``SGLANG_FLAGS`` (``sglang_flags.py``); the generated list is docs/sglang-launch-flags.md."""

from __future__ import annotations

import argparse
from typing import Any

from radixlm.runtime.server.sglang_flag_types import Nearest, Refuse, SGLangFlag
from radixlm.runtime.server.sglang_flags import SGLANG_FLAGS


def sglang_spellings(field: str, own: str) -> list[str]:
    """SGLang's flags that set our ``field`` (``own`` is our flag for it, left out)."""
    return [
        name
        for flag in SGLANG_FLAGS.values()
        if flag.status == "implemented" and flag.field == field
        for name in (flag.name, *flag.aliases)
        if name != own
    ]


def sglang_values(field: str) -> list[str]:
    """SGLang's values of our ``field`` that we translate (offered as choices beside ours)."""
    return [v for flag in SGLANG_FLAGS.values() if flag.field == field for v in flag.values]


def add_sglang_only_flags(parser: argparse.ArgumentParser) -> None:
    """Every SGLang flag without a ``ServerArgs`` field: parsed as SGLang does, reported later by
    ``apply_sglang_flags`` (absent from the namespace unless given)."""
    group = parser.add_argument_group(
        "SGLang flags not implemented here",
        "accepted with one warning (no effect on output) or refused with the reason; "
        "see docs/sglang-launch-flags.md",
    )
    for flag in SGLANG_FLAGS.values():
        if flag.status == "implemented":
            continue
        kwargs: dict[str, Any] = {"dest": flag.dest, "default": argparse.SUPPRESS}
        if flag.arity:
            kwargs.update(nargs=None if flag.arity == "1" else flag.arity, metavar="VALUE")
        else:
            kwargs["action"] = "store_true"
        verb = "ignored, with a warning" if flag.status == "warned" else "refused"
        group.add_argument(
            flag.name, *flag.aliases, help=f"{verb}: in SGLang it {flag.sglang}; {flag.here}", **kwargs
        )


def apply_sglang_flags(args: argparse.Namespace) -> list[str]:
    """Translate SGLang's values in ``args`` to ours and drop SGLang-only flags from it.

    Returns one warning per ignored flag or approximated value; raises ``ValueError`` with the reason
    for a flag or value we cannot honour.
    """
    warnings: list[str] = []
    for flag in SGLANG_FLAGS.values():
        if flag.status == "implemented":
            warning = _translate_value(flag, args)
        elif hasattr(args, flag.dest):
            warning = _check_unimplemented(flag, getattr(args, flag.dest))
            delattr(args, flag.dest)
        else:
            continue
        if warning:
            warnings.append(warning)
    return warnings


def translate_sglang_kwargs(kwargs: dict[str, Any], fields: set[str]) -> list[str]:
    """``apply_sglang_flags`` for keyword arguments (``Runtime(random_seed=1, trust_remote_code=True)``,
    SGLang's ``ServerArgs`` field names), in place: SGLang's names and values become ours, options we
    do not implement are dropped (a warning unless unset: None or False). ``fields``: our options."""
    by_key = {n.lstrip("-").replace("-", "_"): f for f in SGLANG_FLAGS.values() for n in (f.name, *f.aliases)}
    warnings: list[str] = []
    for key in list(kwargs):
        flag = by_key.get(key)
        if flag is None or (key in fields and flag.field != key):
            continue
        value = kwargs.pop(key)
        if flag.field is not None:
            if flag.field in kwargs and kwargs[flag.field] != value:
                raise ValueError(
                    f"{key}={value!r} and {flag.field}={kwargs[flag.field]!r} disagree: give one"
                )
            kwargs[flag.field], warning = _translated(flag, value)
        elif value is None or value is False:
            continue
        else:
            warning = _check_unimplemented(flag, value)
        if warning:
            warnings.append(warning)
    return warnings


def _translate_value(flag: SGLangFlag, args: argparse.Namespace) -> str | None:
    assert flag.field is not None
    value, warning = _translated(flag, getattr(args, flag.field, None))
    setattr(args, flag.field, value)
    return warning


def _translated(flag: SGLangFlag, value: Any) -> tuple[Any, str | None]:
    """Our value for SGLang's ``value`` of an implemented flag, and the warning it earns."""
    if not isinstance(value, str) or value not in flag.values:
        return value, None
    outcome = flag.values[value]
    if isinstance(outcome, Refuse):
        raise ValueError(f"{flag.name} {value} is not supported: {outcome.why}")
    if isinstance(outcome, Nearest):
        return outcome.value, f"{flag.name} {value}: {outcome.why}."
    return outcome, None


def _check_unimplemented(flag: SGLangFlag, value: Any) -> str | None:
    given = value if isinstance(value, list) else [value]
    if flag.arity and all(str(v) in flag.accepts for v in given):
        return None  # asks for what radixlm does anyway
    if flag.status == "refused":
        raise ValueError(flag.message())
    return flag.message()
