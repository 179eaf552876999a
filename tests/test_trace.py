"""Perfetto traces that stay usable: the critical replica of every stage by default, everything on
request, streamed to a temporary file and renamed into place."""

from __future__ import annotations

import io
import json
import re

import pytest

import trainsim
from trainsim.scenarios.cli import main
from trainsim.scenarios.trace import stream_trace

FAST = {"profile.name": "roofline", "training.micro_batches": 4}  # PP4 MP8 DP4 on 16 DGX H100 nodes
STAGE_TRACK = re.compile(r"^stage (\d+) replica (\d+)$")


@pytest.fixture(scope="module")
def scenario():
    return trainsim.load_scenario("gpt20b-dgxh100", overrides=FAST)


def _tracks(doc: dict) -> list[str]:
    return [e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]


def test_default_trace_keeps_the_critical_replica_of_every_stage(scenario, tmp_path):
    path = tmp_path / "t.json"
    sim = trainsim.simulate(scenario, trace=path)
    doc = json.loads(path.read_text())
    stages = [tuple(map(int, m.groups())) for t in _tracks(doc) if (m := STAGE_TRACK.match(t))]
    pp, dp = scenario.parallelism.pp, scenario.parallelism.dp
    assert sorted(stages) == [(s, sim.result.stage_critical[s]) for s in range(pp)]
    assert doc["otherData"]["stage_replicas_traced"] == pp and doc["otherData"]["stage_replicas"] == pp * dp
    assert sim.trace_note is not None and "--trace-replicas all" in sim.trace_note
    links = [t for t in _tracks(doc) if not STAGE_TRACK.match(t) and "DP collectives" not in t]
    assert links, "the links the critical replicas used are traced"
    assert sim.iteration_s == trainsim.simulate(scenario).iteration_s  # recording changes nothing
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary file left behind


def test_all_replicas_on_request(scenario, tmp_path):
    path = tmp_path / "all.json"
    sim = trainsim.simulate(scenario, trace=path, trace_replicas="all")
    stages = {t for t in _tracks(json.loads(path.read_text())) if STAGE_TRACK.match(t)}
    assert len(stages) == scenario.parallelism.pp * scenario.parallelism.dp
    assert sim.trace_note is None


def test_every_span_of_a_trace_is_a_complete_event_in_its_track(scenario, tmp_path):
    sim = trainsim.simulate(scenario, record=True)
    buf = io.StringIO()
    n = stream_trace(sim.result, buf)
    doc = json.loads(buf.getvalue())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(doc["traceEvents"]) == n and len(spans) == len(sim.result.spans)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(sim.iteration_s * 1e6, rel=1e-9)


def test_cli_says_what_the_trace_left_out(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main(["run", "gpt20b-dgxh100", "--trace", str(path), *[f"--set={k}={v}" for k, v in FAST.items()]]) == 0
    out = capsys.readouterr().out
    assert f"wrote trace: {path}" in out
    assert "critical replica of each of the 4 stages (4 of 16 stage replicas)" in out
    assert oct(path.stat().st_mode & 0o777) != oct(0o600)


def test_bad_trace_replicas_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:  # argparse's own check: one line, exit 2
        main(["run", "gpt20b-dgxh100", "--trace", "x.json", "--trace-replicas", "some"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trace-replicas" in err
