"""The bad-input gallery: every bad input is one line on stderr naming the field, option or file,
exit status 2, no traceback, and no file left behind.

Each case runs the CLI in-process (``trainsim.scenarios.cli.main``) from an empty output folder;
a few run in a real process (``python -m trainsim``) to prove no traceback escapes there either.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from trainsim.scenarios.cli import main

GOOD = """
model: {preset: llemma-7b}
training: {micro_batch: 4, micro_batches: 8}
parallelism: {pp: 4, mp: 2, dp: 2}
cluster: {preset: perlmutter}
profile: {name: roofline}
"""

ROOFLINE = ["--set", "profile.name=roofline"]
HUGE = "1" + "0" * 30


def _bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 12)]
    return "\n".join([*lines, "model: {preset: *a11}"]) + "\n"


#: input files, written into the input folder before each case (name -> bytes)
INPUTS: dict[str, bytes] = {
    "good.yaml": GOOD.encode(),
    "latin1.yaml": "model: {preset: gpt-20b}\nname: caf\xe9\n".encode("latin-1"),
    "binary.yaml": b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)),
    "empty.yaml": b"",
    "blank.yaml": b"\n   \n# only a comment\n",
    "list.yaml": b"- model\n- training\n",
    "scalar.yaml": b"just a string\n",
    "deep.yaml": ("model: " + "[" * 5000 + "]" * 5000 + "\n").encode(),
    "deepmap.yaml": ("model: " + "{a: " * 200 + "1" + "}" * 200 + "\n").encode(),
    "bomb.yaml": _bomb().encode(),
    "bigint.yaml": (GOOD + "simulation: {seed: " + "9" * 5000 + "}\n").encode(),
    "malformed.yaml": b"model: [unclosed\n",
    "tab.yaml": b"model:\n\t- x\n",
    "unknown_section.yaml": (GOOD + "bogus: 1\n").encode(),
    "int_key.yaml": (GOOD + "1: 2\n").encode(),
    "model_list.yaml": GOOD.replace("model: {preset: llemma-7b}", "model: [1, 2]").encode(),
    "preset_list.yaml": GOOD.replace("preset: llemma-7b", "preset: [1]").encode(),
    "no_cluster.yaml": GOOD.replace("cluster: {preset: perlmutter}", "").encode(),
    "name_map.yaml": (GOOD + "name: {a: 1}\n").encode(),
    "python_tag.yaml": (GOOD + "description: !!python/object/apply:os.system ['true']\n").encode(),
    "times.csv": b"1,2\n",
    "measured.csv": b"name,iteration_s\nx,1.0\n",
    "published.csv": (b"id,source,system,model,gpus,precision,gbs,mbs,seq_len,tp,pp,cp,vp,fsdp,split,kernels,"
                      b"tokens_per_s_per_gpu\nr1,x,dgx-h100,llama3-8b,12,fp8,128,1,8192,8,1,1,1,0,megatron,fused,1000\n"),
    "published_split.csv": (b"id,source,system,model,gpus,precision,gbs,mbs,seq_len,tp,pp,cp,vp,fsdp,split,kernels,"
                            b"tokens_per_s_per_gpu\nr1,x,dgx-h100,llama3-8b,8,fp8,128,1,8192,1,1,1,1,0,zigzag,fused,1000\n"),
    "published_cell.csv": (b"id,source,system,model,gpus,precision,gbs,mbs,seq_len,tp,pp,cp,vp,fsdp,split,kernels,"
                           b"tokens_per_s_per_gpu\nr1,x,dgx-h100,llama3-8b,eight,fp8,128,1,8192,1,1,1,1,0,megatron,"
                           b"fused,1000\n"),
    "published_recipe.csv": (b"id,source,system,model,gpus,precision,gbs,mbs,seq_len,tp,pp,cp,vp,fsdp,split,kernels,"
                             b"recipe,tokens_per_s_per_gpu\nr1,x,dgx-a100,gpt3-175b,8,fp16,8,1,2048,8,1,1,1,0,megatron,"
                             b"eager,megatron-2019,10\n"),
    "published_tflops.csv": (b"id,source,system,model,gpus,precision,gbs,mbs,seq_len,tp,pp,cp,vp,fsdp,split,kernels,"
                             b"recipe,ddp,tflops_per_gpu\nr1,x,dgx-a100,gpt3-175b,8,fp16,8,1,2048,8,1,1,1,0,megatron,"
                             b"eager,megatron-lm-2021,local,140\n"),
    "published_two_metrics.csv": (b"id,source,system,model,gpus,precision,gbs,mbs,seq_len,tp,pp,cp,vp,fsdp,split,"
                                  b"kernels,tokens_per_s_per_gpu,tflops_per_gpu\nr1,x,dgx-a100,gpt3-175b,8,fp16,8,1,"
                                  b"2048,8,1,1,1,0,megatron,eager,10,140\n"),
    "afile": b"not a folder\n",
}

Case = tuple[str, Callable[[Path, Path], list[str]], str]


def _f(name: str) -> Callable[[Path, Path], list[str]]:
    """argv for ``predict`` on an input file."""
    return lambda i, o: ["predict", str(i / name)]


def _set(*overrides: str, command: str = "predict", scenario: str = "good.yaml") -> Callable[[Path, Path], list[str]]:
    def argv(i: Path, o: Path) -> list[str]:
        out = [command, str(i / scenario) if scenario.endswith(".yaml") else scenario]
        for ov in overrides:
            out += ["--set", ov]
        return out
    return argv


def _run(*extra: str, scenario: str = "gpt20b-dgxh100") -> Callable[[Path, Path], list[str]]:
    return lambda i, o: ["run", scenario, *ROOFLINE, *[x.format(i=i, o=o) for x in extra]]


CASES: list[Case] = [
    # -- item 4 "Edges": numbers beyond what the tool can price -------------------------------------------
    ("layers-1e30", _run("--set", f"model.layers={HUGE}"), "model.layers"),
    ("hidden-1e8", _run("--set", "model.hidden=100000000"), "model.hidden"),
    ("heads-1e30", _set(f"model.heads={HUGE}"), "model.heads"),
    ("seq_len-1e30", _set(f"model.seq_len={HUGE}"), "model.seq_len"),
    ("vocab-1e30", _set(f"model.vocab={HUGE}"), "model.vocab"),
    ("micro_batch-1e30", _set(f"training.micro_batch={HUGE}"), "training.micro_batch"),
    ("micro_batches-1e30", _set(f"training.micro_batches={HUGE}"), "training.micro_batches"),
    ("dp_bucket-1e30", _set(f"training.dp_bucket={HUGE}"), "training.dp_bucket"),
    ("pp-1e30", _set(f"parallelism.pp={HUGE}"), "parallelism.pp"),
    ("mp-2^21", _set("parallelism.mp=2097152"), "parallelism.mp"),
    ("dp-1e6-gpus", _run("--set", "parallelism.dp=1000000"), "parallelism"),
    ("seed-2^64", _set("simulation.seed=18446744073709551616"), "simulation.seed"),
    # -- valid but huge: the resource guard ------------------------------------------------------------------
    ("run-micro_batches-1e6", _run("--set", "training.micro_batches=1000000"), "--max-events"),
    ("run-buckets", _run("--set", "model.hidden=1048576", "--set", "model.heads=64", "--set", "model.layers=65536"),
     "--max-events"),
    ("run-max-events-10", lambda i, o: ["run", str(i / "good.yaml"), "--max-events", "10"], "--max-events"),
    ("compare-max-events-10", lambda i, o: ["compare", str(i / "good.yaml"), "--max-events", "10"], "--max-events"),
    ("max-events-0", lambda i, o: ["run", str(i / "good.yaml"), "--max-events", "0"], "--max-events"),
    ("max-events-word", lambda i, o: ["predict", str(i / "good.yaml"), "--max-events", "lots"], "--max-events"),
    ("max-events-fraction", lambda i, o: ["predict", str(i / "good.yaml"), "--max-events", "2.5"], "--max-events"),
    # -- outputs: validated before any work, nothing left behind ----------------------------------------------
    ("trace-in-proc", _run("--trace", "/proc/x.json"), "--trace"),
    ("plot-is-folder", _run("--plot", "{o}"), "--plot"),
    ("plot-no-extension", _run("--trace", "t.json", "--plot", "timeline"), "--plot"),
    ("plot-gif", _run("--plot", "p.gif"), "--plot"),
    ("trace-txt", _run("--trace", "t.txt"), "--trace"),
    ("breakdown-missing-folder", _run("--breakdown", "{o}/nope/b.png"), "--breakdown"),
    ("trace-dot", _run("--trace", "."), "--trace"),
    ("plot-after-good-trace", _run("--trace", "t.json", "--breakdown", "{o}/missing/b.svg"), "--breakdown"),
    ("jitter-plot-missing-folder", lambda i, o: ["jitter", str(i / "good.yaml"), "-n", "3", "--plot",
                                                 str(o / "nope" / "h.png")], "--plot"),
    ("jitter-plot-folder", lambda i, o: ["jitter", str(i / "good.yaml"), "-n", "3", "--plot", str(o)], "--plot"),
    ("validate-out-folder", lambda i, o: ["validate", "--out", str(o)], "--out"),
    # -- scenario files ----------------------------------------------------------------------------------------
    ("file-not-utf8", _f("latin1.yaml"), "latin1.yaml: is not UTF-8"),
    ("file-binary", _f("binary.yaml"), "binary.yaml"),
    ("file-is-folder", lambda i, o: ["predict", str(i)], "is a folder"),
    ("file-yaml-suffix-folder", _f("d.yaml"), "d.yaml: is a folder"),
    ("file-missing", lambda i, o: ["predict", str(i / "missing.yaml")], "missing.yaml: no such scenario file"),
    ("file-dev-null", lambda i, o: ["predict", "/dev/null"], "/dev/null"),
    ("file-empty", _f("empty.yaml"), "empty.yaml: is empty"),
    ("file-blank", _f("blank.yaml"), "blank.yaml"),
    ("file-list", _f("list.yaml"), "list.yaml: holds a list"),
    ("file-scalar", _f("scalar.yaml"), "scalar.yaml: holds a string"),
    ("file-deep", _f("deep.yaml"), "deep.yaml: YAML nested deeper"),
    ("file-deep-map", _f("deepmap.yaml"), "deepmap.yaml: YAML nested deeper"),
    ("file-billion-laughs", _f("bomb.yaml"), "bomb.yaml: YAML expands"),
    ("file-5000-digit-int", _f("bigint.yaml"), "bigint.yaml"),
    ("file-malformed", _f("malformed.yaml"), "malformed YAML"),
    ("file-tab", _f("tab.yaml"), "tab.yaml: malformed YAML"),
    ("file-unknown-section", _f("unknown_section.yaml"), "bogus: unknown section"),
    ("file-int-key", _f("int_key.yaml"), "1: unknown section"),
    ("file-model-list", _f("model_list.yaml"), "model: must be a mapping"),
    ("file-preset-list", _f("preset_list.yaml"), "model.preset"),
    ("file-no-cluster", _f("no_cluster.yaml"), "cluster: missing section"),
    ("file-name-mapping", _f("name_map.yaml"), "name: must be a string"),
    ("file-python-tag", _f("python_tag.yaml"), "python_tag.yaml: malformed YAML"),
    ("unknown-scenario", lambda i, o: ["predict", "no-such-scenario"], "unknown scenario 'no-such-scenario'"),
    ("scenario-traversal", lambda i, o: ["predict", "../bundled/gpt20b-dgxh100"], "scenario"),
    # -- --set ---------------------------------------------------------------------------------------------------
    ("set-not-utf8", _set(os.fsdecode(b"model.name=caf\xe9")), "--set"),
    ("set-control-char", _set("model.name=a\x07b"), "--set"),
    ("set-newline", _set("model.name=a\nb"), "--set"),
    ("set-nul", _set("model.name=a\x00b"), "--set"),
    ("set-unknown-section", _set("a=b"), "--set"),
    ("set-unknown-section-key", _set("foo.bar=1"), "--set: unknown section 'foo'"),
    ("set-no-equals", _set("nonsense"), "--set: expected section.key=value"),
    ("set-empty-key", _set("model..hidden=4"), "--set"),
    ("set-into-scalar", _set("model.preset.x=1"), "--set"),
    ("set-unknown-key", _set("model.colour=red"), "model.colour: unknown key"),
    ("set-flow-bomb", _set("simulation.jitter=" + "[" * 100 + "]" * 100), "--set"),
    ("pp-0", _set("parallelism.pp=0"), "parallelism.pp"),
    ("layout-not-multiple-of-node", _set("parallelism.pp=1", "parallelism.dp=3"),
     "not a multiple of cluster.gpus_per_node"),
    ("layout-mp-heads", _set("parallelism.mp=3", "parallelism.dp=4"), "parallelism.mp: model.heads 32"),
    ("layout-pp-over-layers", _set("parallelism.pp=64"), "parallelism.pp"),
    ("layout-more-nodes-than-cluster", _set("parallelism.dp=1048576"), "parallelism"),
    ("virtual-stages-without-interleaving", _set("parallelism.virtual_stages=2"), "parallelism.virtual_stages"),
    ("gpus-per-node-0", _set("cluster.gpus_per_node=0"), "cluster.gpus_per_node"),
    ("nvlink-nan", _set("cluster.nvlink_gbps=.nan"), "cluster.nvlink_gbps"),
    ("cluster-gpu-list", _set("cluster.gpu=[1]"), "cluster.gpu"),
    ("cluster-preset-mapping", _set("cluster.preset={a: 1}"), "cluster"),
    ("jitter-not-mapping", _set("simulation.jitter=5"), "simulation.jitter"),
    ("jitter-preset-list", _set("simulation.jitter.preset=[1]"), "simulation.jitter"),
    ("jitter-sigma-negative", _set("simulation.jitter.noise.nic.sigma=-1", command="jitter"),
     "simulation.jitter.noise.nic.sigma"),
    # -- options and other commands -----------------------------------------------------------------------------
    ("reference-data-is-file", lambda i, o: ["predict", str(i / "good.yaml"), "--reference-data", str(i / "afile")],
     "--reference-data"),
    ("reference-data-missing", lambda i, o: ["predict", "paper-gpt20b-4-4-8-perlmutter", "--reference-data",
                                             str(i / "nowhere")], "nowhere"),
    ("cache-dir-is-file", lambda i, o: ["predict", str(i / "good.yaml"), "--cache-dir", str(i / "afile")],
     "--cache-dir"),
    ("cache-dir-not-writable", lambda i, o: ["predict", str(i / "good.yaml"), "--cache-dir", "/proc/trainsim"],
     "--cache-dir"),
    ("profile-samples-missing", _set("profile.name=/nonexistent-samples"), "/nonexistent-samples"),
    ("profile-name-number", _set("profile.name=5"), "profile.name"),
    ("unknown-command", lambda i, o: ["frobnicate"], "invalid choice"),
    ("scenarios-extra-arg", lambda i, o: ["scenarios", "extra"], "unrecognized arguments"),
    ("trace-replicas-bogus", _run("--trace-replicas", "some"), "--trace-replicas"),
    ("sweep-pp-word", lambda i, o: ["sweep", str(i / "good.yaml"), "--pp", "x"], "--pp"),
    ("sweep-pp-zero", lambda i, o: ["sweep", str(i / "good.yaml"), "--pp", "0"], "--pp"),
    ("sweep-top-zero", lambda i, o: ["sweep", str(i / "good.yaml"), "--top", "0"], "--top"),
    ("compare-pp-0", _set("parallelism.pp=0", command="compare"), "parallelism.pp"),
    ("jitter-n-0", lambda i, o: ["jitter", str(i / "good.yaml"), "-n", "0"], "-n"),
    ("jitter-out-without-fit", lambda i, o: ["jitter", str(i / "good.yaml"), "--out", "x.yaml"], "--out"),
    ("jitter-fit-usage", lambda i, o: ["jitter", "fit"], "jitter fit"),
    ("jitter-fit-bad-times", lambda i, o: ["jitter", "fit", str(i / "times.csv"), str(i / "good.yaml")],
     "times.csv:1"),
    ("fit-missing-folder", lambda i, o: ["fit", str(i / "nowhere")], "nowhere"),
    ("fit-file", lambda i, o: ["fit", str(i / "afile")], "afile"),
    ("profile-show-unknown", lambda i, o: ["profile", "show", "nope"], "unknown profile 'nope'"),
    ("validate-measured-columns", lambda i, o: ["validate", "--measured", str(i / "measured.csv")], "lacks columns"),
    ("validate-measured-missing", lambda i, o: ["validate", "--measured", str(i / "nowhere.csv")], "--measured"),
    ("validate-published-columns", lambda i, o: ["validate", "--published", str(i / "measured.csv")],
     "missing columns"),
    ("validate-published-layout", lambda i, o: ["validate", "--published", str(i / "published.csv")],
     "not a multiple of TP x PP x CP"),
    ("validate-published-cell", lambda i, o: ["validate", "--published", str(i / "published_cell.csv")],
     "must be integers"),
    ("validate-published-split", lambda i, o: ["validate", "--published", str(i / "published_split.csv")],
     "row r1, parallelism.split"),
    ("validate-published-missing", lambda i, o: ["validate", "--published", str(i / "nowhere.csv")], "--published"),
    ("validate-published-recipe", lambda i, o: ["validate", "--published", str(i / "published_recipe.csv")],
     "unknown recipe 'megatron-2019'"),
    ("validate-published-tflops", lambda i, o: ["validate", "--published", str(i / "published_tflops.csv")],
     "megatron-* model"),
    ("validate-published-two-metrics", lambda i, o: ["validate", "--published",
                                                     str(i / "published_two_metrics.csv")],
     "exactly one throughput of tokens_per_s_per_gpu, tflops_per_gpu, got tokens_per_s_per_gpu, tflops_per_gpu"),
    ("kernels-word", _set("training.kernels=jit"), "training.kernels"),
    ("kernels-hf-fused", _set("training.framework=hf", "training.kernels=fused", "model.preset=gpt-20b"),
     "training.kernels"),
    ("grad-accumulation-word", _set("training.grad_accumulation=lazy"), "training.grad_accumulation"),
    ("grad-reduce-fp32-no-dist-opt", _set("training.grad_reduce_in_fp32=false"), "training.grad_reduce_in_fp32"),
    ("grad-accumulation-zero1", _set("training.grad_accumulation=autograd", "training.zero_stage=1"),
     "training.grad_accumulation"),
    ("calibrate-out-is-file", lambda i, o: ["calibrate", "--out", str(i / "afile"), "--device", "cpu", "--budget",
                                            "1"], "--out"),
    ("calibrate-budget-negative", lambda i, o: ["calibrate", "--out", "x", "--budget", "-1"], "--budget"),
    ("calibrate-power-out-is-file", lambda i, o: ["calibrate", "power", "--out", str(i / "afile")], "--out"),
    ("calibrate-power-rounds-0", lambda i, o: ["calibrate", "power", "--out", str(o / "p"), "--rounds", "0"],
     "--rounds"),
    ("calibrate-power-no-gpu", lambda i, o: ["calibrate", "power", "--out", str(o / "p")], "calibrate"),
]

#: the value of every kind that an integer field must refuse
BAD_INTS = ["[1]", "{a: 1}", "abc", "2.5", "true", "null", ".nan", ".inf", "-.inf", "-4", "0", "''"]
for _field in ("model.hidden", "model.heads", "model.layers", "model.seq_len", "model.vocab", "training.micro_batch",
               "training.micro_batches", "training.dp_bucket", "training.zero_stage", "parallelism.pp",
               "parallelism.mp", "parallelism.dp", "parallelism.virtual_stages", "simulation.seed",
               "model.fwd_mp_syncs"):
    for _v in BAD_INTS:
        if _v == "0" and _field in ("training.zero_stage", "simulation.seed", "model.fwd_mp_syncs"):
            continue  # 0 is valid there
        CASES.append((f"{_field}={_v}", _set(f"{_field}={_v}"), _field))
for _field, _values in {
    "training.precision": ["[fp16]", "{a: 1}", "5", "true", "null", "fp8"],
    "training.recompute": ["[1]", "7", "sometimes"],
    "model.norm": ["[1]", "{a: 1}", "3"],
    "model.attention": ["[1]", "linear"],
    "parallelism.schedule": ["[1]", "2f2b", "null"],
    "simulation.mode": ["[1]", "{a: 1}", "fast", "null"],
    "simulation.overlap_dp": ["1", "maybe", "[1]", "null"],
    "model.rotary": ["1", "maybe", "[true]"],
    "model.name": ["[1]", "{a: 1}"],
    "model.preset": ["[1]", "{a: 1}", "gpt-99", "null.x"],
    "profile.reference_data": ["[1]", "5"],
    "cluster.nvlink_gbps": ["-1", "0", ".inf", "[1]", "abc"],
    "cluster.gpus_per_node": ["2.5", "true", "-8"],
}.items():
    for _v in _values:
        CASES.append((f"{_field}={_v}", _set(f"{_field}={_v}"), _field.split(".")[0] if _field == "model.preset"
                      and _v == "null.x" else _field))


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def folders(tmp_path, monkeypatch):
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    out.mkdir()
    for name, data in INPUTS.items():
        (inp / name).write_bytes(data)
    (inp / "d.yaml").mkdir()
    monkeypatch.chdir(out)
    monkeypatch.setenv("TRAINSIM_REFERENCE_DATA", str(tmp_path / "no-reference-data"))
    return inp, out


@pytest.mark.parametrize("argv,needle", [pytest.param(a, n, id=i) for i, a, n in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(folders, capsys, argv, needle):
    inp, out = folders
    args = argv(inp, out)
    before_out, before_in = _files(out), _files(inp)
    try:
        rc = main(args)
    except SystemExit as e:  # argparse's own errors exit through _Parser.error
        rc = e.code
    captured = capsys.readouterr()
    err = captured.err
    assert rc == 2, (args, err)
    assert err.startswith("trainsim: error: "), err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    assert needle in err, (needle, err)
    assert _files(out) == before_out, "a file was left behind in the output folder"
    assert _files(inp) == before_in, "a file was left behind beside the inputs"


def test_the_gallery_covers_every_command():
    commands = {a(Path("i"), Path("o"))[0] for _, a, _ in CASES}
    assert {"predict", "run", "compare", "sweep", "jitter", "scenarios", "fit", "profile", "calibrate",
            "validate"} <= commands


@pytest.mark.parametrize("name,argv,needle", [
    ("layers-1e30", lambda i: ["run", "gpt20b-dgxh100", *ROOFLINE, "--set", f"model.layers={HUGE}"], "model.layers"),
    ("not-utf8", lambda i: ["predict", str(i / "latin1.yaml")], "is not UTF-8"),
    ("plot-no-extension", lambda i: ["run", "gpt20b-dgxh100", *ROOFLINE, "--trace", "t.json", "--plot", "timeline"],
     "--plot"),
    ("billion-laughs", lambda i: ["predict", str(i / "bomb.yaml")], "YAML expands"),
])
def test_no_traceback_in_a_real_process(folders, name, argv, needle):
    inp, out = folders
    r = subprocess.run([sys.executable, "-m", "trainsim", *argv(inp)], capture_output=True, text=True, cwd=out,
                       timeout=120)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.startswith("trainsim: error: ") and r.stderr.count("\n") == 1 and needle in r.stderr
    assert "Traceback" not in r.stderr
    assert _files(out) == set()


def test_outputs_get_the_umask_mode_not_0600(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    old = os.umask(0o022)
    try:
        assert main(["run", "gpt20b-dgxh100", *ROOFLINE, "--trace", "t.json", "--breakdown", "b.svg"]) == 0
    finally:
        os.umask(old)
    capsys.readouterr()
    for name in ("t.json", "b.svg"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.svg", "t.json"]  # no temporary files left


def test_guard_passes_every_bundled_scenario_and_estimates_events():
    from trainsim import api
    from trainsim.scenarios.guard import DEFAULT_MAX_EVENTS, check_resources
    from trainsim.scenarios.schema import bundled_names, load_scenario

    for name in bundled_names():
        est = check_resources(load_scenario(name))
        assert est.events < DEFAULT_MAX_EVENTS / 10, name  # gpt175b-dgxh100-16k: about 2e6
    sc = load_scenario("gpt20b-dgxh100", ["profile.name=roofline", "model.hidden=65536", "model.heads=64"])
    est = check_resources(sc)
    assert est.buckets > 100
    # the estimate bounds a full simulation (every replica); a symmetric layout runs one replica per
    # stage (sim.symmetry), far fewer events, which a recorded run (record=True) does not
    from trainsim.sim.engine import simulate as simulate_costs

    full = simulate_costs(api.predict(sc).costs, sc.cluster, record=True).events
    events = api.simulate(sc).result.events
    assert events <= full <= est.events <= 2 * full  # conservative, not wildly so


def test_guard_for_predict_skips_the_event_bound_but_not_memory():
    from trainsim.operators import ConfigError
    from trainsim.scenarios.guard import check_resources
    from trainsim.scenarios.schema import load_scenario

    sc = load_scenario("gpt20b-dgxh100", ["profile.name=roofline", "training.micro_batches=1000000"])
    with pytest.raises(ConfigError) as e:
        check_resources(sc)
    assert e.value.field == "--max-events" and "2,000,000 steps" in str(e.value)
    assert check_resources(sc, simulate=False).events == 0
    assert check_resources(sc, max_events=10**9).events > 10**8
    huge = load_scenario("gpt20b-dgxh100", ["model.hidden=1048576", "model.heads=64", "model.layers=65536"])
    with pytest.raises(ConfigError, match="DP gradient buckets.*raise training.dp_bucket or --max-events"):
        check_resources(huge, simulate=False)
    assert check_resources(huge, simulate=False, max_events=10**10).buckets > 10**7
