"""Regexes for bounded numbers (JSON schema ``minimum``/``maximum``, which outlines-core ignores).

``integer_range_regex(lo, hi)`` matches exactly the canonical decimal integers in ``[lo, hi]`` (None =
unbounded), with no leading zeros and no ``-0``. ``number_range_regex`` does the same for decimals
between integral bounds.
"""

from __future__ import annotations

_FRACTION = r"(\.[0-9]+)?"
_ZERO_FRACTION = r"(\.0+)?"


def _digit_class(lo: str, hi: str) -> str:
    return lo if lo == hi else f"[{lo}-{hi}]"


def _same_length(lo: str, hi: str) -> list[str]:
    """Alternatives matching the digit strings of equal length between ``lo`` and ``hi`` inclusive."""
    n = len(lo)
    if n == 1:
        return [_digit_class(lo, hi)]
    rest = n - 1
    if lo[1:] == "0" * rest and hi[1:] == "9" * rest:
        return [_digit_class(lo[0], hi[0]) + f"[0-9]{{{rest}}}"]
    if lo[0] == hi[0]:
        return [lo[0] + p for p in _same_length(lo[1:], hi[1:])]
    parts = [lo[0] + p for p in _same_length(lo[1:], "9" * rest)]
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(_digit_class(str(int(lo[0]) + 1), str(int(hi[0]) - 1)) + f"[0-9]{{{rest}}}")
    parts += [hi[0] + p for p in _same_length("0" * rest, hi[1:])]
    return parts


def _natural_range(lo: int, hi: int | None) -> list[str]:
    """Alternatives for the natural numbers in ``[lo, hi]`` (``0 <= lo``; ``hi`` None = unbounded)."""
    parts: list[str] = []
    top_len = len(str(hi)) if hi is not None else len(str(lo))
    for length in range(len(str(lo)), top_len + 1):
        a = lo if length == len(str(lo)) else 10 ** (length - 1)
        b = hi if hi is not None and length == top_len else 10**length - 1
        if a <= b:
            parts += _same_length(str(a), str(b))
    if hi is None:
        parts.append(f"[1-9][0-9]{{{len(str(lo))},}}")
    return parts


def _alternation(parts: list[str]) -> str:
    return "(" + "|".join(parts) + ")"


def integer_range_regex(lo: int | None, hi: int | None) -> str:
    """Regex for the integers in ``[lo, hi]``; raises ``ValueError`` when the range is empty."""
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"empty integer range: minimum {lo} > maximum {hi}")
    parts: list[str] = []
    if hi is None or hi >= 0:
        parts += _natural_range(max(lo, 0) if lo is not None else 0, hi)
    if lo is None or lo < 0:
        low_mag = 1 if hi is None or hi >= 0 else -hi
        parts += ["-" + p for p in _natural_range(low_mag, None if lo is None else -lo)]
    return _alternation(parts)


def _magnitude_range(lo: int, hi: int | None) -> list[str]:
    """Decimal magnitudes ``m`` with ``lo <= m <= hi`` for integral bounds."""
    if hi is not None and lo == hi:
        return [str(lo) + _ZERO_FRACTION]
    parts = [str(lo) + _FRACTION]
    inner_hi = None if hi is None else hi - 1
    if inner_hi is None or inner_hi >= lo + 1:
        parts += [p + _FRACTION for p in _natural_range(lo + 1, inner_hi)]
    if hi is not None:
        parts.append(str(hi) + _ZERO_FRACTION)
    return parts


def number_range_regex(lo: int | None, hi: int | None) -> str:
    """Regex for decimals (no exponent) in ``[lo, hi]`` with integral bounds."""
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"empty number range: minimum {lo} > maximum {hi}")
    parts: list[str] = []
    if hi is None or hi >= 0:
        parts += _magnitude_range(max(lo, 0) if lo is not None else 0, hi)
    if lo is None or lo < 0:
        low_mag = 0 if hi is None or hi >= 0 else -hi
        parts += ["-" + p for p in _magnitude_range(low_mag, None if lo is None else -lo)]
    return _alternation(parts)
