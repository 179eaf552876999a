"""scenarios/progress.py (the progress reporter and the warnings block) and where it is wired in."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import numpy as np
import pytest

from trainsim.scenarios.progress import Progress, format_duration, summarize_warnings, warning_block

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^trainsim: jitter: \d+/1000 iterations \(\d+%\), \S+ (s|min \d+ s) elapsed"
                  r"(, about .+ left)?$")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


# -- the reporter ----------------------------------------------------------------------------------------


def test_off_a_terminal_a_line_at_least_every_interval_and_a_final_line():
    clock, out = Clock(), io.StringIO()
    emitted: list[float] = []
    with Progress("jitter", 1000, unit="iterations", stream=out, clock=clock) as p:
        assert p.mode == "lines"
        for _ in range(1000):
            clock.t += 0.137  # 137 s in all
            before = out.getvalue().count("\n")
            p.update()
            if out.getvalue().count("\n") > before:
                emitted.append(clock.t)
    lines = out.getvalue().splitlines()
    assert len(lines) == len(emitted) + 1  # the final line
    gaps = np.diff([100.0, *emitted, clock.t])
    assert gaps.max() <= 10.0 + 0.137 + 1e-9  # never more than one interval (and one update) apart
    assert len(emitted) == 13
    for line in lines[:-1]:
        assert LINE.match(line), line
    assert lines[0].startswith("trainsim: jitter: 73/1000 iterations (7%), 10 s elapsed, about 2 min")
    assert lines[-1] == "trainsim: jitter: 1000/1000 iterations (100%), done in 2 min 17 s"


def test_short_work_writes_nothing_off_a_terminal():
    clock, out = Clock(), io.StringIO()
    with Progress("fit", 10, stream=out, clock=clock) as p:
        for _ in range(10):
            clock.t += 0.5
            p.update()
    assert out.getvalue() == ""


def test_unknown_total_and_a_total_set_later():
    clock, out = Clock(), io.StringIO()
    p = Progress("fit", None, unit="regressors", stream=out, clock=clock)
    clock.t += 11
    p.update(3)
    assert out.getvalue().splitlines()[-1] == "trainsim: fit: 3 regressors, 11 s elapsed"
    p.set_total(12)
    clock.t += 11
    p.update(3)
    assert out.getvalue().splitlines()[-1] == "trainsim: fit: 6/12 regressors (50%), 22 s elapsed, about 22 s left"
    p.close()
    p.close()  # idempotent
    assert out.getvalue().splitlines()[-1] == "trainsim: fit: stopped at 6/12 regressors (50%) after 22 s"


def test_an_exception_ends_with_stopped():
    clock, out = Clock(), io.StringIO()
    with pytest.raises(KeyError), Progress("calibrate", 100, unit="samples", stream=out, clock=clock) as p:
        clock.t += 30
        p.update(100)  # all done, but the block failed
        raise KeyError("x")
    assert out.getvalue().splitlines()[-1] == "trainsim: calibrate: stopped at 100/100 samples (100%) after 30 s"


def test_quiet_prints_nothing():
    clock, out, tty = Clock(), io.StringIO(), TTY()
    for stream in (out, tty):
        with Progress("jitter", 100, quiet=True, stream=stream, clock=clock) as p:
            assert p.mode == "quiet"
            for _ in range(100):
                clock.t += 1
                p.update()
    assert out.getvalue() == "" and tty.getvalue() == ""


def test_a_terminal_gets_a_tqdm_bar(monkeypatch):
    import tqdm

    made = []
    real = tqdm.tqdm

    def spy(*a, **kw):
        made.append(kw)
        return real(*a, **kw)

    monkeypatch.setattr(tqdm, "tqdm", spy)
    tty = TTY()
    with Progress("jitter", 10, unit="iterations", stream=tty) as p:
        assert p.mode == "bar"
        p.update(4)
    assert made and made[0]["total"] == 10 and made[0]["file"] is tty
    assert "trainsim: jitter:" in tty.getvalue() and "/10 [" in tty.getvalue()  # tqdm's bar, not our lines


def test_stderr_that_is_a_tty_gets_the_bar(monkeypatch):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with Progress("x", 3) as p:
        assert p.mode == "bar"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    with Progress("x", 3, clock=Clock()) as p:
        assert p.mode == "lines"


def test_the_real_clock_reports_even_without_updates():
    out = io.StringIO()
    with Progress("calibrate", 5, unit="samples", stream=out, interval_s=0.05) as p:
        time.sleep(0.5)  # one slow unit: the background timer still says the job is alive
        p.update()
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and lines[0].startswith("trainsim: calibrate: 0/5 samples (0%), 0 s elapsed")
    assert lines[-1].startswith("trainsim: calibrate: stopped at 1/5 samples")


def test_format_duration():
    assert [format_duration(s) for s in (0.4, 41, 89.6, 192, 3600 + 5 * 60)] == \
        ["0 s", "41 s", "1 min 30 s", "3 min 12 s", "1 h 05 min"]


# -- the warnings block ----------------------------------------------------------------------------------

EXTRAPOLATION = ("profile 'reference:Perlmutter': operator {op} ({d}) feature {f} = {v} is outside the sampled range "
                 "[{lo}, {hi}]; the trees predict the value at the edge of that range")


def _extrapolations() -> list[str]:
    out = [EXTRAPOLATION.format(op=op, d=d, f=f, v=v, lo=lo, hi=hi)
           for op, d, f, v, lo, hi in (("linear2", "fwd", "d/mp", 1536, 2048, 8192),
                                       ("linear2", "bwd", "d/mp", 1536, 2048, 8192),
                                       ("optimizer_middle", "update", "mp", 4, 1, 2),
                                       ("linear_final", "fwd", "v/mp", "1.2e+04", "2,048", "5.1e+04"))]
    out.append("profile 'reference:Perlmutter': collective all_reduce over 8x1 GPUs feature entries = 6.39875e+07 "
               "is outside the sampled range [1.34218e+08, 1.19982e+09]; the trees predict the value at the edge of "
               "that range")
    return out


def test_outside_the_sampled_range_becomes_one_line_with_the_operators():
    lines = summarize_warnings(_extrapolations())
    assert lines == ["profile 'reference:Perlmutter': 5 inputs outside the sampled range (d/mp, mp, v/mp, entries) "
                     "of linear2 fwd/bwd, optimizer_middle update, linear_final fwd, all_reduce 8x1; the trees "
                     "predict the value at the edge of that range"]


def test_quirks_group_duplicates_count_and_distinct_messages_stay():
    quirk = ("samples/x: {op} ({d}): {k} of 318 samples are {a}x-{b}x the median time per unit of work "
             "(kept as measured)")
    msgs = [quirk.format(op=op, d=d, k=k, a=a, b=b)
            for op, d, k, a, b in (("gelu", "fwd", 13, 10, 29), ("gelu", "bwd", 27, 10, 77),
                                   ("rope", "bwd", 11, 10, 57))]
    other = "samples/x: hf_residual: backward shorter than forward in 217 of 317 shapes (kept as measured)"
    lines = summarize_warnings([other, *msgs, other, "cached profile unreadable; refitting"])
    assert lines == [
        f"{other} (x2)",
        "samples/x: 3 of this kind (gelu fwd/bwd, rope bwd), e.g. gelu (fwd): 13 of 318 samples are 10x-29x the "
        "median time per unit of work (kept as measured)",
        "cached profile unreadable; refitting",
    ]


def test_the_block_is_capped_and_empty_means_nothing():
    msgs = [f"note {c}: something else happened" for c in "abcdefghij"]
    lines = summarize_warnings(msgs, limit=4)
    assert lines == msgs[:3] + ["… and 7 more (--json lists all)"]
    assert summarize_warnings([]) == [] and warning_block(["", "  "]) == []
    block = warning_block([*_extrapolations(), "x"])
    assert block[0] == "trainsim: warnings (6):" and len(block) == 3 and all(x.startswith("  ") for x in block[1:])


def test_warn_prints_one_block_or_nothing(capsys):
    from trainsim.scenarios.commands.common import warn

    warn(_extrapolations())
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "trainsim: warnings (5):" and len(err) == 2
    warn(_extrapolations(), quiet=True)
    warn([])
    assert capsys.readouterr().err == ""


# -- wiring ----------------------------------------------------------------------------------------------


def _tiny():
    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.schema import scenario_from_mapping

    sc = scenario_from_mapping({
        "name": "tiny",
        "model": {"name": "tiny", "hidden": 1024, "heads": 16, "layers": 8, "seq_len": 1024, "vocab": 32000},
        "training": {"micro_batch": 1, "micro_batches": 4},
        "parallelism": {"pp": 2, "mp": 2, "dp": 2},
        "cluster": {"preset": "vista"},
        "profile": {"name": "roofline"},
    })
    return sc, predict(sc).costs


NOISY = {"noise": {"nic": {"sigma": 0.3}}, "congestion": {"nic": {"bandwidth_factor": 0.3, "mean_on_s": 0.01,
                                                                    "mean_off_s": 0.05}}}


@pytest.mark.parametrize("jobs", [1, 2])
def test_monte_carlo_reports_every_simulation_ablation_included(jobs):
    from trainsim.scenarios.montecarlo import monte_carlo_total, run_monte_carlo
    from trainsim.sim.jitter_config import parse_jitter

    sc, costs = _tiny()
    j = parse_jitter(NOISY)
    calls: list[int] = []
    res = run_monte_carlo(costs, sc.cluster, j, 20, seed=3, jobs=jobs, share_samples=6, progress=calls.append)
    assert sum(calls) == monte_carlo_total(j, 20, 6) == 20 + 6 * len(j.sources())
    assert len(calls) > 1 and max(calls) < sum(calls)  # per chunk, not once at the end
    plain = run_monte_carlo(costs, sc.cluster, j, 20, seed=3, jobs=jobs, share_samples=6)
    assert res.samples_s.tobytes() == plain.samples_s.tobytes()
    assert monte_carlo_total(None, 20) == 20


def test_monte_carlo_dask_reports_per_chunk():
    distributed = pytest.importorskip("distributed")
    from trainsim.scenarios.montecarlo import run_monte_carlo
    from trainsim.sim.jitter_config import parse_jitter

    sc, costs = _tiny()
    calls: list[int] = []
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as lc:
        run_monte_carlo(costs, sc.cluster, parse_jitter(NOISY), 12, seed=4, backend="dask",
                        scheduler=lc.scheduler_address, share_samples=0, jobs=3, progress=calls.append)
    assert sum(calls) == 12 and len(calls) == 12  # chunks of one seed each (12 / (4 x 3 jobs))


def test_jitter_fit_reports_its_simulations():
    from trainsim.scenarios.jitter_fit import fit_jitter, sims_per_candidate
    from trainsim.scenarios.montecarlo import run_monte_carlo
    from trainsim.sim.jitter_config import parse_jitter

    sc, costs = _tiny()
    times = run_monte_carlo(costs, sc.cluster, parse_jitter(NOISY), 40, seed=1, share_samples=0).samples_s
    calls: list[int] = []
    fit = fit_jitter(times, costs, sc.cluster, NOISY, n_sim=20, progress=calls.append)
    assert sims_per_candidate(40, 20) == 20 and sims_per_candidate(40) == 100
    assert sum(calls) == fit.evaluations * 20 and fit.evaluations >= 25


def test_fit_command_gathers_python_warnings_into_the_block(tmp_path, capsys, monkeypatch):
    import warnings

    from trainsim.calibration import profile as prof
    from trainsim.scenarios.cli import main

    def fake_load(name, cache_dir=None, progress=None, on_total=None, **kw):
        on_total(3)
        for i in range(3):
            warnings.warn(UserWarning(f"X has feature names, but regressor {i} was fitted without feature names"),
                          stacklevel=1)
            progress(1)
        warnings.warn(DeprecationWarning("hidden by default"), stacklevel=1)
        return prof.RooflineProfile("r", 1e12, 1e12)

    monkeypatch.setattr("trainsim.calibration.load_profile", fake_load)
    assert main(["fit", str(tmp_path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["trainsim: warnings (3):",
                   "  X has feature names, but regressor 0 was fitted without feature names (and 2 similar)"]
    assert main(["fit", str(tmp_path), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_profile_show_roofline(capsys):
    from trainsim.scenarios.cli import main

    assert main(["profile", "show", "roofline"]) == 0
    out = capsys.readouterr().out
    assert "h100-sxm" in out and "989 TFLOP/s" in out and "3.350 TB/s" in out and "learned on h100-sxm-bf16" in out
    assert main(["profile", "show", "roofline:h200", "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    assert [g["gpu"] for g in data["gpus"]] == ["h200"] and data["slowdowns"]["linear1:fwd"] > 1
    assert main(["profile", "show", "roofline:nope"]) == 2


def test_validate_measured_3d_rows_and_summary(tmp_path, capsys):
    from trainsim.scenarios.cli import main

    p = tmp_path / "m.csv"
    p.write_text("layout,pp,mp,dp,hidden,heads,layers,seq,micro_batch,micro_batches,recompute,min_s,median_s,"
                 "max_mem_gib,device,torch,vocab\n"
                 "pp1-mp1-dp1,2,1,1,1024,16,4,1024,2,4,none,0.05,0.06,10,H100,2.11,50257\n"
                 "pp1-mp1-dp1,1,2,1,2048,16,2,1024,2,4,full,0.04,0.05,10,H100,2.11,50257\n")
    assert main(["validate", "--measured-3d", str(p), "--profile-3d", "roofline", "--host-gpus", "8", "-q"]) == 0
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    assert lines[1].startswith("pp2-mp1-dp1   1024   4  1024") and lines[2].startswith("pp1-mp2-dp1   2048   2")
    assert re.match(r"2 runs: simulation MAPE \d+\.\d % \(max \d+\.\d %\), Eq\. 7 MAPE \d+\.\d % \(max \d+\.\d %\)$",
                    lines[-1])
    assert cap.err == ""


def test_calibrate_reports_progress_per_sample(tmp_path):
    pytest.importorskip("torch", reason="the harness needs torch (CPU build is enough)")
    from trainsim.calibration.harness import make_env, pending, run_plan
    from trainsim.calibration.sampling import directions
    from trainsim.operators.ops import Op, OpKind

    op = Op(OpKind.GELU, b=2, l=16, d=32, h=2, mp=1, v=64, layers=1)
    plan = [(op, d) for d in directions(OpKind.GELU)] * 2
    assert len(pending(plan, tmp_path)) == len(directions(OpKind.GELU))
    calls: list[int] = []
    run_plan(plan, tmp_path, make_env("cpu", "bf16"), "bf16", warmup=0, iters=1, progress=calls.append)
    assert calls == [1] * len(directions(OpKind.GELU)) and pending(plan, tmp_path) == []


def test_calibrate_collectives_takes_quiet_and_passes_it_to_the_workers():
    import argparse

    from trainsim.calibration.collectives_bench import add_arguments, launch_command

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert p.parse_args(["--out", "x", "-q"]).quiet and not p.parse_args(["--out", "x"]).quiet
    assert launch_command(2, "x", ["-q"])[-1] == "-q"  # the launcher forwards its own arguments
