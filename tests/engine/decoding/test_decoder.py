"""The round loop on tiny random models: losslessness in greedy mode, rollback, EOS, stopping, chat turns."""
import random
from collections import deque

import pytest
import torch

from engine.decoding.caches import PREFILL_CHUNK, CachedModel
from engine.decoding.costs import MEASURE_REPEATS, RECENT_ROUNDS, CostModel, LoadGap
from engine.decoding.decoder import WARM_UP_STEPS, Decoder
from engine.decoding.drafters import COPY_RUN_MAX, READ_APART, ContinuationIndex, DraftModelDrafter
from engine.events import DecodeSettings, Fate, Mode, RoundEvent
from engine.models.pairing import PairingError, check_vocabularies
from engine.stats import reply_stats
from tests.tiny import PROMPT, cheap_draft_costs, tiny_decoder, tiny_model, tiny_tokenizer


def tokens(events) -> list[int]:
    return [t.token_id for e in events for t in e.emitted]


def ar_tokens(settings: DecodeSettings, messages=PROMPT) -> list[int]:
    return tokens(tiny_decoder(draft_seed=None).generate(messages, DecodeSettings(**{**settings.__dict__, "mode": "ar"})))


@pytest.mark.parametrize("gamma", [1, 3, 8])
@pytest.mark.parametrize("draft_seed", [0, 1, 5])
@pytest.mark.parametrize("rule", ["cost", 0.0, 0.3])
def test_greedy_speculative_output_equals_greedy_ar_output(gamma, draft_seed, rule):
    settings = DecodeSettings(gamma=gamma, max_new_tokens=40, cost_aware=rule == "cost",
                              stop_below=0.0 if rule == "cost" else rule)
    events = list(tiny_decoder(draft_seed=draft_seed).generate(PROMPT, settings))
    assert tokens(events) == ar_tokens(settings)
    assert len(tokens(events)) == 40
    assert events[-1].finish_reason == "length"
    if rule == 0.0:
        assert all(e.gamma == gamma for e in events)


def test_cost_aware_rounds_vary_their_length_and_stay_lossless():
    settings = DecodeSettings(gamma=8, max_new_tokens=60)
    events = list(tiny_decoder(draft_seed=0).generate(PROMPT, settings))
    assert len({e.gamma for e in events}) > 2 and max(e.draft_kinds.count("model") for e in events) <= 8
    assert max(e.gamma for e in events) <= COPY_RUN_MAX  # copied runs go on past γ
    assert tokens(events) == ar_tokens(settings)


def test_a_draft_dearer_than_the_target_step_is_never_run():
    decoder = tiny_decoder(draft_seed=0)
    costs = cheap_draft_costs()
    costs.draft_step_s = 1e-6  # ten target steps: no draft can pay for itself
    decoder.set_costs(costs)
    settings = DecodeSettings(gamma=4, max_new_tokens=20, lookup=False)
    events = list(decoder.generate(PROMPT, settings))
    assert all(e.gamma == 0 for e in events)  # every round a plain target step
    assert decoder.drafter.cached_length() == 0  # the draft never ran, not even over the prompt
    assert tokens(events) == ar_tokens(settings)


