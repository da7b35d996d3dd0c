"""Tiny random embedding, cross-encoder and classifier checkpoints, saved the way their libraries do.

- ``save_st_decoder``: a Llama-family decoder as a sentence-transformers directory (bare decoder
  weights, ``modules.json``, its Pooling config, optionally Normalize).
- ``save_st_encoder``: a BERT or XLM-R encoder as a sentence-transformers directory.
- ``save_encoder_classifier``: a ``*ForSequenceClassification`` encoder (a cross-encoder) with its
  WordPiece tokenizer; ``save_decoder_classifier``: a Llama-family ``*ForSequenceClassification``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from tests.helpers.model_helpers import save_tiny_model, save_tiny_tokenizer
from tests.helpers.sentence_transformers_ref import sentence_transformers

WORDS = "the a cat dog sat on mat fish swims sea red blue house tree runs fast slow big small".split()


def save_wordpiece_tokenizer(path: str | Path) -> None:
    """A BERT WordPiece tokenizer over the special tokens, single letters and ``WORDS``."""
    from transformers import BertTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz", *WORDS]
    vocab += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(path / "vocab.txt")).save_pretrained(str(path))


def tiny_bert_config(roberta: bool = False, **overrides: Any) -> Any:
    from transformers import BertConfig, XLMRobertaConfig

    kwargs = dict(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=0.2,
    )
    kwargs.update(overrides)
    return XLMRobertaConfig(pad_token_id=0, type_vocab_size=1, **kwargs) if roberta else BertConfig(**kwargs)


def _randomize_1d(model: torch.nn.Module, seed: int) -> None:
    torch.manual_seed(seed)
    with torch.no_grad():  # norms start at 1 and biases at 0: make them matter
        for name, param in model.named_parameters():
            if param.dim() == 1:
                param.normal_(1.0 if "norm" in name.lower() else 0.0, 0.2)


def _st_model(transformer_dir: Path, pooling_mode: str, normalize: bool, out: Path) -> Any:
    st = sentence_transformers()
    from sentence_transformers.sentence_transformer import modules as models

    t = models.Transformer(str(transformer_dir))
    modules = [t, models.Pooling(t.get_embedding_dimension(), pooling_mode=pooling_mode)]
    if normalize:
        modules.append(models.Normalize())
    model = st.SentenceTransformer(modules=modules, device="cpu")
    model.save(str(out))
    return model


def _drop_chat_template(path: Path) -> None:
    """sentence-transformers >= 6 formats plain text through a tokenizer's chat template (as a
    message); embedding checkpoints embed the text as given, so the tiny tokenizer loses its template."""
    (path / "chat_template.jinja").unlink(missing_ok=True)
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config.pop("chat_template", None)
    config_file.write_text(json.dumps(config))


def save_st_decoder(config: Any, path: str | Path, pooling_mode: str, normalize: bool, seed: int = 0) -> Path:
    """A decoder embedding model (``pooling_mode``: ``lasttoken`` or ``mean``) at ``path``."""
    path = Path(path)
    save_tiny_model(config, path / "raw", seed=seed)
    _drop_chat_template(path / "raw")
    _st_model(path / "raw", pooling_mode, normalize, path / "st")
    return path / "st"


def save_st_encoder(config: Any, path: str | Path, pooling_mode: str, normalize: bool, seed: int = 0) -> Path:
    """An encoder embedding model (``pooling_mode``: ``mean`` or ``cls``) at ``path``."""
    from transformers import AutoModel

    path = Path(path)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config, add_pooling_layer=False)
    _randomize_1d(model, seed)
    model.save_pretrained(str(path / "raw"))
    save_wordpiece_tokenizer(path / "raw")
    _st_model(path / "raw", pooling_mode, normalize, path / "st")
    return path / "st"


def save_encoder_classifier(config: Any, path: str | Path, num_labels: int = 1, seed: int = 0) -> Path:
    from transformers import AutoModelForSequenceClassification

    path = Path(path)
    config.num_labels = num_labels
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    _randomize_1d(model, seed)
    model.save_pretrained(str(path))
    save_wordpiece_tokenizer(path)
    return path


def save_decoder_classifier(config: Any, path: str | Path, num_labels: int = 1, seed: int = 0) -> Path:
    from transformers import AutoModelForSequenceClassification

    path = Path(path)
    config.num_labels = num_labels
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
    _randomize_1d(model, seed)
    model.save_pretrained(str(path))
    save_tiny_tokenizer(path)
    return path
