"""A model's tokenizer files: its own directory, or for a GGUF file the files transformers builds from
its metadata (seconds), cached by the file's path, size and mtime so a restart loads them at once.

A GGUF file's cached tokenizer is also kept pickled beside its files (one pickle per transformers and
tokenizers version): building a 128k-token vocabulary with many added tokens from ``tokenizer.json``
takes transformers ~10-20 s (it deep-copies every added token), unpickling ~2 s."""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from pathlib import Path
from typing import Any

from radixlm.runtime.weights.atomic_dir import build_once
from radixlm.runtime.weights.model_registry import cache_dir, resolve_model

logger = logging.getLogger(__name__)

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def tokenizer_dir(name_or_path: str) -> str:
    """The directory holding the tokenizer files of ``name_or_path`` (a model name, a directory, a
    hub id or a .gguf file)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return str(path.resolve())
    resolved = resolve_model(name_or_path)
    return str(gguf_tokenizer_dir(Path(resolved))) if resolved.endswith(".gguf") else resolved


def load_tokenizer(path: str) -> Any:
    """The transformers tokenizer saved in directory ``path``, or None when it holds none."""
    if not any((Path(path) / f).is_file() for f in _TOKENIZER_FILES):
        return None
    directory = Path(path).resolve()
    if directory.parent == (cache_dir() / "gguf-tokenizers").resolve():
        return _pickled_tokenizer(directory)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _pickled_tokenizer(directory: Path) -> Any:
    """The tokenizer saved in ``directory`` (an entry of our GGUF tokenizer cache: files we wrote),
    from its pickle when there is one for these library versions; else loaded and pickled for next time."""
    import tokenizers
    import transformers  # NOTE: not AutoTokenizer yet: it imports torch (seconds); unpickling does not

    pickled = directory / f"tokenizer-{transformers.__version__}-{tokenizers.__version__}.pickle"
    if pickled.is_file():
        try:
            with open(pickled, "rb") as f:
                return pickle.load(f)
        except Exception as e:  # noqa: BLE001 - a damaged entry is rebuilt, whatever the unpickler raised
            logger.warning("%s: unreadable (%s); loading the tokenizer files instead", pickled, e)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    tmp = pickled.with_name(f".{pickled.name}.{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            pickle.dump(tokenizer, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, pickled)  # readers see a whole pickle or none
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as e:
        logger.warning("could not keep the tokenizer pickled at %s: %s", pickled, e)
        tmp.unlink(missing_ok=True)
    return tokenizer


def served_tokenizer(path: str) -> Any:
    """The tokenizer the server's processes use from directory ``path`` (the scheduler's
    ``local_tokenizer_path``): ``load_tokenizer``'s, so a GGUF file's comes from its pickle without
    importing torch; else transformers' (which raises naming what is missing)."""
    tokenizer = load_tokenizer(path)
    if tokenizer is not None:
        return tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def tokenizer_for(name_or_path: str) -> Any:
    """The tokenizer of a model (what ``load_model`` serves it with); ValueError when it has none."""
    tokenizer = load_tokenizer(tokenizer_dir(name_or_path))
    if tokenizer is None:
        raise ValueError(f"model {name_or_path!r} has no tokenizer")
    return tokenizer


def gguf_tokenizer_dir(gguf_path: Path) -> Path:
    """The tokenizer (and chat template) of a GGUF file saved as Hugging Face files, built once."""
    gguf_path = gguf_path.resolve()
    stat = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    final = cache_dir() / "gguf-tokenizers" / f"{gguf_path.stem}-{key}"
    final.parent.mkdir(parents=True, exist_ok=True)
    return build_once(final, lambda tmp: _save_gguf_tokenizer(gguf_path, tmp))


def _save_gguf_tokenizer(gguf_path: Path, out_dir: Path) -> None:
    from radixlm.runtime.weights.gguf_config import gguf_field
    from radixlm.runtime.weights.gguf_source import open_gguf

    out_dir.mkdir()
    reader = open_gguf(str(gguf_path))
    if gguf_field(reader, "tokenizer.ggml.model") is None:
        return  # no tokenizer in the file: an empty entry
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    # AutoTokenizer first reads the file's model config, which transformers' GGUF reader refuses for the
    # architectures it does not know (granite, olmo2, smollm3, olmoe...); the tokenizer itself is built
    # from the tokenizer.* keys alone, so the generic fast tokenizer reads those files.
    # NOTE: Gemma's tokenizer class is sentencepiece's: over a byte-level vocabulary (llama.cpp writes
    # one for a checkpoint without tokenizer.model) it adds a <mask> token and reloads without an unk.
    byte_level_gemma = gguf_field(reader, "tokenizer.ggml.model") == "gpt2" and str(
        gguf_field(reader, "general.architecture")
    ).startswith("gemma")
    auto = _transformers_reads_gguf_config(reader) and not byte_level_gemma
    tokenizer_cls = AutoTokenizer if auto else PreTrainedTokenizerFast
    tokenizer = tokenizer_cls.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tokenizer.save_pretrained(str(out_dir))


def _transformers_reads_gguf_config(reader: Any) -> bool:
    from transformers.integrations.gguf import GGUF_CONFIG_ARCHS
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    from radixlm.runtime.weights.gguf_config import gguf_field

    arch = gguf_field(reader, "general.architecture")
    aliases = {"qwen3moe": "qwen3_moe", "qwen2moe": "qwen2_moe"}  # the names transformers' reader maps
    return arch in GGUF_CONFIG_ARCHS or aliases.get(arch, arch) in GGUF_SUPPORTED_ARCHITECTURES