@pytest.mark.parametrize("words", [20, 300])
def test_the_draft_reads_a_short_prompt_with_its_first_draft_and_a_long_one_beside_the_target(words):
    decoder = tiny_decoder(draft_seed=0)
    messages = [{"role": "user", "content": " ".join(f"w{i % 60 + 2}" for i in range(words))}]
    prompt = decoder.chat_ids(messages)
    fed, read_in, proposals = [], [], []
    forward_rows = decoder.drafter.runner.forward_rows
    decoder.drafter.runner.forward_rows = lambda ids, keep=1: fed.append(len(ids)) or forward_rows(ids, keep)
    propose = decoder.drafter.propose
    decoder.drafter.propose = lambda *args, **kwargs: (proposals.append((propose(*args, **kwargs), len(fed)))
                                                       or proposals[-1][0])
    observed, priced = [], []
    draft_more = decoder.planner.draft_more
    decoder.planner.draft_more = lambda *args, **kw: priced.append(kw.get("unread", 0)) or draft_more(*args, **kw)
    settings = DecodeSettings(gamma=4, max_new_tokens=12, lookup=False)
    events = []
    for item in decoder.stream(messages, settings):
        if isinstance(item, RoundEvent):
            observed.append(decoder.planner.overruns[True][-1] if decoder.planner.overruns[True] else None)
            events.append(item)
        else:
            read_in.append(sum(fed))  # what the draft had read by each report of the target's read-in
    assert events[0].gamma > 0
    if len(prompt) - 1 <= PREFILL_CHUNK:
        assert read_in[-1] == 0  # nothing beside the target
        first, fed_by_then = proposals[0]
        assert len(prompt) - 1 > READ_APART
        step = fed.index(1)  # read apart, then its first step: all in the first round
        assert sum(fed[:step]) == len(prompt) - 1 and step < fed_by_then
        assert first.read_s > 0 and first.read == len(prompt) - 1
        assert priced[0] == 0  # the prompt's reading is not priced: read beside the target, every reply paid it
        assert decoder.costs.draft_read_s <= first.read_s / first.read  # learnt from it
        # the first round is judged without the reading: its overrun is what the round took less it
        took_s = events[0].round_s - first.read_s
        assert observed[0] == pytest.approx(took_s / events[0].planned_s)
    else:
        assert 0 < read_in[0] < len(prompt) - 1  # a chunk of it, beside the target's first
        assert proposals[0][0].read_s == 0
    assert tokens(events) == ar_tokens(settings, messages)


def test_a_round_reports_how_much_slower_than_its_quiet_cost_its_forward_ran():
    decoder = tiny_decoder(draft_seed=0)
    # γ drafts every round: a plain round (the planner's choice) would refine the block it times for the next
    settings = DecodeSettings(gamma=4, max_new_tokens=12, lookup=False, cost_aware=False)
    decoder.set_costs(CostModel([1e-9] * 9, draft_step_s=1e-9))  # no forward is this fast: every round is "slow"
    slow = list(decoder.generate(PROMPT, settings))
    decoder.reset()
    decoder.set_costs(CostModel([100.0] * 9, draft_step_s=1e-9))  # every forward beats it: no load at all
    quiet = list(decoder.generate(PROMPT, settings))
    assert all(e.load > 1e3 for e in slow)
    assert all(e.load == 1.0 for e in quiet)


def test_each_round_says_the_load_a_plain_step_met_beside_it():
    """A plain round's own (its time beside its drafting decision over its quiet cost); a drafted round's load times
    the gap between the recent plain steps' loads and the drafted rounds' so far (the warm-up's plain steps
    first)."""
    decoder = tiny_decoder(draft_seed=0)
    decoder.warm_up()
    gap = LoadGap(deque(decoder.load_gap.plain, RECENT_ROUNDS), deque(decoder.load_gap.drafted, RECENT_ROUNDS))
    assert len(gap.plain) == WARM_UP_STEPS and not gap.drafted
    for settings in (DecodeSettings(gamma=4, max_new_tokens=24, lookup=False, cost_aware=False),
                     DecodeSettings(max_new_tokens=8, mode=Mode.AR)):
        for e in decoder.generate(PROMPT, settings):
            plain_s = e.round_s - e.draft_s
            assert e.plain_load == pytest.approx(gap.drafted_round(e.load) if e.gamma
                                                 else gap.plain_step(plain_s, e.ar_equivalent_s))
    assert list(decoder.load_gap.plain) == pytest.approx(list(gap.plain))
    assert len(gap.drafted) > 1 and len(gap.plain) == WARM_UP_STEPS + 8


