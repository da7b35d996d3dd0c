"""The ``tools`` and ``tool_choice`` fields of a chat completion request."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
FUNCTION_NAME_PATTERN = r"^[A-Za-z0-9_.\-]+$"


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=64, pattern=FUNCTION_NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @property
    def schema(self) -> dict[str, Any]:
        """The parameters' JSON schema (no parameters: an empty object)."""
        return self.parameters if self.parameters is not None else EMPTY_PARAMETERS


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"] = "function"
    function: FunctionDef


class FunctionName(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"] = "function"
    function: FunctionName


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice
