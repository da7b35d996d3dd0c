"""``Engine.abort`` names an ``Engine.encode`` request by the ``rid`` it was given: dropped while it
waits to run, the call raises ``EncodeAborted``; the rid is free again and the engine answers on."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from radixlm.runtime.engine.encode_api import EncodeAborted
from radixlm.runtime.engine.engine import Engine
from tests.helpers.embedding_models import save_st_encoder, tiny_bert_config


def test_engine_encode_aborted_while_queued(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    path = save_st_encoder(tiny_bert_config(), tmp_path, "mean", True)
    with Engine(model=str(path), device="cpu", dtype="float32", num_threads=1, is_embedding=True) as engine:
        before = engine.encode("the cat sat")
        gate, in_step = threading.Event(), threading.Event()
        step = engine.scheduler.step

        def held_step():  # the loop stops in a step until the abort is queued behind the request
            in_step.set()
            gate.wait(timeout=30)
            return step()

        monkeypatch.setattr(engine.scheduler, "step", held_step)
        assert in_step.wait(timeout=30)
        errors: list[BaseException] = []

        def call() -> None:
            try:
                engine.encode(["the cat sat", "a dog"], rid="e1")
            except BaseException as e:  # noqa: BLE001 - checked below
                errors.append(e)

        caller = threading.Thread(target=call)
        caller.start()
        deadline = time.monotonic() + 30
        while not engine._loop.family("e1") and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(ValueError, match="already running"):
            engine.encode("blue", rid="e1")
        engine.abort("e1")
        gate.set()
        caller.join(timeout=30)
        assert len(errors) == 1 and isinstance(errors[0], EncodeAborted), errors
        assert engine._loop.family("e1") == []
        assert engine.encode("the cat sat", rid="e1") == before  # the rid is free; answers as before
        assert engine.scheduler.encoder.stats()["num_encode_aborted"] == 1
