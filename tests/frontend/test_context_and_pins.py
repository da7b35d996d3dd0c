"""Token-exact contexts and the pins of request graphs, against the fake backend."""

from __future__ import annotations

import asyncio

import pytest

import radixlm as sgl
from radixlm.program.context import append_ids, append_text, continuation, to_ids, with_text
from radixlm.program.graph_executor import execute_program, plan_pins
from tests.frontend import programs
from tests.frontend.fake_backend import FakeBackend, token_id


def test_segments_merge_and_are_never_mutated():
    ctx: list = []
    append_text(ctx, "a")
    append_text(ctx, "b")
    append_ids(ctx, [1])
    append_ids(ctx, [2, 3])
    fork = list(ctx)
    append_ids(fork, [4])
    append_text(fork, "")
    assert ctx == [{"text": "ab"}, {"ids": [1, 2, 3]}]
    assert fork == [{"text": "ab"}, {"ids": [1, 2, 3, 4]}]
    assert with_text(ctx, "c") == ctx + [{"text": "c"}]
    assert to_ids(with_text(ctx, "xy"), lambda t: [ord(ch) for ch in t]) == [97, 98, 1, 2, 3, 120, 121]


@pytest.mark.parametrize(
    "reason,options,expected",
    [
        ({"type": "length", "length": 3}, {}, [{"ids": [5, 6, 7]}]),
        ({"type": "stop", "matched": None}, {}, [{"ids": [5, 6, 7]}]),  # grammar end
        ({"type": "stop", "matched": 7}, {}, [{"ids": [5, 6]}]),  # EOS / stop token: not in the text either
        ({"type": "stop", "matched": 7}, {"no_stop_trim": True}, [{"ids": [5, 6, 7]}]),
        ({"type": "stop", "matched": "\n"}, {}, [{"text": "ab"}]),  # stop string: the cut text, re-encoded
    ],
)
def test_continuation_of_a_gen(reason, options, expected):
    resp = {"text": "ab", "output_ids": [5, 6, 7], "meta_info": {"finish_reason": reason}}
    assert continuation(resp, options) == expected


def test_continuation_without_ids_is_the_text():
    assert continuation({"text": "hi", "meta_info": {}}, {}) == [{"text": "hi"}]
    assert continuation({"text": "", "meta_info": {}}, {}) == []


@pytest.mark.parametrize("execution", ["interpreter", "graph"])
def test_generated_tokens_continue_as_ids(execution):
    fake = FakeBackend(canned={"A:": " one two", "Then:": " three\nfour"})

    @sgl.function
    def prog(s):
        s += "A:" + sgl.gen("a", max_tokens=4) + "\nThen:" + sgl.gen("b", max_tokens=4, stop="\n")
        s += "\nEnd:" + sgl.gen("c", max_tokens=2)

    state = prog.run(backend=fake, execution=execution)
    assert state["a"] == " one two" and state["b"] == " three"
    second, third = fake.requests[-2]["input_segments"], fake.requests[-1]["input_segments"]
    assert second == [{"text": "A:"}, {"ids": [token_id(" one"), token_id(" two")]}, {"text": "\nThen:"}]
    # b stopped on a string: its cut text continues, merged with the text after it.
    assert third == second[:2] + [{"text": "\nThen: three\nEnd:"}]


def _graph(nodes):
    return {
        "version": 1,
        "name": "g",
        "nodes": [
            {"id": i, "state": 0, "parent": p, "extend": [{"text": t}], "op": op}
            for i, (p, t, op) in enumerate(nodes)
        ],
    }


GEN = {"type": "gen", "name": "x", "options": {"max_new_tokens": 2}}


def test_pins_count_request_children_through_extend_only_nodes():
    graph = _graph(
        [
            (None, "a", {"type": "prefill"}),  # 0: three children run requests (1, 3 via 2, 4 via 2)
            (0, "b", GEN),  # 1
            (0, "c", None),  # 2: runs nothing; its children count for node 0
            (2, "d", GEN),  # 3
            (
                2,
                "e",
                {"type": "select", "name": "s", "choices": ["x", "y"], "method": "token_length_normalized"},
            ),
            (None, "f", {**GEN, "options": {"n": 2}}),  # 5: n > 1 pins nothing
            (5, "g", GEN),  # 6
            (4, "h", None),  # 7: a leaf that runs nothing
        ]
    )
    pins = plan_pins(graph["nodes"], "run")
    assert pins[0] == {"rid": "program-run-0", "pin_children": 3}
    assert pins[1] == pins[3] == pins[4] == {"unpin_rids": ["program-run-0"]}
    assert set(pins) == {0, 1, 3, 4}


def test_graph_requests_carry_pins_and_unpins():
    fake = FakeBackend()
    graph = programs.tree.compile(topic="tea", backend=fake, temperature=0).graph
    asyncio.run(execute_program(graph, fake.agenerate))
    prefill, *ideas, summary = [r for r in fake.requests if "rid" in r or "unpin_rids" in r]
    assert prefill["pin_children"] == 4 and prefill["sampling_params"] == {"max_new_tokens": 0}
    assert [r["unpin_rids"] for r in ideas] == [[prefill["rid"]]] * 3
    # The summary continues the program's own state after the fork point: the prefill's 4th child.
    assert summary["unpin_rids"] == [prefill["rid"]] and "pin_children" not in summary
    assert sum(1 for r in fake.requests if "rid" in r) == 1


def test_select_pins_its_prefix_prefill():
    fake = FakeBackend()
    graph = programs.choose.compile(question="Q?", backend=fake, temperature=0).graph
    asyncio.run(execute_program(graph, fake.agenerate))
    first = fake.requests[0]
    assert first["sampling_params"] == {"max_new_tokens": 0} and first["pin_children"] == 1
    assert fake.requests[-1]["unpin_rids"] == [first["rid"]]
    assert all("pin_children" not in r for r in fake.requests[1:])
