"""validation/probe_parallel_head_host.py: its marks come in the order of a micro-batch, and the
parts it reports add up to the micro-batch and are in units of a layer."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))

import probe_parallel_head_host as probe  # noqa: E402


def _model_with_layers(n: int):
    """A module with ``gpt_neox.layers`` (what the hooks look for) and a head before them."""
    model = torch.nn.Module()
    model.embed = torch.nn.Linear(4, 4)
    model.gpt_neox = torch.nn.Module()
    model.gpt_neox.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(n))

    def loss(x):
        x = model.embed(x)
        for layer in model.gpt_neox.layers:
            x = layer(x)
        return x.sum()

    return model, loss


def test_the_marks_follow_a_micro_batch_and_its_parts_add_up():
    (model, forward), marks = _model_with_layers(3), {}
    probe.install_marks(model, marks)
    parts: dict[str, list[float]] = {}
    clock = probe.MicroBatchClock(marks, parts)
    for _ in range(2):
        t0 = probe.time.perf_counter()
        loss = forward(torch.ones(2, 4))
        t1 = probe.time.perf_counter()
        loss.backward()
        t2 = probe.time.perf_counter()
        assert t0 < marks["f0>"] < marks["fN<"] < t1 < marks["bN>"] < marks["b0<"] < t2
        clock.append((t0, t1, t2))
        assert sum(v[-1] for v in parts.values()) == pytest.approx(t2 - t0)
    assert all(len(v) == 2 and min(v) > 0 for v in parts.values()) and len(parts) == 6


def test_the_ends_are_in_layers():
    # two layers: 6 ms forward and 10 ms backward (medians), so a layer's forward and backward is 8 ms;
    # the head's forward, 2 ms, is a quarter of a layer
    parts = {"layers_fwd": [0.006, 0.006, 0.007], "layers_bwd": [0.010, 0.009, 0.010], "head_fwd": [0.002] * 3,
             "tail_fwd": [0.004] * 3, "head_bwd": [0.001] * 3, "tail_bwd": [0.008] * 3}
    got = probe.in_layers(parts, 2)
    assert got["layer_us"] == pytest.approx(8000.0)
    ends = (got["head_fwd"], got["tail_fwd"], got["head_bwd"], got["tail_bwd"])
    assert ends == pytest.approx((0.25, 0.5, 0.125, 1.0))


def test_a_pipeline_stages_events_pair_by_micro_batch():
    # two micro-batches through the last stage, then through the first (1F1B's order within a stage
    # keeps each event's k-th entry on micro-batch k): layers, and that stage's own end only
    last = {"F": [0.0, 10.0], "f0>": [1.0, 11.0], "fN<": [3.0, 13.5], "L": [4.0, 14.0], "bN>": [6.0, 17.0],
            "b0<": [9.0, 19.0]}
    got = probe.stage_parts(last, first=False, last=True)
    assert got == {"layers_fwd": [2.0, 2.5], "layers_bwd": [3.0, 2.0], "tail_fwd": [1.0, 0.5], "tail_bwd": [2.0, 3.0]}
    first = {"F": [0.0, 1.0], "f0>": [0.5, 1.25], "fN<": [0.75, 2.0], "bN>": [3.0, 5.0], "b0<": [4.0, 6.0],
             "G": [4.5, 7.0]}
    got = probe.stage_parts(first, first=True, last=False)
    assert got["head_fwd"] == [0.5, 0.25] and got["head_bwd"] == [0.5, 1.0] and "tail_fwd" not in got
