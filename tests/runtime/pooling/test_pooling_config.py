"""The pooling a checkpoint's sentence-transformers files ask for, in both of their spellings."""

from __future__ import annotations

import json

import pytest

from radixlm.runtime.pooling.pooling_config import PoolingConfig


def _write(path, modules, pooling=None) -> str:
    (path / "modules.json").write_text(json.dumps(modules))
    if pooling is not None:
        (path / "1_Pooling").mkdir()
        (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return str(path)


TRANSFORMER = {"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"}
POOLING = {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
DENSE = {"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
NORMALIZE = {"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}


def test_legacy_flags(tmp_path):
    flags = {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}
    flags["pooling_mode_max_tokens"] = False
    path = _write(tmp_path, [TRANSFORMER, POOLING, NORMALIZE], flags)
    assert PoolingConfig.from_checkpoint(path, {}, is_encoder=True) == PoolingConfig("mean", True)


def test_version_6_mode_without_normalize(tmp_path):
    path = _write(tmp_path, [TRANSFORMER, POOLING], {"pooling_mode": "lasttoken"})
    assert PoolingConfig.from_checkpoint(path, {}, is_encoder=False) == PoolingConfig("last", False)


def test_defaults_and_matryoshka(tmp_path):
    hf = {"matryoshka_dimensions": [32, 64]}
    config = PoolingConfig.from_checkpoint(str(tmp_path), hf, is_encoder=False)
    assert config == PoolingConfig("last", True, True, (32, 64))
    assert PoolingConfig.from_checkpoint(str(tmp_path), {}, is_encoder=True).method == "cls"


@pytest.mark.parametrize(
    ("modules", "pooling", "match"),
    [
        ([TRANSFORMER, POOLING, DENSE], {}, "Dense"),
        ([TRANSFORMER, POOLING], {"pooling_mode_max_tokens": True}, "exactly one"),
        ([TRANSFORMER, POOLING], {"pooling_mode": "weightedmean"}, "weightedmean"),
    ],
)
def test_what_is_refused(tmp_path, modules, pooling, match):
    path = _write(tmp_path, modules, {"pooling_mode_mean_tokens": True} if not pooling else pooling)
    with pytest.raises(ValueError, match=match):
        PoolingConfig.from_checkpoint(path, {}, is_encoder=False)
