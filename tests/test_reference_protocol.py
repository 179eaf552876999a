"""validation/probe_reference_protocol.py: the reference's operators and data, checked on the CPU.

The probe times, at the reference's own GEMM shapes, our harness's benchmark beside the reference's
(DebarghaG/estimate-train-time, ``kernel_sampling/target_functions.py``): fp16 ``torch.rand`` inputs,
``nn.Linear``'s default init, bias on linear1 only, and a backward seeded by ``MSELoss``'s gradient.
These tests pin what the probe claims to reproduce: the reference's GEMM dimensions, a loss gradient
that underflows in fp16 at large outputs (the reason its backward runs on near-zero data), and the
resumable table it writes.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from validation_script import load_script

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "validation" / "probe_reference_protocol.py"


probe = load_script("probe_reference_protocol")


def test_the_reference_gemm_dimensions_and_bias():
    from trainsim.operators.ops import Op, OpKind

    d, mp, b, l = 4096, 2, 4, 2048
    dims = {k: probe.reference_dims(Op(kind=k, b=b, l=l, d=d, h=32, mp=mp, v=50304))
            for k in (OpKind.LINEAR1, OpKind.LINEAR2, OpKind.LINEAR3, OpKind.LINEAR4, OpKind.LINEAR_FINAL)}
    # target_functions.py: Linear(dim, 3 dim / mp) with bias; (dim/mp, dim), (dim, 4 dim/mp), (4 dim/mp, dim)
    # without; the LM head's vocabulary padded to 128 * mp: ceil(50257 / 256) * 128 = 25216
    assert dims == {OpKind.LINEAR1: (b * l, d, 3 * d // mp, True), OpKind.LINEAR2: (b * l, d // mp, d, False),
                    OpKind.LINEAR3: (b * l, d, 4 * d // mp, False), OpKind.LINEAR4: (b * l, 4 * d // mp, d, False),
                    OpKind.LINEAR_FINAL: (b * l, d, 25216, False)}


def test_the_reference_loss_gradient_underflows_in_fp16_and_ours_does_not():
    from trainsim.calibration.harness import make_env
    from trainsim.operators.ops import Op, OpKind

    env = make_env("cpu", precision="fp16", seed=0)
    op = Op(kind=OpKind.LINEAR3, b=2, l=256, d=512, h=8, mp=1, v=50304)  # an output of 1,048,576 entries
    make, fwd = probe.reference_operator(op, env, normal=False)
    t = make()
    for x in t.values():
        x.requires_grad_(True)
    out = fwd(t)
    g = probe.output_gradient(op, out, env, normal=False)
    assert g.dtype == torch.float16 and g.shape == out.shape
    # 2 (out - target) / N with N ~ 1e6: every value below fp16's smallest normal number (6.1e-5)
    assert float(g.abs().max()) < 6.1e-5
    zero, absmax = probe.grad_stats(op, env)
    assert 0.0 <= zero < 1.0 and absmax < 6.1e-5
    normal = probe.output_gradient(op, out, env, normal=True)
    assert float(normal.float().std()) == pytest.approx(1.0, rel=0.05)


def test_the_probe_writes_three_timings_per_shape_and_direction_and_resumes(tmp_path):
    shapes = tmp_path / "shapes.csv"
    shapes.write_text("kind,b,l,d,h,mp,v\nlinear2,1,32,64,1,2,50304\nbmm,1,32,64,4,1,50304\n")
    out = tmp_path / "protocol.csv"
    cmd = [sys.executable, str(SCRIPT), "--shapes", str(shapes), "--out", str(out), "--device", "cpu"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(out.open()))
    assert [(x["kind"], x["direction"]) for x in rows] == [("linear2", "fwd"), ("linear2", "bwd"),
                                                           ("bmm", "fwd"), ("bmm", "bwd")]
    for x in rows:
        assert all(float(x[f"{p}_us"]) > 0 for p in probe.PROTOCOLS)
    assert rows[0]["grad_zero_share"] == "nan" and float(rows[1]["grad_absmax"]) >= 0
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)  # nothing left to do
    assert r.returncode == 0 and len(list(csv.DictReader(out.open()))) == 4
