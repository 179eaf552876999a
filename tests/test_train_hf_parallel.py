"""validation/train_hf_parallel.py: PyTorch-native layouts of HF GPT-NeoX reproduce one-process training.

Each layout runs under torchrun (gloo, CPU, fp32: no autocast) on a tiny model, dumps every rank's
parameters after the first AdamW step (DTensors gathered to full tensors), and the test compares the
loss and EVERY parameter with :func:`train_hf_parallel.reference_step`: the same seeded model trained
in one process on the layout's whole global batch with the gradient scale the layout implies (DDP and
FSDP average over data-parallel ranks, the pipelining schedules divide by the micro-batch count).
Ranks that hold the same parameter (DDP replicas, TP-replicated LayerNorms) must agree exactly.

AdamW's eps is 1e-4 here, as in tests/test_train_3d.py: the key bias outside the rotary dims has an
exactly-zero gradient in exact arithmetic (softmax ignores a constant added to every key), so its
computed gradient is rounding noise of about 1e-9 whose sign depends on the reduction order; with
eps 1e-8 Adam turns that noise into steps of up to lr, and tp2 then differs from the reference by
1.4e-6 in that bias (measured), above atol 1e-6. Every other tensor matches to ~1e-8 either way.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from validation_script import load_script

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "validation" / "train_hf_parallel.py"
SHAPE = {"name": "tiny", "hidden": 64, "heads": 4, "layers": 4, "seq_len": 16, "micro_batch": 2, "micro_batches": 2}
VOCAB, EPS = 256, 1e-4
RTOL, ATOL = 1e-5, 1e-6


thp = load_script("train_hf_parallel")


def _shapes(where: Path) -> Path:
    path = where / "shapes.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(SHAPE))
        w.writeheader()
        w.writerow(SHAPE)
    return path


def _launch(where: Path, nproc: int, layouts: str, *extra: str, dump: str = "dump") -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(SCRIPT),
           f"--layouts={layouts}", f"--shapes={_shapes(where)}", f"--vocab={VOCAB}", "--dtype=fp32", "--warmup=0",
           "--iters=8", f"--adam-eps={EPS}", f"--out={where / 'out.csv'}", f"--dump={where / dump}", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _rows(where: Path) -> list[dict]:
    with (where / "out.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def _check_against_reference(dump: Path, layout_name: str, csv_loss: str) -> None:
    layout = thp.parse_layout(layout_name)
    states = [torch.load(p) for p in sorted(dump.glob("rank*.pt"))]
    assert len(states) == layout.world
    full: dict[str, torch.Tensor] = {}
    for s in states:
        for name, t in s["params"].items():
            if name in full:  # a replica (DDP, TP-replicated norm, gathered shard): identical on every rank
                assert torch.equal(full[name], t), f"{layout_name}: ranks disagree on {name}"
            full[name] = t
    shape = thp.Shape(**SHAPE)
    ref_loss, ref = thp.reference_step(shape, layout, VOCAB, adam_eps=EPS)
    assert float(csv_loss) == pytest.approx(ref_loss, rel=RTOL)
    assert set(full) == set(ref)
    before = dict(thp.build_model(torch, shape, VOCAB, torch.device("cpu")).named_parameters())
    for name, want in ref.items():
        torch.testing.assert_close(full[name], want, rtol=RTOL, atol=ATOL, msg=f"{layout_name}: {name}")
        assert not torch.equal(want, before[name].detach()), name  # the step moved every tensor


@pytest.fixture(scope="module")
def two_proc(tmp_path_factory) -> Path:
    """dp2, tp2, pp2 (1F1B) and fsdp2 in one torchrun, then pp2 with GPipe into the same CSV."""
    where = tmp_path_factory.mktemp("hf2")
    first = _launch(where, 2, "dp2,tp2,pp2,fsdp2")
    assert "layout" in first.stdout  # the closing table
    # the second batch resumes: dp2 is in the CSV already (skipped), pp2 with GPipe is a new row
    again = _launch(where, 2, "dp2,pp2", "--schedule=gpipe", "--kernels-all-ranks", dump="dump-gpipe")
    assert "dp2 tiny" not in again.stdout and "pp2 tiny" in again.stdout
    return where


@pytest.mark.parametrize("layout", ["dp2", "tp2", "pp2", "fsdp2"])
def test_two_process_layout_matches_reference(two_proc, layout):
    (row,) = [r for r in _rows(two_proc) if r["layout"] == layout and r["schedule"] in ("none", "1f1b")]
    _check_against_reference(two_proc / "dump" / f"{layout}-tiny", layout, row["loss"])


def test_gpipe_matches_reference(two_proc):
    (row,) = [r for r in _rows(two_proc) if r["layout"] == "pp2" and r["schedule"] == "gpipe"]
    _check_against_reference(two_proc / "dump-gpipe" / "pp2-tiny", "pp2", row["loss"])


def test_rows_columns_and_resume(two_proc):
    with (two_proc / "out.csv").open(newline="") as fh:
        assert tuple(next(csv.reader(fh))) == thp.COLUMNS
    rows = _rows(two_proc)
    assert [(r["layout"], r["schedule"]) for r in rows] == [
        ("dp2", "none"), ("tp2", "none"), ("pp2", "1f1b"), ("fsdp2", "none"), ("pp2", "gpipe")]
    by = {(r["layout"], r["schedule"]): r for r in rows}
    assert by["pp2", "1f1b"]["stage_layers"] == "2-2" and by["pp2", "1f1b"]["p2p_dtype"] == "float32"
    assert by["dp2", "none"]["p2p_dtype"] == "none" and by["tp2", "none"]["stage_layers"] == "4"
    for r in rows:
        assert r["world"] == "2" and r["device"] == "cpu" and r["iters"] == "8" and r["nccl"] == "none"
        assert 0 < float(r["min_s"]) <= float(r["median_s"]) and float(r["max_mem_gib"]) > 0
    # tp and pp train on data-parallel rank 0's rows only: the same first loss as each other
    assert by["tp2", "none"]["loss"] == by["pp2", "1f1b"]["loss"] == by["pp2", "gpipe"]["loss"]


def test_kernels_all_ranks_writes_each_stage_its_own_summary(two_proc):
    # the GPipe batch ran with --kernels-all-ranks: rank 0's summary beside the table, rank 1's in its own file
    (zero,) = [json.loads(x) for x in (two_proc / "out.csv.kernels.jsonl").read_text().splitlines()]
    (one,) = [json.loads(x) for x in (two_proc / "out.csv.kernels.rank1.jsonl").read_text().splitlines()]
    assert (zero["layout"], zero["schedule"], zero["name"]) == ("pp2", "gpipe", "tiny") and "rank" not in zero
    assert (one["layout"], one["schedule"], one["name"], one["rank"]) == ("pp2", "gpipe", "tiny", 1)
    for k in (zero, one):
        assert k["wall_s"] > 0 and k["compute_busy_s"] >= 0


def test_four_process_2d_layouts_match_reference(tmp_path):
    """torchtitan's 2D meshes: FSDP x TP and PP x TP on 4 gloo processes (about 40 s on 2 cores)."""
    _launch(tmp_path, 4, "fsdp2xtp2,pp2xtp2", "--kernels")
    rows = {r["layout"]: r for r in _rows(tmp_path)}
    assert (rows["fsdp2xtp2"]["fsdp"], rows["fsdp2xtp2"]["tp"], rows["pp2xtp2"]["pp"]) == ("2", "2", "2")
    for name in ("fsdp2xtp2", "pp2xtp2"):
        _check_against_reference(tmp_path / "dump" / f"{name}-tiny", name, rows[name]["loss"])
    kernels = (tmp_path / "out.csv.kernels.jsonl").read_text().splitlines()
    assert len(kernels) == 2  # one line per pair; no CUDA kernels on the CPU, but the wall is there
    assert '"wall_s"' in kernels[0] and '"gemm_s": 0.0' in kernels[0]


