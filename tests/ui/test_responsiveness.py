"""The GUI event loop keeps running while a reply streams: a 10 ms probe timer is never held up by 50 ms."""
from tests.ui.helpers import send
from ui.stall_probe import StallProbe

MAX_STALL_S = 0.050


def test_event_loop_never_stalls_while_a_reply_streams(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, greedy=False, max_new_tokens=160)
    probe = StallProbe(10)
    studio.window.prompt_submitted.connect(probe.start)
    studio.window.turn_completed.connect(probe.stop)
    reply = send(qtbot, studio)
    assert len(reply.events) > 5 and len(probe.gaps) > 5
    print(f"worst stall {probe.worst_stall_s * 1000:.1f} ms over {len(probe.gaps)} ticks, {len(reply.events)} rounds")
    assert probe.worst_stall_s < MAX_STALL_S
