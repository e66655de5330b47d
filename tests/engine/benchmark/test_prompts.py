"""The measurement prompts never appear in the draft's training prompts."""
from pathlib import Path

from engine.prompts import EVAL_PROMPTS, FOLLOW_UPS, training_prompts


def test_training_prompts_are_distinct_and_reproducible():
    first = training_prompts(300, seed=0)
    texts = [conv[-1]["content"] for conv in first]
    assert len(set(texts)) == 300
    assert first == training_prompts(300, seed=0)


def test_measurement_prompts_are_not_in_the_training_set():
    trained = {conv[-1]["content"] for conv in training_prompts(4000, seed=0)} | set(FOLLOW_UPS)
    fresh = (Path(__file__).parents[3] / "docs" / "fresh_prompts.txt").read_text().splitlines()
    for measured in (EVAL_PROMPTS, fresh):
        assert not trained & set(measured)
        assert len(set(measured)) == len(measured) >= 8