def test_world_size_mismatch_exits_2_with_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--layouts=1gpu,dp2", f"--shapes={_shapes(tmp_path)}",
                           f"--out={tmp_path / 'out.csv'}"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "dp2 needs 2 GPUs" in proc.stderr
    assert not (tmp_path / "out.csv").exists()


def test_reference_catches_a_wrong_gradient_scale():
    """The comparison has teeth: the pipeline's 1/m and the data-parallel 1/dp are visible."""
    shape = thp.Shape(**SHAPE)
    _, summed = thp.reference_step(shape, thp.parse_layout("tp2"), VOCAB, adam_eps=EPS)
    _, averaged = thp.reference_step(shape, thp.parse_layout("pp2"), VOCAB, adam_eps=EPS)
    assert any(not torch.allclose(summed[n], averaged[n], rtol=RTOL, atol=ATOL) for n in summed)
    loss_dp, _ = thp.reference_step(shape, thp.parse_layout("dp2"), VOCAB, adam_eps=EPS)
    loss_tp, _ = thp.reference_step(shape, thp.parse_layout("tp2"), VOCAB, adam_eps=EPS)
    assert loss_dp != pytest.approx(loss_tp, rel=1e-4)  # dp2 trains twice the data


def test_layout_names_and_stage_split():
    assert thp.parse_layout("fsdp2xtp4") == thp.Layout("fsdp2xtp4", fsdp=2, tp=4)
    assert thp.parse_layout("pp4xtp2").world == 8 and thp.parse_layout("1gpu").world == 1
    for bad in ("dp2xtp2", "tp2xtp2", "pp0", "ddp2", "tp2xfsdp", "2gpu"):
        with pytest.raises(thp.UsageError):
            thp.parse_layout(bad)
    assert thp.stage_layer_counts(8, 4) == [2, 2, 2, 2]
    assert thp.stage_layer_counts(10, 4) == [2, 2, 3, 3]  # the remainder goes to the last stages
    assert thp.stage_layer_counts(12, 8) == [1, 1, 1, 1, 2, 2, 2, 2]
    with pytest.raises(thp.UsageError, match="micro_batches >= pp"):
        thp.Shape(**{**SHAPE, "micro_batches": 2}).check(thp.parse_layout("pp4"), "1f1b")
    with pytest.raises(thp.UsageError, match="heads"):
        thp.Shape(**{**SHAPE, "heads": 6, "hidden": 66}).check(thp.parse_layout("tp4"), "1f1b")


