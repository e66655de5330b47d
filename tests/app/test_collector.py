"""Garbage collection on the GUI thread only: a reference cycle dropped on another thread is freed on the GUI
thread, where a widget's destructor may run safely."""
import gc
import threading
import weakref

from PySide6.QtCore import QCoreApplication, QEvent

from studio.window import GuiThreadCollector


class Marker:
    pass


def drop_a_cycle_and_allocate(freed_on: list[int], kept: list) -> None:
    """A cycle (it needs the collector) made and dropped, then enough live allocations to pass gen 0's threshold."""
    marker = Marker()
    marker.cycle = [marker]
    weakref.finalize(marker, lambda: freed_on.append(threading.get_ident()))
    del marker
    kept.extend([] for _ in range(5 * gc.get_threshold()[0]))


def run_on_another_thread(freed_on: list[int], kept: list) -> int:
    thread = threading.Thread(target=drop_a_cycle_and_allocate, args=(freed_on, kept))
    thread.start()
    thread.join()
    return thread.ident


def test_a_cycle_dropped_on_another_thread_is_freed_on_the_gui_thread(qtbot):
    # Earlier tests' widgets, deleted later, would be freed in the wait below: each object freed lowers gen 0's
    # count, and thousands of them take it back under its threshold, so no collection would be due
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)
    gc.collect()
    collector = GuiThreadCollector()
    try:
        freed_on, kept = [], []
        run_on_another_thread(freed_on, kept)
        assert freed_on == []  # no collection ran on the worker
        qtbot.waitUntil(lambda: bool(freed_on), timeout=5000)
        assert freed_on == [threading.get_ident()]
    finally:
        collector.stop()
    assert gc.isenabled()


def test_negative_control_automatic_collection_frees_it_on_the_allocating_thread():
    assert gc.isenabled()
    freed_on, kept = [], []
    worker = run_on_another_thread(freed_on, kept)
    assert freed_on == [worker]


def test_survivors_of_a_load_are_frozen_out_of_collections_until_another_pair_is_requested():
    collector = GuiThreadCollector()
    try:
        freed, marker = [], Marker()
        marker.cycle = [marker]  # alive while the pair loads, dropped later: frozen, it waits for the thaw
        weakref.finalize(marker, lambda: freed.append(True))
        collector.freeze_survivors()
        assert gc.get_freeze_count() > 0
        del marker
        gc.collect()
        assert freed == []
        collector.thaw()
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert freed == [True]
    finally:
        gc.unfreeze()
        collector.stop()
