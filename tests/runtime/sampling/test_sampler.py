"""The sampler on hand-made logits: filtering, penalties, min_new_tokens, seeded draws."""

from __future__ import annotations

import math

import pytest
import torch

from radixlm.runtime.sampling.penalties import apply_penalties
from radixlm.runtime.sampling.sampler import NUMPY_ARGMAX_ROWS, filter_probs, row_argmax, sample, sample_row
from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.scheduler.req import Req

EOS = 2
PROBS = torch.tensor([0.05, 0.40, 0.02, 0.25, 0.15, 0.10, 0.03])  # sorted: 1, 3, 4, 5, 0, 6, 2


def make_req(prompt: list[int] = (5, 6), output: list[int] = (), seed: int = 0, **params) -> Req:
    req = Req("r", list(prompt), SamplingParams(**params), seed=seed)
    req.output_ids = list(output)
    return req


def kept(probs: torch.Tensor) -> set[int]:
    return set(torch.nonzero(probs).flatten().tolist())


def test_top_k_keeps_the_k_most_likely():
    assert kept(filter_probs(PROBS, 3, 1.0, 0.0)) == {1, 3, 4}
    assert kept(filter_probs(PROBS, 1, 1.0, 0.0)) == {1}
    assert kept(filter_probs(PROBS, -1, 1.0, 0.0)) == set(range(7))


def test_top_p_keeps_the_smallest_nucleus_reaching_p():
    assert kept(filter_probs(PROBS, -1, 0.35, 0.0)) == {1}
    assert kept(filter_probs(PROBS, -1, 0.45, 0.0)) == {1, 3}  # the token crossing p is kept
    assert kept(filter_probs(PROBS, -1, 0.75, 0.0)) == {1, 3, 4}
    assert kept(filter_probs(PROBS, -1, 0.85, 0.0)) == {1, 3, 4, 5}
    assert kept(filter_probs(PROBS, -1, 1.0, 0.0)) == set(range(7))


def test_a_vanishing_top_p_keeps_the_most_likely_token():
    # 5e-324 (the smallest float, valid per the API's (0, 1]) is 0 in float32: every token was dropped
    for top_p in (5e-324, 1e-46, 1e-30):
        assert kept(filter_probs(PROBS, -1, top_p, 0.0)) == {1}


def test_a_vanishing_top_p_never_draws_a_masked_token():
    logits = torch.log(PROBS).unsqueeze(0)
    logits[0, 0] = -math.inf  # masked, e.g. by a grammar: token 0 is what an all-zero draw picked
    logits[0, 1] = -math.inf
    for seed in range(5):
        req = make_req(seed=seed, temperature=1.0, top_p=5e-324)
        assert sample(logits.clone(), [req], [EOS]).next_token_ids == [3]


def test_min_p_drops_tokens_below_a_fraction_of_the_best():
    assert kept(filter_probs(PROBS, -1, 1.0, 0.3)) == {1, 3, 4}  # threshold 0.12
    assert kept(filter_probs(PROBS, -1, 1.0, 1.0)) == {1}


def test_filters_compose_and_keep_kept_values():
    out = filter_probs(PROBS, 4, 0.7, 0.5)  # top-4 {1,3,4,5}, nucleus {1,3,4}, min_p 0.2 -> {1,3}
    assert kept(out) == {1, 3}
    assert torch.equal(out[[1, 3]], PROBS[[1, 3]])


def test_frequency_and_presence_penalties_follow_openai_semantics():
    logits = torch.zeros(1, 8)
    req = make_req(prompt=[7, 7], output=[3, 3, 3, 5], frequency_penalty=0.5, presence_penalty=0.25)
    apply_penalties(logits, [req], [EOS])
    expected = torch.zeros(8)
    expected[3] = -(0.5 * 3 + 0.25)
    expected[5] = -(0.5 * 1 + 0.25)
    assert torch.allclose(logits[0], expected)  # the prompt token 7 is not penalised


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    logits = torch.tensor([[2.0, -2.0, 2.0, -2.0, 1.0]])
    req = make_req(prompt=[0], output=[1], repetition_penalty=2.0)
    apply_penalties(logits, [req], [EOS])
    assert logits[0].tolist() == [1.0, -4.0, 2.0, -2.0, 1.0]


@pytest.mark.parametrize("penalty", [5e-324, 1e-40, 1e-30])
def test_a_tiny_repetition_penalty_keeps_the_logits_finite(penalty):
    """A penalty in (0, 2] that float32 rounds to zero (or divides past its range) must not turn the
    seen tokens' logits into inf: the request would fail with a 500 instead of being sampled."""
    logits = torch.tensor([[20.0, -2.0, 3.0, 1.0]])
    req = make_req(prompt=[0], output=[1], repetition_penalty=penalty)
    out = sample(logits, [req], [EOS])
    assert not out.errors and out.next_token_ids == [0]  # the seen positive logit was pushed up, not broken


def test_penalties_touch_only_the_rows_that_ask():
    logits = torch.randn(3, 10)
    before = logits.clone()
    reqs = [make_req(output=[1, 2]), make_req(output=[1, 2], presence_penalty=1.0), make_req(output=[4])]
    apply_penalties(logits, reqs, [EOS])
    assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
    assert not torch.equal(logits[1], before[1])


