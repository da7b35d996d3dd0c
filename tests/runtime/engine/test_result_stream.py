"""Engine streaming: ``for`` and ``async for`` read the same results and fail the same way."""

from __future__ import annotations

import asyncio

import pytest

from radixlm.runtime.engine import EngineError
from radixlm.runtime.engine.result_stream import AsyncResultStream, SyncResultStream

GREEDY = {"temperature": 0, "max_new_tokens": 10}


def _result(text: str, finish_reason: dict | None = None, error: dict | None = None) -> dict:
    result = {"text": text, "output_ids": [], "meta_info": {"id": "r", "finish_reason": finish_reason}}
    if error is not None:
        result["error"] = error
    return result


def _read_sync(items: list[dict | None], loop_error: BaseException | None = None) -> list:
    """What ``for`` over a stream fed ``items`` sees: the results, then what it raised (if any)."""
    stream = SyncResultStream(lambda sink: [sink(item) for item in items], lambda: loop_error)
    seen: list = []
    try:
        for item in stream:
            seen.append(item)
    except Exception as e:
        seen.append(e)
    seen.append(list(stream))  # nothing after the end
    return seen


def _read_async(items: list[dict | None], loop_error: BaseException | None = None) -> list:
    async def read() -> list:
        stream = AsyncResultStream(lambda sink: [sink(item) for item in items], lambda: loop_error)
        seen: list = []
        try:
            async for item in stream:
                seen.append(item)
        except Exception as e:
            seen.append(e)
        seen.append([item async for item in stream])
        return seen

    return asyncio.run(read())


def _shape(seen: list) -> list:
    return [(type(x).__name__, str(x), repr(x.__cause__)) if isinstance(x, Exception) else x for x in seen]


FEEDS = {
    "finishes": [_result("a"), _result("ab"), _result("abc", {"type": "length"}), _result("late")],
    "rejected": [_result("a"), _result("", {"type": "abort"}, {"status_code": 400, "message": "bad"})],
    "fails": [_result("a"), _result("", {"type": "abort"}, {"status_code": 500, "message": "boom"})],
    "loop stops": [_result("a"), None],
}


@pytest.mark.parametrize("feed", FEEDS.values(), ids=FEEDS.keys())
def test_sync_and_async_streams_read_alike(feed):
    loop_error = OSError("the loop's cause")
    sync_seen, async_seen = _read_sync(feed, loop_error), _read_async(feed, loop_error)
    assert _shape(sync_seen) == _shape(async_seen)
    assert sync_seen[-1] == []


def test_stream_ends_at_the_final_result_and_raises_what_ends_it():
    assert [r["text"] for r in _read_sync(FEEDS["finishes"])[:-1]] == ["a", "ab", "abc"]
    assert isinstance(_read_sync(FEEDS["rejected"])[1], ValueError)
    assert isinstance(_read_sync(FEEDS["fails"])[1], RuntimeError)
    stopped = _read_sync(FEEDS["loop stops"], OSError("cause"))[1]
    assert isinstance(stopped, EngineError) and isinstance(stopped.__cause__, OSError)


def test_a_failed_submission_ends_the_stream():
    def refuse(sink) -> None:
        raise EngineError("the engine is shut down")

    stream = SyncResultStream(refuse, lambda: None)
    with pytest.raises(EngineError):
        next(stream)
    assert list(stream) == []


def test_async_stream_matches_sync_stream_on_the_engine(tiny_engine):
    # one token a chunk: speculating, the second run would verify the first's answer (in the radix
    # tree) as one draft and send it in one chunk
    params = {**GREEDY, "speculative": False}
    sync_chunks = list(tiny_engine.generate("stream me", params, stream=True))

    async def read() -> list[dict]:
        return [chunk async for chunk in await tiny_engine.async_generate("stream me", params, stream=True)]

    async_chunks = asyncio.run(read())
    assert [c["text"] for c in async_chunks] == [c["text"] for c in sync_chunks]
    assert async_chunks[-1]["meta_info"]["finish_reason"] is not None
