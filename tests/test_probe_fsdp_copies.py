"""validation/probe_fsdp_copies.py: the tensors it copies are the simulation's, and it refuses a CPU."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))

import probe_fsdp_copies as probe  # noqa: E402

from trainsim.operators.hf_stages import hf_layer_tensors  # noqa: E402


@pytest.mark.parametrize("d", [512, 3072, 8192])
def test_layer_tensors_are_the_simulations(d):
    assert sorted(math.prod(s) for s in probe.layer_tensors(d)) == sorted(hf_layer_tensors(d, 4 * d, 1))


def test_padding_to_the_world():
    assert [probe.padded(n, 4) for n in (1, 4, 5, 50432)] == [4, 4, 8, 50432]


def test_bad_hidden_is_one_line(capsys):
    assert probe.main(["--out", "/dev/null", "--hidden", "1024,x"]) == 2
    assert capsys.readouterr().err.strip() == "error: --hidden '1024,x': comma-separated integers"


def test_refuses_without_a_gpu(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert probe.main(["--out", str(tmp_path / "o.jsonl")]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err and not (tmp_path / "o.jsonl").exists()
