"""The lookup-only drafter (copies, no draft model) behind the Drafter protocol, and the planner pricing it."""
import pytest

from engine.decoding.costs import IDLE_DECAY, Acceptance, CostModel, RoundPlanner
from engine.decoding.decoder import Decoder
from engine.decoding.drafters import LookupDrafter
from engine.events import DecodeSettings
from tests.tiny import cheap_draft_costs, tiny_decoder, tiny_model

REPEATING = [{"role": "user", "content": "w3 w7 w11 w5 w9 w3 w7 w11 w5 w9 w3 w7 w11"}]


def lookup_decoder(costs: CostModel | None = None) -> Decoder:
    target = tiny_model(0)
    decoder = Decoder(target, LookupDrafter(target.vocab_size))
    decoder.set_costs(costs or cheap_draft_costs())
    return decoder


def tokens(events) -> list[int]:
    return [t.token_id for e in events for t in e.emitted]


@pytest.mark.parametrize("rule", ["cost", 0.0])
def test_greedy_lookup_output_equals_greedy_ar_output(rule):
    settings = DecodeSettings(gamma=6, max_new_tokens=40, cost_aware=rule == "cost", stop_below=0.0)
    ar = tokens(tiny_decoder(draft_seed=None).generate(REPEATING, DecodeSettings(mode="ar", max_new_tokens=40)))
    assert tokens(lookup_decoder().generate(REPEATING, settings)) == ar


def test_every_draft_is_a_copy_and_copies_are_kept():
    events = list(lookup_decoder().generate(REPEATING, DecodeSettings(gamma=6, max_new_tokens=40)))
    assert all(kind == "copy" for e in events for kind in e.draft_kinds)
    assert sum(e.gamma for e in events) > 0 and sum(e.n_accepted for e in events) > 0


def test_copies_dearer_than_a_target_step_are_never_drafted():
    """Negative control for the test above: the planner prices a lookup drafter's drafts at the copy cost."""
    costs = cheap_draft_costs()
    costs.copy_s = 1e-6  # ten target steps per copy
    events = list(lookup_decoder(costs).generate(REPEATING, DecodeSettings(gamma=6, max_new_tokens=40)))
    assert all(e.gamma == 0 for e in events)


def test_a_prompt_that_never_repeats_gets_plain_target_steps():
    events = list(lookup_decoder().generate([{"role": "user", "content": "w3"}],
                                            DecodeSettings(gamma=4, max_new_tokens=1)))
    assert [e.gamma for e in events] == [0]


def test_the_planner_prices_later_copies_as_copies():
    # A second row in the block is dear and a third nearly free: one copy does not pay, two do; two model drafts
    # at 30 ms do not.
    costs = CostModel([0.010, 0.014, 0.0142, 0.0144], draft_step_s=0.030, copy_s=1e-5, overhead_s=5e-4)
    # a chance of 0.35 known from many verdicts: what a draft may be worth beyond it is negligible
    planner = RoundPlanner(costs, Acceptance(kept=[3500.0] * 4, reached=[10000.0] * 4))
    assert planner.draft_more([], [], 4, "copy", later_kind="copy")
    assert not planner.draft_more([], [], 4, "copy", later_kind="model")


def test_a_round_of_no_drafts_lets_the_planner_s_old_verdicts_fade():
    decoder = lookup_decoder()
    decoder.planner.acceptance = Acceptance(kept=[0.0], reached=[50.0])
    events = list(decoder.generate([{"role": "user", "content": "w3"}], DecodeSettings(gamma=4, max_new_tokens=1)))
    assert [e.gamma for e in events] == [0]
    assert decoder.planner.acceptance.reached == [pytest.approx(50.0 * IDLE_DECAY)]
