"""A model's tokenizer loaded in a thread while its weights load.

Loading a GGUF file's tokenizer from its pickle imports transformers (~1.2-1.5 s on a 2-core box),
about a third of a small model's load; the weights' repack (``cpu/gguf_linear.cpp``) releases the GIL,
so the two overlap. ``result()`` re-raises whatever the thread raised (a missing tokenizer file, a
build that failed), so the caller sees the same error it would have seen loading it in line."""

from __future__ import annotations

import threading
from typing import Any

from radixlm.runtime.weights.tokenizer_files import load_tokenizer, tokenizer_dir


class TokenizerPrefetch:
    """``tokenizer_dir(name_or_path)`` and ``load_tokenizer`` of it, started now in a daemon thread (a
    load that fails first does not wait for it)."""

    def __init__(self, name_or_path: str) -> None:
        self.name_or_path = name_or_path
        self._path: str | None = None
        self._tokenizer: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="radixlm-tokenizer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._path = tokenizer_dir(self.name_or_path)
            self._tokenizer = load_tokenizer(self._path)
        except BaseException as e:  # noqa: BLE001 - handed to the caller of result(), whatever it is
            self._error = e

    def result(self) -> tuple[str, Any]:
        """The tokenizer's directory and the tokenizer (None when the directory holds none); waits for
        the thread, and raises what it raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._path is not None
        return self._path, self._tokenizer