def test_what_plain_ar_would_take_grows_with_the_positions_it_would_attend_to(monkeypatch):
    monkeypatch.setattr(CostModel, "observe_round", lambda *_: None)  # the costs as given: no learning from timings
    settings = DecodeSettings(gamma=4, max_new_tokens=12, lookup=False, mode=Mode.AR)
    long_prompt = [{"role": "user", "content": " ".join(PROMPT[0]["content"] for _ in range(20))}]
    per_token = {}
    for position_s in (0.0, 1e-5):
        decoder = tiny_decoder(draft_seed=0)
        decoder.set_costs(CostModel([1e-3] * 9, position_s=position_s))
        per_token[position_s] = [e.ar_equivalent_s for e in decoder.generate(long_prompt, settings)]
    cached = len(tiny_decoder(draft_seed=0).chat_ids(long_prompt)) - 1
    assert cached > 16
    assert len(set(per_token[0.0])) == 1  # without position costs every AR step costs the same
    steps = len(per_token[0.0])
    assert steps == len(per_token[1e-5]) > 1
    assert per_token[1e-5] == pytest.approx([per_token[0.0][0] + (cached + i - 16) * 1e-5 for i in range(steps)])


def test_rounds_say_the_positions_they_attended_to_and_are_planned_at_them(monkeypatch):
    monkeypatch.setattr(CostModel, "observe_round", lambda *_: None)  # the costs as given: no learning from timings
    settings = DecodeSettings(gamma=4, max_new_tokens=12, lookup=False)
    long_prompt = [{"role": "user", "content": " ".join(PROMPT[0]["content"] for _ in range(20))}]
    cached = len(tiny_decoder(draft_seed=0).chat_ids(long_prompt)) - 1
    drafted = {}
    for position_row_s in (0.0, 1e-3):  # a draft's row free, or dearer than any draft can repay
        decoder = tiny_decoder(draft_seed=0)
        decoder.set_costs(CostModel([1e-3] * 9, draft_step_s=1e-6, position_row_s=position_row_s))
        events = list(decoder.generate(long_prompt, settings))
        assert events[0].positions == cached
        assert all(later.positions == e.positions + len(e.emitted) for e, later in zip(events, events[1:]))
        drafted[position_row_s] = sum(e.gamma for e in events)
    assert drafted[0.0] > 0 == drafted[1e-3]


def test_adaptive_rounds_vary_their_length_and_stay_lossless():
    settings = DecodeSettings(gamma=8, max_new_tokens=60, cost_aware=False, stop_below=0.3)
    events = list(tiny_decoder(draft_seed=0).generate(PROMPT, settings))
    assert len({e.gamma for e in events}) > 2 and max(e.gamma for e in events) <= 8
    assert tokens(events) == ar_tokens(settings)


def _proposal(settings: DecodeSettings, sequence: list[int] | None = None):
    """What a fresh drafter proposes after `sequence` (by default the prompt)."""
    decoder = tiny_decoder()
    sequence = sequence or decoder.chat_ids(PROMPT)
    decoder.drafter.prefill(sequence)
    return decoder.drafter.propose(sequence, settings.gamma, settings, torch.Generator().manual_seed(0),
                                   decoder.planner)


def test_drafting_stops_once_the_draft_estimates_its_drafts_will_not_all_be_kept():
    full = _proposal(DecodeSettings(gamma=6, cost_aware=False, stop_below=0.0, lookup=False))
    all_kept = full.probs.max(-1).values.cumprod(0)  # greedy: the product of q's top probabilities so far
    assert len(full.tokens) == 6 and all_kept[2] < all_kept[1]
    short = _proposal(DecodeSettings(gamma=6, cost_aware=False, stop_below=float(all_kept[1] + all_kept[2]) / 2,
                                     lookup=False))
    assert short.tokens == full.tokens[:3]  # the third draft took the estimate below the threshold
    assert torch.equal(short.probs, full.probs[:3])


