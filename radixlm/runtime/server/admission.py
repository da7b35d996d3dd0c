"""Whether the server takes one more request: load shedding and draining, decided in the HTTP process.

A request is refused with 503 and ``Retry-After`` when the samples in flight would exceed
``max_running_requests + max_queued_requests`` (the scheduler's queue has a bound), or when the
server is draining after SIGTERM; with 413 (no retry can help) when it alone holds more samples
than that. A prompt whose text is so long it cannot fit in the token limit
is refused before it is tokenized (``max_prompt_chars``).
"""

from __future__ import annotations

from typing import Any

from radixlm.runtime.server.errors import ApiError

RETRY_AFTER_S = 1


class Admission:
    """Load limits of one server."""

    def __init__(self, server_args: Any, context_length: int, max_token_chars: int) -> None:
        self.capacity = server_args.max_running_requests + server_args.max_queued_requests
        max_tokens = min(server_args.max_prompt_tokens or context_length, context_length)
        # NOTE: no token decodes to more characters than the longest vocabulary entry, so a text
        # longer than this has more tokens than allowed without tokenizing it.
        self.max_prompt_chars = max_tokens * max(max_token_chars, 1)
        self.draining: str | None = None
        self.custom_logit_processors = bool(getattr(server_args, "enable_custom_logit_processor", False))

    def check(self, in_flight: int, new_samples: int) -> None:
        """Raise a 503 ``ApiError`` when the server is full or draining."""
        if self.draining is not None:
            raise ApiError(
                f"the server is shutting down: {self.draining}",
                503,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        if new_samples > self.capacity:  # never admitted, however long the client retries
            raise ApiError(
                f"the request has {new_samples} prompts and samples; this server runs at most "
                f"{self.capacity} at once (max_running_requests + max_queued_requests)",
                413,
            )
        if in_flight + new_samples > self.capacity:
            raise ApiError(
                f"the server is at capacity ({in_flight} requests in flight, limit "
                f"{self.capacity} = max_running_requests + max_queued_requests); retry later",
                503,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )

    def check_logit_processor(self, params: Any) -> None:
        """A 400 for a ``custom_logit_processor`` when they are off, or when it does not load."""
        text = params.custom_logit_processor
        if text is None:
            return
        if not self.custom_logit_processors:
            raise ApiError(
                "custom_logit_processor is disabled on this server: it runs the client's Python code in "
                "the server process; --enable-custom-logit-processor trusts clients with that",
                param="custom_logit_processor",
            )
        from radixlm.runtime.sampling.custom_logit_processor import load_processor

        try:
            load_processor(text)
        except ValueError as e:
            raise ApiError(str(e), param="custom_logit_processor") from e

    def check_batch_before_parsing(self, body: Any, prompt_fields: tuple[str, ...]) -> None:
        """413 when a body's batch alone holds more prompts than the server runs at once, before any
        of its items is parsed (a 20,000-item batch took seconds to parse only to be refused)."""
        if not isinstance(body, dict):
            return
        for name in prompt_fields:
            value = body.get(name)
            if isinstance(value, list) and value and isinstance(value[0], (str, list)):  # a batch
                self.check(0, len(value))

    def check_prompt_text(self, text: str, field: str) -> None:
        if len(text) > self.max_prompt_chars:
            raise ApiError(
                f"the prompt has {len(text)} characters: more tokens than this server allows", param=field
            )


def max_token_chars(tokenizer: Any) -> int:
    """The longest vocabulary entry in characters (byte-level entries: one character per byte)."""
    try:
        return max(len(t) for t in tokenizer.get_vocab())
    except (AttributeError, TypeError, ValueError):
        return 1 << 10
