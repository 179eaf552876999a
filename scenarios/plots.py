"""Matplotlib figures: the pipeline timeline (the paper's Figure 2) and a component breakdown (Figure 3).

The Agg backend is selected here, so plotting works without a display.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from trainsim.sim.engine import SimResult  # noqa: E402

COLOURS = {
    "forward": "#4c72b0",
    "backward": "#dd8452",
    "recompute": "#f2c49b",
    "mp": "#8172b3",
    "pp": "#55a868",
    "pp_wait": "#c8e6c9",
    "dp_allreduce": "#c44e52",
    "optimizer": "#937860",
    "update": "#937860",
    "dp_allgather": "#da8bc3",
}
LABELS = {
    "forward": "forward", "backward": "backward", "recompute": "recompute (in backward)",
    "mp": "MP all-reduce", "pp": "P2P send",
    "pp_wait": "P2P send waiting for the receiver", "dp_allreduce": "DP all-reduce", "optimizer": "optimizer",
    "update": "update (optimizer + all-gather)", "dp_allgather": "DP all-gather",
}


def plot_timeline(result: SimResult, path: str | Path, replica: int = 0) -> Path:
    """One row per stage of ``replica``; DP collectives of a stage in a thin band under its row."""
    if not result.spans:
        raise ValueError("the result has no spans; simulate with record=True")
    pp = result.pp
    fig, ax = plt.subplots(figsize=(12, 0.6 * pp + 1.6))
    used: set[str] = set()
    for sp in result.spans:
        if sp.cat == "link":
            continue
        if sp.track == f"stage {_stage(sp.track)} replica {replica}":
            y, h = _stage(sp.track), 0.7
        elif sp.track.endswith("DP collectives"):
            y, h = _stage(sp.track) + 0.38, 0.18
        else:
            continue
        ax.broken_barh([(sp.start_s, sp.end_s - sp.start_s)], (y - h / 2 + (0.0 if h > 0.5 else 0.0), h),
                       facecolors=COLOURS.get(sp.cat, "grey"), edgecolors="white", linewidth=0.3)
        used.add(sp.cat)
    ax.set_yticks(range(pp))
    ax.set_yticklabels([f"stage {s}" for s in range(pp)])
    ax.invert_yaxis()
    ax.set_xlim(0, result.iteration_s)
    ax.set_xlabel("time (s)")
    ax.set_title(f"{result.mode} simulation, replica {replica}: iteration {result.iteration_s:.4g} s "
                 f"(Eq. 7: {result.eq7_s:.4g} s)")
    handles = [Patch(color=COLOURS[c], label=LABELS[c]) for c in COLOURS if c in used]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=min(len(handles), 5),
              fontsize=8, frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _stage(track: str) -> int:
    return int(track.split()[1])


def plot_breakdown(components: dict[str, float], path: str | Path, title: str = "Iteration time breakdown") -> Path:
    """A horizontal bar per component (seconds), largest first, with its share of the total."""
    items = sorted(((k, v) for k, v in components.items() if v > 0), key=lambda kv: kv[1], reverse=True)
    if not items:
        raise ValueError("no positive component to plot")
    total = sum(v for _, v in items)
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(items) + 1.2))
    names = [k for k, _ in items]
    values = [v for _, v in items]
    colours = [COLOURS.get(k, f"C{i % 10}") for i, k in enumerate(names)]
    ax.barh(names, values, color=colours)
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.3g} s ({100 * v / total:.1f}%)", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.set_xlim(0, max(values) * 1.3)
    ax.set_title(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
