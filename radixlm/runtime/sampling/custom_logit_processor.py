"""SGLang's custom logit processors: client-sent Python that rewrites its request's logits.

``CustomLogitProcessor.to_str()`` is SGLang's wire format, ``{"callable": "<hex of dill.dumps(cls)>"}``,
so a processor written for SGLang (``sglang.srt.sampling.custom_logit_processor``) is served as is.
Loading one runs arbitrary code in the server: the server accepts them only with
``--enable-custom-logit-processor``.

In the scheduler, before the grammar mask and sampling, the rows of the requests that share a
processor are passed to one call, ``processor(logits[rows], [custom_params per row])``, and its result
replaces them. A call that raises, or returns a tensor of another shape, is retried row by row so
that only the requests whose own call fails are failed.
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import torch

from radixlm.runtime.sampling.sequence import SamplingSequence

Processor = Callable[[torch.Tensor, list[dict[str, Any]]], torch.Tensor]


class CustomLogitProcessor(ABC):
    """Subclass, implement ``__call__``, send ``MyProcessor.to_str()`` as ``custom_logit_processor``."""

    @abstractmethod
    def __call__(self, logits: torch.Tensor, custom_param_list: list[dict[str, Any]]) -> torch.Tensor:
        """``logits``: ``[rows, vocab]`` of the requests using this processor; one params dict per row
        (the request's ``custom_params``, ``{}`` when it sent none). Returns the new logits."""

    @classmethod
    def to_str(cls) -> str:
        import dill

        return json.dumps({"callable": dill.dumps(cls).hex()})


@functools.lru_cache(maxsize=64)
def load_processor(text: str) -> Processor:
    """The processor a ``to_str()`` string holds (a class is instantiated, as SGLang does).

    Raises ``ValueError`` naming what is wrong with the string or its object."""
    try:
        payload = json.loads(text)
        blob = bytes.fromhex(payload["callable"])
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(
            'custom_logit_processor must be CustomLogitProcessor.to_str(): {"callable": "<hex of dill>"}'
        ) from e
    try:
        import dill
    except ImportError as e:
        raise ValueError("custom_logit_processor needs the dill package (pip install dill)") from e
    try:
        obj = dill.loads(blob)
        processor = obj() if isinstance(obj, type) else obj
    except Exception as e:  # noqa: BLE001 - whatever the client's pickle raises is its request's error
        raise ValueError(f"custom_logit_processor could not be loaded: {type(e).__name__}: {e}") from e
    if not callable(processor):
        raise ValueError(f"custom_logit_processor holds a {type(processor).__name__}, not a callable")
    return processor


def apply_custom_processors(logits: torch.Tensor, reqs: Sequence[SamplingSequence]) -> dict[int, str]:
    """Run each request's processor on its rows of ``logits`` (in place); returns row -> error for
    the rows whose processor failed (those rows must not be sampled). Costs nothing without any."""
    groups: dict[str, list[int]] = {}
    for i, req in enumerate(reqs):
        text = req.sampling_params.custom_logit_processor
        if text is not None:
            groups.setdefault(text, []).append(i)
    errors: dict[int, str] = {}
    for text, rows in groups.items():
        try:
            processor = load_processor(text)
        except ValueError as e:
            errors.update((i, str(e)) for i in rows)
            continue
        params = [dict(reqs[i].sampling_params.custom_params or {}) for i in rows]
        try:
            _run(processor, logits, rows, params)
        except Exception:  # noqa: BLE001 - find the rows whose own call fails
            for i, p in zip(rows, params):
                try:
                    _run(processor, logits, [i], [p])
                except Exception as e:  # noqa: BLE001 - a client's code failing fails its request only
                    errors[i] = f"its custom_logit_processor raised {type(e).__name__}: {e}"
    return errors


def _run(processor: Processor, logits: torch.Tensor, rows: list[int], params: list[dict[str, Any]]) -> None:
    index = torch.tensor(rows, device=logits.device)
    out = processor(logits[index].clone(), params)
    if not isinstance(out, torch.Tensor) or out.shape != (len(rows), logits.shape[1]):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"returned {shape}, not a tensor of shape {(len(rows), logits.shape[1])}")
    logits[index] = out.to(logits.device, logits.dtype)