def test_min_new_tokens_blocks_eos_and_stop_ids_until_reached():
    logits = torch.zeros(2, 10)
    logits[:, EOS] = 10.0
    logits[:, 8] = 9.0
    early = make_req(output=[4], min_new_tokens=3, stop_token_ids=[8], temperature=0)
    done = make_req(output=[4, 4, 4], min_new_tokens=3, stop_token_ids=[8], temperature=0)
    out = sample(logits, [early, done], [EOS])
    assert out.next_token_ids[1] == EOS
    assert out.next_token_ids[0] not in (EOS, 8)
    assert logits[0, EOS] == -math.inf and logits[0, 8] == -math.inf


def test_min_new_tokens_yields_when_only_the_end_is_allowed():
    """A grammar that can only end (masked to EOS alone): the end wins, no row is left without a token."""
    logits = torch.full((2, 10), -math.inf)
    logits[0, EOS] = 1.0  # the grammar allows only its end
    logits[1, [EOS, 3]] = 1.0  # the grammar allows its end or token 3
    reqs = [make_req(output=[4], min_new_tokens=5, temperature=0) for _ in range(2)]
    out = sample(logits, reqs, [EOS])
    assert not out.errors
    assert out.next_token_ids == [EOS, 3]


def test_greedy_rows_take_the_argmax_and_sampled_rows_stay_in_the_filter():
    logits = torch.log(PROBS).repeat(2, 1)
    greedy = make_req(temperature=0)
    for seed in range(50):
        sampled = make_req(seed=seed, temperature=1.0, top_k=2)
        out = sample(logits.clone(), [greedy, sampled], [EOS])
        assert out.next_token_ids[0] == 1
        assert out.next_token_ids[1] in (1, 3)


@pytest.mark.parametrize("temperature", [math.nan, math.inf, -1.0])
def test_a_temperature_that_is_not_a_finite_number_ge_0_is_named(temperature):
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams.from_dict({"temperature": temperature})


def test_a_vanishing_temperature_decodes_greedily():
    logits = torch.tensor([[0.5, 3.0, 1.0, -2.0, 2.5, 0.0, 1.5]])
    for temperature in (1e-300, 1e-9):
        req = make_req(temperature=temperature, seed=3)
        assert req.sampling_params.is_greedy
        assert sample(logits.clone(), [req], [EOS]).next_token_ids == [1]


def test_seeded_draw_depends_on_seed_and_step_only():
    logits = torch.log(PROBS)
    req = make_req(seed=42, temperature=1.0)
    first = [sample_row(logits.clone(), req)]
    again = make_req(seed=42, temperature=1.0)
    assert sample_row(logits.clone(), again) == first[0]
    draws = {sample_row(logits.clone(), make_req(seed=s, temperature=1.0)) for s in range(40)}
    assert len(draws) >= 4


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_sampling_frequencies_match_the_tempered_distribution(temperature):
    logits = torch.log(PROBS)
    target = torch.softmax(logits / temperature, dim=-1)
    n = 4000
    counts = torch.zeros(7)
    for s in range(n):
        counts[sample_row(logits, make_req(seed=s, temperature=temperature))] += 1
    # 4 standard errors of a binomial proportion at the largest p
    assert torch.all((counts / n - target).abs() < 4 * math.sqrt(0.25 / n)), (counts / n, target)


def test_logprobs_are_of_the_raw_distribution_before_penalties():
    logits = torch.log(PROBS).unsqueeze(0)
    req = make_req(output=[1], temperature=0, presence_penalty=2.0)
    req.return_logprob, req.top_logprobs_num = True, 2
    out = sample(logits.clone(), [req], [EOS])
    assert out.next_token_ids == [3]  # token 1 was penalised below token 3
    assert out.logprobs[0] == pytest.approx(math.log(0.25), abs=1e-5)
    assert [t for _, t in out.top_logprobs[0]] == [1, 3]


def test_row_argmax_is_the_same_on_numpy_and_torch_rows():
    """Small fp32 CPU batches take numpy's argmax, larger ones torch's: the same first maximum, a NaN
    winning where there is one, and the same rows named not finite."""
    inf, nan = math.inf, math.nan
    edge = [
        [1.0, 3.0, 3.0, 2.0],  # a tie: the first maximum
        [1.0, nan, 5.0, nan],  # NaN wins, the first one
        [-inf, -inf, -inf, -inf],  # all masked
        [0.0, inf, 1.0, inf],  # +inf
        [-2.0, -1.0, -3.0, -1.5],
    ]
    rows = torch.tensor(edge + [[float(i % 4), 0.5, 0.25, 0.0] for i in range(20)])
    big = row_argmax(rows)  # more rows than NUMPY_ARGMAX_ROWS: torch's argmax
    assert rows.shape[0] > NUMPY_ARGMAX_ROWS
    small_ids, small_bad = [], []
    for start in range(0, rows.shape[0], NUMPY_ARGMAX_ROWS):
        ids, bad = row_argmax(rows[start : start + NUMPY_ARGMAX_ROWS])
        small_ids += ids
        small_bad += [start + i for i in bad]
    assert big == (small_ids, small_bad)
    assert big[0][:5] == [1, 1, 0, 1, 1] and big[1] == [1, 2, 3]
