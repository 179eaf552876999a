"""validation/probe_tp_host_pace.py: its hooks mark a forward's start, each layer and the end, in order."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))

import probe_tp_host_pace as probe  # noqa: E402

from trainsim.calibration import rank_spread  # noqa: E402


class _Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gpt_neox = _Inner()

    def forward(self, x):
        for layer in self.gpt_neox.layers:
            x = layer(x)
        return x


def test_marks_each_forward_and_layer_in_order():
    model, marks, state = _Model(), [], {"mb": -1}
    probe.install_marks(model, marks, state)
    x = torch.zeros(2, 4)
    model(x)
    model(x)
    assert [(k, mb, i) for k, mb, i, _ in marks] == [
        ("F", 0, -1), ("L", 0, 0), ("L", 0, 1), ("L", 0, 2), ("E", 0, -1),
        ("F", 1, -1), ("L", 1, 0), ("L", 1, 1), ("L", 1, 2), ("E", 1, -1)]
    times = [t for *_, t in marks]
    assert times == sorted(times) and all(isinstance(t, int) for t in times)


def test_summary_by_hand(tmp_path):
    # rank 0: layers 2 ms apart in both micro-batches; rank 1: 3 ms; two iterations of 0.5 and 0.4 s
    import json

    ms = 1_000_000
    lines = []
    for it, wall in ((0, 0.5), (1, 0.4)):
        for rank, step in ((0, 2 * ms), (1, 3 * ms)):
            marks = [["L", mb, i, mb * 100 * ms + i * step] for mb in (0, 1) for i in range(3)]
            lines.append({"layout": "tp2", "name": "s", "rank": rank, "iter": it, "wall_s": wall - 0.01 * rank,
                          "marks": marks})
    f = tmp_path / "pace.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (row,) = probe.summarize(str(f))
    assert (row["min_s"], row["median_s"]) == (pytest.approx(0.4), pytest.approx(0.45))
    assert row["layer_s"] == {0: pytest.approx(2e-3), 1: pytest.approx(3e-3)}
    f.write_text("{}\n")
    with pytest.raises(ValueError, match="line 1 is not a probe line"):
        probe.summarize(str(f))


def test_micro_batch_host_time_and_its_spread_by_hand(tmp_path):
    # from each micro-batch's first layer to its forward's end: rank 0 10 ms every time, rank 1 10, 12,
    # 14 and 16 ms; the micro-batch's start (F) and the time before the first layer (the causal mask's
    # synchronisation) are not host issue time and are left out
    import json

    ms = 1_000_000
    lines = []
    for rank, secs in ((0, (10, 10, 10, 10)), (1, (10, 12, 14, 16))):
        marks = []
        for mb, d in enumerate(secs):
            t0 = mb * 100 * ms
            marks += [["F", mb, -1, t0], ["L", mb, 0, t0 + 5 * ms], ["L", mb, 1, t0 + 7 * ms],
                      ["E", mb, -1, t0 + 5 * ms + d * ms]]
        lines.append({"layout": "tp2", "name": "s", "rank": rank, "iter": 0, "wall_s": 0.5, "marks": marks})
    assert rank_spread.micro_batch_host(lines[1]["marks"]) == {0: pytest.approx(0.010), 1: pytest.approx(0.012),
                                                          2: pytest.approx(0.014), 3: pytest.approx(0.016)}
    f = tmp_path / "pace.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (row,) = probe.summarize(str(f))
    # rank 1's quartiles (exclusive) 10.5 and 15.5 ms around a median of 13: 5 / 1.349 / 13; rank 0's 0
    assert row["mb_cv"] == pytest.approx((5 / 1.349 / 13 + 0.0) / 2)
    # slowest over mean per micro-batch: 1, 12/11, 14/12, 16/13; the median of the middle two
    assert row["rank_spread"] == pytest.approx((12 / 11 + 14 / 12) / 2)
