"""Exceptions of the language."""

from __future__ import annotations


class ProgramError(RuntimeError):
    """A generation inside a program failed; ``__cause__`` holds the original exception."""

    @classmethod
    def wrapping(cls, exc: BaseException) -> ProgramError:
        """The error that reports ``exc`` (raise it ``from exc``)."""
        return cls(f"program failed: {type(exc).__name__}: {exc}")


class UnsupportedFeatureError(NotImplementedError):
    """The backend cannot serve a feature the program asks for (the message names both)."""

    def __init__(self, backend: str, feature: str, hint: str = "") -> None:
        msg = f"{backend} backend does not support {feature}"
        super().__init__(f"{msg}; {hint}" if hint else msg)
        self.backend = backend
        self.feature = feature


class DynamicProgramError(Exception):
    """Raised while tracing when Python control flow reads a generated value.

    The program cannot be compiled into a static request graph and runs in the interpreter.
    """