def test_a_draft_the_target_keeps_rejecting_learns_to_stop_sooner():
    settings = DecodeSettings(gamma=8, cost_aware=False, stop_below=0.0, lookup=False)
    decoder = tiny_decoder()
    rejected, planner = decoder.drafter, decoder.planner
    sequence = decoder.chat_ids(PROMPT)
    rejected.prefill(sequence)
    for _ in range(30):  # every round: the first draft is rejected and the target emits some other token
        proposal = rejected.propose(sequence, 8, settings, torch.Generator().manual_seed(0), planner)
        rejected.update(0)
        sequence = sequence + [(proposal.tokens[0] + 1) % 64]
    full = _proposal(settings, sequence)
    stop_below = 0.9 * float(full.probs.max(-1).values.cumprod(0)[2])  # a fresh drafter drafts at least 4
    settings = DecodeSettings(gamma=8, cost_aware=False, stop_below=stop_below, lookup=False)
    assert len(_proposal(settings, sequence).tokens) >= 4
    assert len(rejected.propose(sequence, 8, settings, torch.Generator().manual_seed(0), planner).tokens) < 4


def test_a_draft_identical_to_the_target_is_always_accepted():
    target = tiny_model(0)
    decoder = Decoder(target, DraftModelDrafter(target, target.vocab_size), target)
    events = list(decoder.generate(PROMPT, DecodeSettings(gamma=4, max_new_tokens=30, cost_aware=False)))
    assert all(t.accepted for e in events for t in e.drafted)
    assert all(e.emitted[-1].fate in (Fate.BONUS,) for e in events[:-1])
    assert tokens(events) == ar_tokens(DecodeSettings(max_new_tokens=30))


def test_a_different_draft_produces_rejections_and_corrections():
    events = list(tiny_decoder(draft_seed=1).generate(PROMPT, DecodeSettings(gamma=4, max_new_tokens=40)))
    fates = {t.fate for e in events for t in e.emitted}
    assert Fate.CORRECTED in fates
    rejected = [t for e in events for t in e.drafted if not t.accepted]
    assert rejected and all(len(t.top_p) == 5 and len(t.top_q) == 5 for t in rejected)


def test_sampling_with_top_k_1_is_greedy_for_both_models():
    settings = DecodeSettings(gamma=3, greedy=False, temperature=0.9, top_k=1, max_new_tokens=30, seed=3)
    assert tokens(tiny_decoder(draft_seed=1).generate(PROMPT, settings)) == ar_tokens(DecodeSettings(max_new_tokens=30))


def test_sampling_is_reproducible_from_the_seed_and_reports_draws():
    settings = DecodeSettings(gamma=4, greedy=False, temperature=1.0, max_new_tokens=30, seed=11)
    first = list(tiny_decoder(draft_seed=1).generate(PROMPT, settings))
    second = list(tiny_decoder(draft_seed=1).generate(PROMPT, settings))
    assert tokens(first) == tokens(second)
    drafted = [t for e in first for t in e.drafted]
    assert drafted and all(0.0 <= t.r < 1.0 for t in drafted)
    assert all(t.accepted == (t.r < t.accept_prob) for t in drafted)


def test_rollback_leaves_the_cache_as_a_fresh_forward_over_the_prefix():
    model = tiny_model(0).model
    runner = CachedModel(model, 64)
    prefix = [3, 9, 14, 2, 7]
    runner.forward(prefix)
    runner.forward([20, 21, 22, 23])  # four drafts, then all rejected
    runner.rollback(len(prefix))
    after_rollback = runner.forward([30])
    fresh = model(torch.tensor([prefix + [30]])).logits[0, -1]
    assert torch.allclose(after_rollback[0], fresh, atol=1e-5)
    assert runner.cache.length == len(prefix) + 1


def test_eos_inside_an_accepted_block_stops_generation_there():
    target = tiny_model(0)
    reference = tokens(Decoder(target).generate(PROMPT, DecodeSettings(mode="ar", max_new_tokens=30)))
    decoder = Decoder(target, DraftModelDrafter(target, target.vocab_size), target)
    decoder.eos_ids = {reference[5]}  # pretend the 6th token is the end of the reply
    events = list(decoder.generate(PROMPT, DecodeSettings(gamma=8, max_new_tokens=30, cost_aware=False,
                                                          stop_below=0.0)))
    assert len(events) == 1  # the EOS was drafted and accepted inside the first block of 8
    assert tokens(events) == reference[: reference.index(reference[5]) + 1]
    assert events[-1].finish_reason == "eos"


@pytest.mark.parametrize("budget", [5, 6, 7])
def test_a_reply_cut_inside_a_round_counts_as_kept_only_the_drafts_it_emitted(budget):
    """γ 4 with a draft the target always keeps: every round but a cut last one emits 5 tokens, so the reply's
    tokens are its rounds plus its kept drafts, and α stays what its tokens per round say."""
    target = tiny_model(0)
    decoder = Decoder(target, DraftModelDrafter(target, target.vocab_size), target)
    events = list(decoder.generate(PROMPT, DecodeSettings(gamma=4, max_new_tokens=budget, cost_aware=False,
                                                          stop_below=0.0)))
    assert events[-1].finish_reason == "length" and len(events[-1].emitted) == budget - 5 * (len(events) - 1)
    stats = reply_stats(events)
    assert stats.n_tokens == budget and stats.n_accepted == sum(
        1 for e in events for t in e.emitted if t.fate is Fate.ACCEPTED)
    assert all(len(e.drafted) <= len(e.emitted) for e in events)


def test_stopping_between_rounds_ends_within_one_round_and_leaves_caches_consistent():
    decoder = tiny_decoder(draft_seed=1)
    settings = DecodeSettings(gamma=4, max_new_tokens=40)
    rounds = decoder.generate(PROMPT, settings)
    first = next(rounds)
    rounds.close()  # what the app's Stop does between rounds
    assert first.finish_reason is None
    assert len(decoder.runner) == len(decoder.chat_ids(PROMPT)) + len(first.emitted) - 1
    assert tokens(decoder.generate(PROMPT, settings)) == ar_tokens(settings)


def test_a_new_chat_turn_reuses_the_cached_prefix_and_matches_a_fresh_decoder():
    decoder = tiny_decoder(draft_seed=1)
    settings = DecodeSettings(gamma=4, max_new_tokens=12)
    reply = decoder.tokenizer.decode(tokens(decoder.generate(PROMPT, settings)), skip_special_tokens=True)
    turn2 = PROMPT + [{"role": "assistant", "content": reply}, {"role": "user", "content": "w9 w10"}]
    fed = []
    forward = decoder.runner.forward
    decoder.runner.forward = lambda ids, keep=1: fed.append(len(ids)) or forward(ids, keep)
    second = tokens(decoder.generate(turn2, settings))
    assert second == tokens(tiny_decoder(draft_seed=1).generate(turn2, settings))
    assert fed[0] < len(decoder.chat_ids(turn2)) - 1  # the prefill fed only what was not cached


def test_gamma_requests_apply_from_the_next_round():
    decoder = tiny_decoder(draft_seed=1)
    rounds = decoder.generate(PROMPT, DecodeSettings(gamma=2, max_new_tokens=40, cost_aware=False, stop_below=0.0))
    first = next(rounds)
    decoder.request_gamma(6)
    second = next(rounds)
    rounds.close()
    assert (first.gamma, second.gamma) == (2, 6)


def test_ar_mode_reports_plain_target_tokens():
    events = list(tiny_decoder(draft_seed=1).generate(PROMPT, DecodeSettings(mode="ar", max_new_tokens=5)))
    assert len(events) == 5
    assert all(e.gamma == 0 and not e.drafted and e.emitted[0].fate is Fate.TARGET for e in events)


def test_lm_heads_padded_to_different_sizes_are_compatible():
    target = tiny_model(0, vocab_size=72)  # 8 padding rows past the 64-token tokenizer
    draft = tiny_model(1, layers=1)
    assert check_vocabularies(target, draft) == 64
    decoder = Decoder(target, DraftModelDrafter(draft, 64), draft)
    events = list(decoder.generate(PROMPT, DecodeSettings(gamma=3, max_new_tokens=10)))
    assert all(t.token_id < 64 for e in events for t in e.emitted)


def test_different_tokenizers_are_refused_with_a_reason():
    target, draft = tiny_model(0), tiny_model(1)
    other = tiny_tokenizer()
    other.add_tokens(["extra"])
    draft.tokenizer = other
    with pytest.raises(PairingError, match="vocabularies differ"):
        check_vocabularies(target, draft)


def test_preflight_refuses_a_mismatched_pair_before_loading_any_weights(tmp_path):
    target_dir, draft_dir = tmp_path / "target", tmp_path / "draft"
    tiny_tokenizer().save_pretrained(target_dir)  # tokenizers only: there are no weights to load
    other = tiny_tokenizer()
    other.add_tokens(["extra"])
    other.save_pretrained(draft_dir)
    with pytest.raises(PairingError, match="cannot draft for"):
        Decoder.load(str(target_dir), str(draft_dir), device="cpu")


def test_lookup_finds_what_followed_the_latest_earlier_occurrence_of_the_last_three_tokens():
    assert ContinuationIndex().continuation([1, 2, 3, 9, 1, 2, 3]) == 9
    assert ContinuationIndex().continuation([1, 2, 3, 9, 5, 1, 2, 3, 7, 1, 2, 3]) == 7
    assert ContinuationIndex().continuation([4, 2, 3, 9, 1, 2, 3]) is None  # only two of the three match
    assert ContinuationIndex().continuation([1, 2, 3]) is None  # the suffix itself does not count


def searched(tokens: list[int], n: int = 3) -> int | None:
    """The lookup by brute force: the latest earlier start of the last n tokens."""
    starts = [i for i in range(len(tokens) - n) if tokens[i:i + n] == tokens[-n:]]
    return tokens[starts[-1] + n] if starts else None


def test_the_lookup_index_follows_a_sequence_that_grows_and_rolls_back_as_a_brute_force_search_does():
    rng = random.Random(0)
    index, sequence, found = ContinuationIndex(), [], 0
    for _ in range(600):
        if sequence and rng.random() < 0.03:  # another conversation sharing a prefix
            del sequence[rng.randrange(len(sequence)):]
        elif rng.random() < 0.3:  # rejected drafts
            del sequence[len(sequence) - rng.randrange(1, 5):]
        sequence += [rng.randrange(4) for _ in range(rng.randrange(1, 4))]  # few ids: many repeated 3-grams
        assert index.continuation(sequence) == searched(sequence)
        found += searched(sequence) is not None
    assert found > 200  # most comparisons were of copies found, not of None against None


@pytest.mark.parametrize("greedy", [True, False])
def test_copied_drafts_carry_q_one_and_leave_the_output_unchanged(greedy):
    tok = tiny_tokenizer()
    messages = [{"role": "user", "content": "w1 w2 w3 w4 w9 w1 w2 w3"}]  # ends with an earlier 3-gram
    settings = DecodeSettings(gamma=3, greedy=greedy, temperature=0.8, max_new_tokens=30, seed=3)
    with_lookup = list(tiny_decoder().generate(messages, settings))
    first = with_lookup[0].drafted[0]
    assert first.token_id == tok.convert_tokens_to_ids("w4") and first.q == 1.0
    assert any(d.q < 1.0 for e in with_lookup for d in e.drafted)  # elsewhere the draft model proposes
    without = list(tiny_decoder().generate(messages, DecodeSettings(**{**settings.__dict__, "lookup": False})))
    assert without[0].drafted[0].q < 1.0
    if greedy:
        assert tokens(with_lookup) == tokens(without) == ar_tokens(settings, messages)


def test_the_warm_up_times_a_plain_steps_bookkeeping_so_a_slow_round_later_cannot_raise_it():
    decoder = tiny_decoder(draft_seed=0)
    decoder.warm_up()
    timed = decoder.costs.overhead_s
    assert timed > 0 and len(decoder.runner) == 0  # timed on plain steps, and the caches forgotten after
    decoder.costs.observe_round([], forward_s=1e-3, round_s=1e-3 + 50 * timed)  # a round that met something else
    assert decoder.costs.overhead_s == timed


@pytest.mark.parametrize("draft_seed", [0, None])
def test_the_warm_up_reports_each_step_of_its_timing_up_to_its_total(draft_seed):
    decoder = tiny_decoder(draft_seed=draft_seed)
    reported = []
    decoder.warm_up(lambda done, total: reported.append((done, total)))
    total = reported[0][1]
    done = [d for d, _ in reported]
    # each step once it is done, in order, and again while a scratch cache is read in (the step after it goes on)
    assert sorted(set(done) - {0}) == list(range(1, total + 1)) and done == sorted(done)
    assert all(t == total for _, t in reported) and done.count(MEASURE_REPEATS) > 1
    assert total > 5  # more than one step per kind of timing: the bar moves while a long one runs


def test_the_timing_stops_where_its_progress_raises_even_while_a_long_cache_is_read_in():
    decoder = tiny_decoder()

    class Stopped(Exception):
        pass

    reported = []

    def progress(done: int, _total: int) -> None:
        reported.append(done)
        if reported.count(MEASURE_REPEATS) == 2:  # the short blocks are timed; the long scratch cache is being read
            raise Stopped

    with pytest.raises(Stopped):
        decoder.warm_up(progress)
    assert max(reported) == MEASURE_REPEATS  # no block after the long cache was timed


def test_each_step_measurement_also_retimes_one_longer_block_in_turn():
    """Blocks timed far too dear at load (a busy moment) would never be drafted, so never be timed by a round."""
    decoder = tiny_decoder()
    decoder.set_costs(CostModel([1.0] * 9))  # every block priced at a second
    retimed = []
    for _ in range(6):
        decoder.measure_target_step()
        retimed.append([k for k, seconds in enumerate(decoder.costs.target_block_s, 1) if seconds < 1.0])
    assert retimed[0] == [1, 2, 3, 4]
    assert retimed[4] == [1, 2, 3, 4, 5, 6, 7, 8]  # not yet the 9-row block
    assert retimed[5] == list(range(1, 10))


def test_each_step_measurement_also_retimes_a_draft_step_and_keeps_the_drafts_cache():
    """A draft step timed at a busy load would price every draft out for the rest of the session."""
    decoder = tiny_decoder(draft_seed=0)
    decoder.warm_up()
    list(decoder.generate(PROMPT, DecodeSettings(max_new_tokens=6, cost_aware=False, stop_below=0.0)))
    held = decoder.drafter.cached_length()
    decoder.costs.draft_step_s = 100.0  # as if the load had met a busy machine
    decoder.measure_target_step()
    assert 0 < decoder.costs.draft_step_s < 1.0  # a tiny draft's step takes milliseconds
    assert decoder.drafter.cached_length() == held


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_the_system_prompt_a_chat_template_adds_of_its_own_is_read_off_the_template():
    """A template that sends "Be kind." where the chat brings no system prompt; the controls: the same template
    without it, and no template."""
    from engine.decoding.text import template_system_prompt
    from tests.tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    assert template_system_prompt(tokenizer) == ""
    tokenizer.chat_template = CHATML
    assert template_system_prompt(tokenizer) == ""
    tokenizer.chat_template = ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nBe kind.<|im_end|>\n"
                               "{% endif %}" + CHATML)
    assert template_system_prompt(tokenizer) == "Be kind."


def test_a_long_conversation_has_its_own_length_timed_in_place_and_decodes_as_without():
    settings = DecodeSettings(gamma=4, max_new_tokens=12, lookup=False)
    long_prompt = [{"role": "user", "content": " ".join(PROMPT[0]["content"] for _ in range(150))}]
    decoder = tiny_decoder(draft_seed=0)
    decoder.set_costs(CostModel([1e-3] * 9, draft_step_s=1e-6, position_s=1e-6))
    events = list(decoder.generate(long_prompt, settings))
    assert [p for p, _ in decoder.costs.context_steps] == [events[0].positions]
    assert tokens(events) == tokens(tiny_decoder(draft_seed=0).generate(long_prompt, settings))
    short = tiny_decoder(draft_seed=0)  # the control: too few positions to time
    short.set_costs(CostModel([1e-3] * 9, draft_step_s=1e-6, position_s=1e-6))
    list(short.generate(PROMPT, settings))
    assert short.costs.context_steps == []