def test_a_stage_module_keeps_only_its_own_layers():
    # The stage module once closed over the whole model (its class body did), keeping every other
    # stage's layers alive on each pipelined rank: +4 bytes per parameter of the other stages in the
    # measured peaks (docs/multi_gpu.md). Once the model is dropped, stage 1's layers must be freed.
    import gc
    import weakref

    model = thp.build_model(torch, thp.Shape(**SHAPE), VOCAB, torch.device("cpu"))
    other = weakref.ref(model.gpt_neox.layers[3])
    stage, ids = thp.make_stage_module(torch, model, 0, [2, 2])
    del model
    gc.collect()
    assert ids == [0, 1] and set(stage.layers) == {"0", "1"}
    assert other() is None


def test_kernel_categories_and_busy_time():
    cat = thp.kernel_category
    assert cat("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "nccl_all_reduce"
    assert cat("ncclDevKernel_AllGather_RING_LL") == "nccl_all_gather"
    assert cat("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "nccl_reduce_scatter"
    assert cat("ncclDevKernel_SendRecv") == "nccl_send_recv"
    assert cat("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "gemm"
    assert cat("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT") == "gemm"
    assert cat("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>") == "attention"
    assert cat("fmha_cutlassB_f32_aligned_64x64_k65536_sm80") == "attention"
    assert cat("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>") == \
        "elementwise_other"
    events = [{"ph": "X", "cat": "kernel", "name": "gemm_a", "ts": 0.0, "dur": 10.0},
              {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum", "ts": 5.0, "dur": 10.0},
              {"ph": "X", "cat": "kernel", "name": "elementwise", "ts": 40.0, "dur": 5.0, "args": {"correlation": 7}},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 14.0, "dur": 16.0},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 36.0, "dur": 2.0,
               "args": {"correlation": 7}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 100.0}]
    s = thp.summarize_trace(events, wall_s=50e-6)
    assert s["kernels"] == 3 and s["gemm_s"] == pytest.approx(10e-6)
    assert s["busy_s"] == pytest.approx(20e-6) and s["compute_busy_s"] == pytest.approx(15e-6)
    assert [k[0] for k in s["top_kernels"]] == ["gemm_a", "ncclDevKernel_AllReduce_Sum", "elementwise"]
    assert s["top_kernels"][0][1] == pytest.approx(10e-6) and s["top_kernels"][0][2] == 1
    # the one idle gap: 15..40 us, after the all-reduce, before the elementwise kernel launched at 36 us;
    # the synchronisation covers 15 of its 25 us
    assert s["span_s"] == pytest.approx(45e-6) and s["idle_in_span_s"] == pytest.approx(25e-6)
    assert s["top_gaps"] == [[pytest.approx(15e-6), pytest.approx(25e-6), "ncclDevKernel_AllReduce_Sum",
                              "elementwise", pytest.approx(21e-6), ["cudaStreamSynchronize"]]]


def test_kernel_timeline_pairs_each_kernel_with_its_launch():
    events = [{"ph": "X", "cat": "kernel", "name": "late", "ts": 30.0, "dur": 4.0, "args": {"correlation": 2}},
              {"ph": "X", "cat": "kernel", "name": "early", "ts": 10.0, "dur": 5.0, "args": {"correlation": 1}},
              {"ph": "X", "cat": "kernel", "name": "orphan", "ts": 50.0, "dur": 1.0},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2.0, "dur": 3.0,
               "args": {"correlation": 1}},
              {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "ts": 20.0, "dur": 3.0,
               "args": {"correlation": 2}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 100.0, "args": {"correlation": 1}}]
    t = thp.kernel_timeline({"traceEvents": events, "baseTimeNanoseconds": 123})
    assert t == {"base_ns": 123, "kernels": [[2.0, 10.0, 5.0, "early"], [20.0, 30.0, 4.0, "late"],
                                             [None, 50.0, 1.0, "orphan"]]}
