"""The bench's reproducible background load: one process copying an array on one core while the runs are timed."""
import os

from engine.benchmark.background_load import background_load, last_core


def test_the_load_runs_on_the_last_core_while_the_block_runs_and_ends_with_it():
    with background_load(8) as load:
        assert load.poll() is None  # copying
        assert os.sched_getaffinity(load.pid) == {last_core()}
    assert load.poll() is not None  # ended with the block


def test_no_megabytes_is_no_load():
    with background_load(0) as load:
        assert load is None
