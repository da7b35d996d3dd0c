"""LoRA with the KV disk tier: an adapter's KV never reaches the disk, whose files outlive the
process, because adapters' radix namespaces are numbered per process and would name another adapter
after a restart; the base model's KV is saved as usual."""

from __future__ import annotations

from tests.helpers.engines import tiny_scheduler
from tests.helpers.model_helpers import TINY_SEQ
from tests.runtime.lora.test_lora_scheduler import _req, _run

PROMPT = TINY_SEQ * 8  # two full disk pages


def _serve(lora_base, adapters, storage, lora: str | None) -> dict:
    with tiny_scheduler(
        str(lora_base),
        enable_lora=True,
        lora_paths=[f"all8={adapters['all8']}"],
        max_lora_rank=16,
        hicache_storage_dir=str(storage),
    ) as sched:
        sched.handle(_req("r", PROMPT, lora))
        outs: dict = {}
        _run(sched, outs)
        sched.check_kv_integrity()
    return outs["r"]


def test_an_adapters_kv_stays_off_the_disk(lora_base, adapters, tmp_path):
    _serve(lora_base, adapters, tmp_path, "all8")
    assert list(tmp_path.glob("*.kv")) == []
    base = _serve(lora_base, adapters, tmp_path, None)
    assert base["cached"] == 0 and len(list(tmp_path.glob("*.kv"))) >= 2
    again = _serve(lora_base, adapters, tmp_path, "all8")  # a restart: the base pages are not its
    assert again["cached"] == 0
    assert _serve(lora_base, adapters, tmp_path, None)["cached"] >= 128
