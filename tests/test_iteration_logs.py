"""Readers of measured iteration times (scenarios.iteration_logs): CSV and framework log lines.

The framework lines are the formats the frameworks print (quoted from their sources and from
published logs; see the module doc of scenarios/iteration_logs.py)."""
# ruff: noqa: E501  (log lines are quoted whole, as the frameworks print them)

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from trainsim.operators.errors import ConfigError
from trainsim.scenarios.iteration_logs import IterationSeries, read_iteration_log, select_rows, sniff

ROOT = Path(__file__).resolve().parents[1]
TRAINING_LOGS = Path(os.environ.get("TRAINSIM_TRAINING_LOGS", ROOT.parent / "shared" / "training-logs"))

# Megatron-LM (megatron/training/training.py, training_log), with its timestamp prefix
MEGATRON = """\
[before the start of training step] datetime: 2025-04-13 23:41:00
 [2025-04-13 23:41:12] iteration       10/    1000 | consumed samples:          160 | elapsed time per iteration (ms): 1147.6 | learning rate: 0.000000E+00 | global batch size:    16 | loss scale: 8388608.0 | number of skipped iterations:  10 | number of nan iterations:   0 |
Number of parameters in transformer block in billions:  0.08
 [2025-04-13 23:41:24] iteration       20/    1000 | consumed samples:          320 | elapsed time per iteration (ms): 1160.2 | learning rate: 1.500000E-05 | global batch size:    16 | lm loss: 1.041056E+01 | loss scale: 65536.0 | grad norm: 9.913 | number of skipped iterations:   1 | number of nan iterations:   0 |
"""
# GPT-NeoX (megatron/training.py, training_log): samples/sec first, then the iteration
NEOX = """\
 samples/sec: 7.912 | iteration        1/  320000 | elapsed time per iteration (ms): 8089.4 | learning rate: 0.000E+00 | approx flops per GPU: 81.3TFLOPS | lm_loss: 1.104370E+01 | loss scale: 4096.0 | number of skipped iterations:   0 | number of nan iterations:   0 |
 samples/sec: 8.141 | iteration        2/  320000 | elapsed time per iteration (ms): 7861.8 | learning rate: 1.800E-08 | approx flops per GPU: 83.7TFLOPS | lm_loss: 1.104101E+01 | loss scale: 4096.0 | number of skipped iterations:   0 | number of nan iterations:   0 |
 samples/sec: 8.050 | iteration        3/  320000 | elapsed time per iteration (ms): 7950.1 | learning rate: 3.600E-08 | approx flops per GPU: 82.7TFLOPS | lm_loss: 1.103911E+01 | loss scale: 4096.0 | number of skipped iterations:   0 | number of nan iterations:   0 |
"""
# DeepSpeed ThroughputTimer (deepspeed/utils/timer.py); an older version's line last
DEEPSPEED = """\
[2023-08-02 00:41:17,935] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=10, lr=[0.0001], mom=[(0.9, 0.999)]
[2023-08-02 00:41:17,936] [INFO] [timer.py:215:stop] epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=220.69530887096045, CurrSamplesPerSec=222.88787331278564, MemAllocated=0.07GB, MaxMemAllocated=1.36GB
[2023-08-02 00:41:18,011] [INFO] [timer.py:215:stop] epoch=0/micro_step=20/global_step=20, RunningAvgSamplesPerSec=221.0, CurrSamplesPerSec=200.0, MemAllocated=0.07GB, MaxMemAllocated=1.36GB
[2022-08-29 06:58:56,176] [INFO] [timer.py:198:stop] 0/30, RunningAvgSamplesPerSec=232.7340551694273, CurrSamplesPerSec=227.48090316379353, MemAllocated=0.36GB, MaxMemAllocated=15.06GB
"""
# torchtitan (torchtitan/components/metrics.py), colours on, under torchrun's rank prefix
TORCHTITAN = (
    "[rank0]:[titan] 2025-03-10 12:00:00,123 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: 12.2345  "
    "\x1b[38;2;180;60;0mgrad_norm:  4.1234  \x1b[38;2;54;234;195mmemory: 30.12GiB(31.73%)  \x1b[34mtps: 4,096  "
    "\x1b[36mtflops: 190.35  \x1b[35mmfu: 19.25%\x1b[39m\n"
    "[rank0]:[titan] 2025-03-10 12:00:02,123 - root - INFO - \x1b[31mstep: 10  \x1b[32mloss:  7.8632  "
    "\x1b[38;2;180;60;0mgrad_norm:  1.2345  \x1b[38;2;54;234;195mmemory: 30.12GiB(31.73%)  \x1b[34mtps: 8,192  "
    "\x1b[36mtflops: 317.35  \x1b[35mmfu: 32.09%\x1b[39m\n"
)


def write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_megatron_lines_and_their_log_interval(tmp_path):
    [s] = read_iteration_log(write(tmp_path, "meg.log", MEGATRON))
    assert s.iterations.tolist() == [10, 20]
    assert s.seconds.tolist() == pytest.approx([1.1476, 1.1602])
    assert s.averaged_over == 10  # logged every 10 iterations: each value is a mean of 10
    assert sniff(MEGATRON) == "megatron"


def test_gpt_neox_lines(tmp_path):
    [s] = read_iteration_log(write(tmp_path, "neox.log", NEOX))
    assert s.iterations.tolist() == [1, 2, 3] and s.averaged_over == 1
    assert s.seconds.tolist() == pytest.approx([8.0894, 7.8618, 7.9501])


