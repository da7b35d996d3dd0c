"""Under ``tool_choice: "none"`` the tools stay in the prompt, so the format's call marker is banned
where the tokenizer spells it as one token (a model trained on the format reaches for that token)."""

from __future__ import annotations

from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.server.chat_plan import BAN_BIAS, _ban_call_marker
from radixlm.runtime.server.function_call.registry import get_parser
from tests.helpers.tokenizers import tiny_byte_level_tokenizer


def test_a_one_token_marker_is_banned_and_other_biases_are_kept():
    tok = tiny_byte_level_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<tool_call>"]})
    marker = tok.convert_tokens_to_ids("<tool_call>")
    params = _ban_call_marker(SamplingParams(logit_bias={5: 2.0}), get_parser("hermes"), tok)
    assert params.logit_bias == {5: 2.0, marker: BAN_BIAS}


def test_a_marker_spelled_in_several_tokens_is_left_alone():
    tok = tiny_byte_level_tokenizer()
    assert len(tok.encode("<tool_call>", add_special_tokens=False)) > 1
    params = SamplingParams(logit_bias={5: 2.0})
    assert _ban_call_marker(params, get_parser("hermes"), tok).logit_bias == {5: 2.0}
