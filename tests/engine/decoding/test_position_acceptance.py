"""Acceptance by draft position from synthetic rounds: hand counts, a session as its replies together, and the
seed's E beside the measured tokens per round."""
import random

import pytest

from engine.events import DraftedToken, EmittedToken, Fate, RoundEvent
from engine.stats import expected_tokens_per_round, position_acceptance, session_acceptance


def event(gamma: int, n_accepted: int, kinds: str = "") -> RoundEvent:
    """A round that drafted γ tokens (kinds: "m" model, "c" copy, one letter each) and kept the first n."""
    looked_at = min(n_accepted + 1, gamma)
    drafted = tuple(DraftedToken(5, "", 0.5, 0.5, None, i < n_accepted) for i in range(looked_at))
    fates = [Fate.ACCEPTED] * n_accepted + [Fate.TARGET if gamma == 0 else
                                            Fate.BONUS if n_accepted == gamma else Fate.CORRECTED]
    emitted = tuple(EmittedToken(5, "", fate, 0.5) for fate in fates)
    draft_kinds = tuple({"m": "model", "c": "copy"}[k] for k in (kinds or "m" * gamma))
    return RoundEvent(index=0, gamma=gamma, drafted=drafted, emitted=emitted, text_delta="", draft_s=0.0,
                      verify_s=0.01, round_s=0.01, draft_kinds=draft_kinds)


ROUNDS = [event(4, 4, "ccmm"), event(4, 2, "cmmm"), event(4, 0), event(2, 1, "cc"), event(0, 0)]


def test_shares_by_position_equal_the_hand_count():
    profile = position_acceptance(ROUNDS)
    assert profile.n_rounds == 5
    assert profile.drafted == pytest.approx([4 / 5, 4 / 5, 3 / 5, 3 / 5])
    assert profile.copied == pytest.approx([3 / 5, 2 / 5, 0, 0])
    assert profile.kept == pytest.approx([3 / 5, 2 / 5, 1 / 5, 1 / 5])
    assert profile.conditional == pytest.approx([3 / 4, 2 / 3, 1 / 2, 1 / 1])


def test_mean_acceptance_length_alpha_and_tokens_per_round_equal_the_hand_count():
    profile = position_acceptance(ROUNDS)
    assert profile.mean_accepted == pytest.approx(7 / 5)
    assert profile.alpha == pytest.approx(7 / 10)  # accepted / verified: 4 + 3 + 1 + 2 verified
    assert profile.tokens_per_round == pytest.approx(12 / 5) == 1 + profile.mean_accepted


def test_the_seed_s_expectation_is_averaged_over_each_round_s_own_gamma():
    profile = position_acceptance(ROUNDS)
    expected = (3 * expected_tokens_per_round(0.7, 4) + expected_tokens_per_round(0.7, 2) + 1) / 5
    assert profile.seed_tokens_per_round == pytest.approx(expected)


def test_a_session_counts_every_round_of_its_replies():
    first, second = ROUNDS[:2], ROUNDS[2:]
    assert session_acceptance([first, second]) == position_acceptance(ROUNDS)
    assert session_acceptance([first]) != position_acceptance(ROUNDS)


def test_no_rounds_give_empty_shares():
    profile = position_acceptance([])
    assert profile.n_rounds == 0 and profile.kept == () and profile.tokens_per_round == 0.0


def simulated(chances: list[float], rounds: int, seed: int) -> list[RoundEvent]:
    """Rounds of γ = len(chances) drafts, the i-th kept with chance chances[i] once the ones before were."""
    rng = random.Random(seed)
    events = []
    for _ in range(rounds):
        n = 0
        while n < len(chances) and rng.random() < chances[n]:
            n += 1
        events.append(event(len(chances), n))
    return events


def test_the_seed_s_expectation_matches_rounds_whose_acceptance_is_the_same_at_every_position():
    profile = position_acceptance(simulated([0.7] * 5, rounds=4000, seed=1))
    assert profile.conditional == pytest.approx([0.7] * 5, abs=0.05)
    assert profile.seed_tokens_per_round == pytest.approx(profile.tokens_per_round, rel=0.03)


def test_the_seed_s_expectation_misses_rounds_whose_acceptance_falls_along_the_draft():
    """Negative control for the test above: α alone cannot describe acceptance that decays by position."""
    profile = position_acceptance(simulated([0.95, 0.8, 0.5, 0.3, 0.1], rounds=4000, seed=1))
    assert profile.conditional[0] > 0.9 > 0.2 > profile.conditional[-1]
    assert abs(profile.seed_tokens_per_round / profile.tokens_per_round - 1) > 0.1
