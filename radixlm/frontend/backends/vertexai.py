"""``VertexAI``: SGLang's Google Vertex AI backend, accepted but not served here.

The constructor takes SGLang's arguments so programs that build the backend import and start; the
first request raises ``UnsupportedFeatureError`` naming what is missing: the Google Cloud SDK
(``google-cloud-aiplatform``), a ``GCP_PROJECT_ID``, and network access to Google Cloud, none of
which radixlm can test against. ``LiteLLM("vertex_ai/<model>")`` reaches Vertex AI models instead.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from radixlm.frontend.backends.base import Backend
from radixlm.frontend.chat_template import get_chat_template
from radixlm.frontend.errors import UnsupportedFeatureError
from radixlm.program.context import Context
from radixlm.program.protocols import Request


class VertexAI(Backend):
    """``VertexAI(model_name, safety_settings=None)`` as in SGLang; every request raises."""

    name = "VertexAI"
    chat_mode = True

    def __init__(self, model_name: str, safety_settings: Any = None) -> None:
        super().__init__(get_chat_template("default"))
        self.model_name = model_name
        self.safety_settings = safety_settings

    def missing(self) -> str:
        """What this machine lacks for Vertex AI, in words."""
        lacks = []
        if importlib.util.find_spec("vertexai") is None:
            lacks.append("the Google Cloud SDK (pip install google-cloud-aiplatform)")
        if not os.environ.get("GCP_PROJECT_ID"):
            lacks.append("GCP_PROJECT_ID")
        lacks.append("radixlm's Vertex AI client, which is not implemented (it cannot be tested offline)")
        return "missing " + "; ".join(lacks) + f'; LiteLLM("vertex_ai/{self.model_name}") reaches the model'

    def check_request(self, req: Request) -> None:
        raise UnsupportedFeatureError(self.name, "generation", self.missing())

    def generate(self, req: Request) -> Any:
        self.check_request(req)

    def select(
        self, context: Context, choices: list[str], method: Any, messages: list | None = None
    ) -> tuple[str, dict]:
        raise UnsupportedFeatureError(self.name, "select", self.missing())

    def cache_prefix(self, context: Context) -> None:
        """Nothing to prefill."""

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.model_name, "chat_template": None}
