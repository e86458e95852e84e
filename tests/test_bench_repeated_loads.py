"""repeated_loads.py takes the other checkout's load as that checkout's curve sends a step's tables:
its ``Load`` kept for the step where it has one, else its ``send_all`` (the load before ``curve.Load``),
8 in flight either way. The times and counts it prints are a benchmark's, never asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench"

WITH_LOAD = '''
class Load:
    made = []
    def __init__(self, conns):
        self.conns, self.sent = conns, []
        Load.made.append(self)
    def send(self, frames, spread):
        self.sent.append((frames, spread))
        return [0.0] * len(frames)
'''

WITH_SEND_ALL = '''
sent = []
def send_all(conns, frames, spread):
    sent.append((conns, frames, spread))
    return [0.0] * len(frames)
'''


@pytest.fixture
def repeated_loads(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import repeated_loads

    return repeated_loads


def test_a_checkout_with_a_load_sends_through_one_load_kept_for_the_step(repeated_loads, tmp_path):
    (tmp_path / "curve.py").write_text(WITH_LOAD)
    module = repeated_loads.other_curve(tmp_path)
    conns, frames = ["c1", "c2"], [[b"a"], [b"b"]]
    send = repeated_loads.sender(module, conns)
    send(frames)
    send(frames)
    assert len(module.Load.made) == 1 and module.Load.made[0].conns is conns
    assert module.Load.made[0].sent == [(frames, None), (frames, None)]  # 8 in flight: no spread


def test_a_checkout_before_the_load_sends_through_its_send_all(repeated_loads, tmp_path):
    (tmp_path / "curve.py").write_text(WITH_SEND_ALL)
    module = repeated_loads.other_curve(tmp_path)
    conns, frames = ["c1"], [[b"a"]]
    repeated_loads.sender(module, conns)(frames)
    assert module.sent == [(conns, frames, None)]


def test_a_directory_without_a_curve_is_said(repeated_loads, tmp_path):
    with pytest.raises((SystemExit, FileNotFoundError)):
        repeated_loads.other_curve(tmp_path)
