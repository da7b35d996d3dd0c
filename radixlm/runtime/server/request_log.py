"""``--log-requests``: a log line for each prompt received and each sample finished (SGLang's flag).

``--log-requests-level`` as in SGLang: 0 metadata; 1 metadata and sampling parameters; 2 also the
prompt and output, each cut to ``PARTIAL_CHARS``; 3 everything in full. The lines go to the
``radixlm.requests`` logger at INFO, shown whatever ``--log-level`` says.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

PARTIAL_CHARS = 2048
LEVELS = (0, 1, 2, 3)

logger = logging.getLogger("radixlm.requests")


class RequestLog:
    """Formats and writes the lines; ``received`` and ``finished`` are the TokenizerManager's hooks."""

    def __init__(self, level: int) -> None:
        if level not in LEVELS:
            raise ValueError(f"log_requests_level must be one of {LEVELS}, got {level}")
        self.level = level
        logger.setLevel(logging.INFO)

    def received(self, items: list[Any], rids: list[str]) -> None:
        """Each prompt of a request (``GenerateItem``s), under the rid it runs as."""
        for item, rid in zip(items, rids):
            fields: dict[str, Any] = {"rid": rid}
            if self.level >= 1:
                fields["sampling_params"] = _set_fields(item.sampling_params)
            if self.level >= 2:
                fields["text"] = self._cut(item.text)
                fields["input_ids"] = self._cut(item.input_ids)
            logger.info("Receive: %s", fields)

    def finished(self, sample: Any, out: Any) -> None:
        """A finished sample (``SampleState``) and its last output."""
        fields: dict[str, Any] = {"rid": sample.rid, "meta_info": sample.meta}
        if self.level >= 2:
            fields["text"] = self._cut(sample.text)
        logger.info("Finish: %s", fields)

    def _cut(self, value: Any) -> Any:
        if value is None or self.level >= 3 or len(value) <= PARTIAL_CHARS:
            return value
        return value[:PARTIAL_CHARS] + ("..." if isinstance(value, str) else [...])


def _set_fields(params: Any) -> dict[str, Any]:
    """The sampling parameters a request set (those left at their defaults omitted)."""
    defaults = type(params)()
    return {
        f.name: getattr(params, f.name)
        for f in dataclasses.fields(params)
        if getattr(params, f.name) != getattr(defaults, f.name)
    }