def test_deepspeed_lines_need_the_batch_size(tmp_path):
    path = write(tmp_path, "ds.log", DEEPSPEED)
    with pytest.raises(ConfigError) as e:
        read_iteration_log(path)
    assert e.value.field == "--batch-size"
    [s] = read_iteration_log(path, batch_size=256)
    assert s.iterations.tolist() == [10, 20, 30]
    # CurrSamplesPerSec = train_batch_size / step time
    assert s.seconds.tolist() == pytest.approx([256 / 222.88787331278564, 256 / 200.0, 256 / 227.48090316379353])


def test_torchtitan_lines_need_tokens_per_gpu_step(tmp_path):
    path = write(tmp_path, "tt.log", TORCHTITAN)
    assert sniff(TORCHTITAN) == "torchtitan"
    with pytest.raises(ConfigError) as e:
        read_iteration_log(path)
    assert e.value.field == "--tokens-per-gpu-step"
    [s] = read_iteration_log(path, tokens_per_gpu_step=8192)
    assert s.iterations.tolist() == [1, 10]
    assert s.seconds.tolist() == pytest.approx([2.0, 1.0])  # 8192 tokens at 4,096 and 8,192 tokens/s


def test_csv_with_jobs_cases_and_iterations(tmp_path):
    text = ("cluster,case,job,iteration,iteration_ms\n"
            "vista,gpt20b-4-4-8,7,1,2000\nvista,gpt20b-4-4-8,7,0,1000\nperlmutter,gpt20b-4-8-4,9,0,500\n")
    a, b = read_iteration_log(write(tmp_path, "t.csv", text))
    assert (a.job, a.case, b.job, b.case) == ("7", "paper-gpt20b-4-4-8-vista", "9", "paper-gpt20b-4-8-4-perlmutter")
    assert a.iterations.tolist() == [0, 1] and a.seconds.tolist() == [1.0, 2.0]  # sorted by iteration, in seconds


def test_csv_one_column_with_or_without_header(tmp_path):
    assert read_iteration_log(write(tmp_path, "a.csv", "# times\n1.5\n2.5\n"))[0].seconds.tolist() == [1.5, 2.5]
    assert read_iteration_log(write(tmp_path, "b.csv", "step_time\n1.5\n2.5\n"))[0].seconds.tolist() == [1.5, 2.5]


@pytest.mark.parametrize("text, where", [
    ("", ""),  # empty
    ("# only a comment\n", ""),
    ("1,2\n", ":1"),  # two cells without a header
    ("job,time_ms\n1,fast\n", ":2"),
    ("job,time_ms\n1,-5\n", ":2"),
    ("job,time_ms\n1,5,6\n", ":2"),
    ("job,duration\n1,5\n", ""),  # no time column
])
def test_bad_csv_names_the_file_and_line(tmp_path, text, where):
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(ConfigError) as e:
        read_iteration_log(path)
    assert e.value.field == path + where


def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(ConfigError) as e:
        read_iteration_log(write(tmp_path, "x.log", MEGATRON), "nemo")
    assert e.value.field == "--format"
    with pytest.raises(ConfigError) as e:
        read_iteration_log(str(tmp_path / "absent.csv"))
    assert e.value.field == str(tmp_path / "absent.csv")
    with pytest.raises(ConfigError, match="elapsed time per iteration"):
        read_iteration_log(write(tmp_path, "y.log", "nothing here\n"), "megatron")


def _series(values: list[float]) -> IterationSeries:
    return IterationSeries("f.csv", "1", None, np.arange(len(values)), np.asarray(values, dtype=float))


def test_drop_rule_first_last_and_outliers():
    s = _series([30.0, 10.0, 10.2, 9.9, 35.0, 10.1, 10.0, 12.0, 80.0])
    sel = select_rows(s)
    assert sel.kept_s.tolist() == [10.0, 10.2, 9.9, 10.1, 10.0, 12.0]
    assert [(it, why.split()[0]) for it, _, why in sel.dropped] == [(0, "warm-up"), (4, "above"), (8, "end")]
    assert select_rows(s, outlier_factor=0).kept_s.size == 7  # 35 s kept when outliers are not dropped
    assert select_rows(s, outlier_factor=4).kept_s.size == 7  # 35 s is 3.5x the median: kept at 4
    with pytest.raises(ConfigError, match="at least 5"):
        select_rows(_series([1.0] * 6))


def test_the_shared_training_logs():
    path = TRAINING_LOGS / "iterations.csv"
    if not path.is_file():
        pytest.skip(f"training logs not found at {path} (set TRAINSIM_TRAINING_LOGS)")
    series = {s.job: s for s in read_iteration_log(str(path))}
    assert set(series) == {"100696", "100697", "127321", "127322", "31694544", "31697107"}
    assert series["127322"].case == "paper-gpt20b-4-8-4-vista" and series["127322"].seconds.size == 53
    sel = select_rows(series["31697107"])
    # Perlmutter 4-8-4: warm-up, end of run and one 153 s step (3.6x the median) dropped; the rest within 1%
    assert [it for it, _, _ in sel.dropped] == [0, 7, 9]
    assert sel.kept_s.max() / sel.kept_s.min() < 1.01
    busy = select_rows(series["127321"])
    assert busy.kept_s.size == 51  # nothing but the first and last row dropped on the busy day (max 2.0x median)
