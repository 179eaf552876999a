"""Jitter presets fitted on measured per-iteration times: the machine and the day, not the layout.

Each entry says what it was fitted on and the command that produced it (``trainsim jitter fit``,
run from the repository root beside ``../shared``); its ``jitter`` mapping is what that command
wrote under ``simulation.jitter`` (docs/jitter.md shows each fit). Nothing here is chosen by
hand: the constants a fit holds fixed (NVLink noise, compute noise, stragglers) are zero, as the
paper scenarios set none.
"""

from __future__ import annotations

from typing import Any

LOGS = "../shared/training-logs/iterations.csv"

FITTED_PRESETS: dict[str, dict[str, Any]] = {
    "vista-busy": {
        "fitted_on": "Vista, busy day: jobs 127321 (gpt20b 4-4-8) and 127322 (4-8-4), 51 iterations each",
        "command": f"trainsim jitter fit {LOGS} --job 127321 --job 127322 --jobs 2 --out vista-busy.yaml",
        "jitter": {"noise": {"nic": {"sigma": 0.1304}},
                   "congestion": {"nic": {"bandwidth_factor": 0.9999,
                                          "mean_on_s": 4.638,
                                          "mean_off_s": 4.922,
                                          "scope": "tier",
                                          "latency_s": 0.0006206}}},
    },
    "vista-quiet": {
        "fitted_on": "Vista, quiet day: jobs 100696 (gpt20b 4-4-8) and 100697 (4-8-4), 6 iterations each",
        "command": f"trainsim jitter fit {LOGS} --job 100696 --job 100697 --jobs 2 --out vista-quiet.yaml",
        "jitter": {"noise": {"nic": {"sigma": 0.7467}},
                   "congestion": {"nic": {"bandwidth_factor": 0.9692,
                                          "mean_on_s": 3.075,
                                          "mean_off_s": 4.549,
                                          "scope": "tier",
                                          "latency_s": 0.0002959}}},
    },
    "perlmutter": {
        "fitted_on": "Perlmutter: jobs 31694544 (gpt20b 4-4-8, 6 iterations) and 31697107 (4-8-4, 7)",
        # bandwidth episodes only: 13 iterations cannot tell a fifth parameter (with the step latency the
        # fit picks 300 s episodes, 0.10 a minute, from logs of two minutes each; docs/jitter.md)
        "command": f"trainsim jitter fit {LOGS} --job 31694544 --job 31697107 --jobs 2 --no-step-latency "
                   "--out perlmutter.yaml",
        "jitter": {"noise": {"nic": {"sigma": 0.9994}}},
    },
}

#: ``vista`` names the busy-day fit: it rests on 102 iterations (the quiet day has 12), and the
#: paper's "up to about 2x" describes a busy fabric.
PRESET_ALIASES: dict[str, str] = {"vista": "vista-busy"}
