"""The host time of a micro-batch outside its layers, in layers, in the parallel trainers' runtimes.

``validation/probe_head_host.py`` measured it for the eager runtime (one GPU, plain PyTorch): the
head (embedding, causal mask, rotary tables) and the tail (final norm, LM head, loss) cost 1.13
layers of host time per micro-batch. DTensor tensor parallelism runs other heads and tails: a
vocabulary-parallel embedding (masked lookup, all-reduce), a column-parallel LM head whose logits
stay sharded, and the cross-entropy under ``loss_parallel`` (its max, sum and target-gather
reductions over the vocabulary shards), each a DTensor operator with its sharding propagation. The
host line of ``dtensor_tp`` was fitted without them (``calibration/host_overhead.py``), so a
micro-batch's fixed host cost sat in the per-layer and per-iteration terms, and the host-GPU flow
shop (``sim/costs.py`` ``issue_flow_shop``) spread it over every operator instead of putting it
where the GPU waits for it: at the micro-batch's start, after the synchronisation.

This probe runs ``validation/train_hf_parallel.py``'s own trainer (``--layouts``: 1gpu in one
process, tp2 under torchrun) at the tiny host shapes (``validation/hf_parallel_shapes_host.csv``:
every operator host-bound), drains the GPU before each micro-batch and notes the host's clock at
the micro-batch's start, entering the first layer, leaving the last, after the loss, when the
backward reaches the last layer's output and the first layer's input (gradient hooks), and at the
backward's end. Per (layout, shape, rank), after ``--warmup`` iterations, ``--iters`` timed ones:
one JSON line with each part's median in microseconds and in units of one layer's forward plus
backward host time (``head_fwd``, ``tail_fwd``, ``head_bwd``, ``tail_bwd``: the keys
``calibration/host_overhead.py --head-tail`` reads), and the update's (optimizer step and
``zero_grad``, the GPU drained before it: ``update``), a check on the host line's per-iteration term.

A pipelined layout (pp2, pp2xtp2) runs the pipelining runtime's stages: each rank reports its own
stage's end (the first stage's head, the last stage's tail: the embedding, and the final norm, LM
head and loss), its events paired by micro-batch (:func:`install_stage_marks`). Run on pp2 (2x H200,
validation/parallel_head_host_h200_2gpu_machineBJ/); the host fit does not take a pipeline's ends yet.

    PYTHONPATH=. python validation/probe_parallel_head_host.py --layouts 1gpu --out head.jsonl
    PYTHONPATH=. torchrun --nproc-per-node 2 validation/probe_parallel_head_host.py --layouts tp2 --out head.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_common  # noqa: E402
import train_hf_parallel as thp  # noqa: E402

PARTS = ("head_fwd", "tail_fwd", "head_bwd", "tail_bwd")


def hook_layers(layers, note) -> None:
    """Hooks on the first and last layer only (cheap Python calls, so a layer's cost is not
    inflated): ``note(event)`` entering the first layer (``f0>``) and leaving the last (``fN<``),
    and, through gradient hooks on those hidden states, when the backward reaches them (``bN>``,
    then ``b0<``). A gradient hook goes on a tensor once: the pipelining runtime reuses its receive
    buffers across steps, and a hook registered at every forward would fire once for each."""

    def grad_mark(hidden, name: str) -> None:
        if hidden.requires_grad and not getattr(hidden, "_probe_marked", False):
            hidden.register_hook(lambda grad: (note(name), grad)[1])
            hidden._probe_marked = True

    def first_pre(_mod, args, kwargs):
        note("f0>")
        grad_mark(args[0] if args else kwargs["hidden_states"], "b0<")

    def last_post(_mod, _args, _kwargs, out):
        note("fN<")
        grad_mark(out[0] if isinstance(out, tuple) else out, "bN>")

    layers[0].register_forward_pre_hook(first_pre, with_kwargs=True)
    layers[-1].register_forward_hook(last_post, with_kwargs=True)


def install_marks(model, marks: dict[str, float]) -> None:
    """The model's layer hooks (:func:`hook_layers`), each event's host clock kept in ``marks``
    (the latest: one micro-batch at a time)."""
    hook_layers(list(model.gpt_neox.layers), lambda name: marks.__setitem__(name, time.perf_counter()))


def split(marks: dict[str, float], t0: float, t1: float, t2: float) -> dict[str, float]:
    """One micro-batch's parts in seconds: ``t0`` its start (GPU drained), ``t1`` the loss
    computed, ``t2`` the backward issued; ``marks`` from :func:`install_marks`."""
    return {"head_fwd": marks["f0>"] - t0, "layers_fwd": marks["fN<"] - marks["f0>"],
            "tail_fwd": t1 - marks["fN<"], "tail_bwd": marks["bN>"] - t1,
            "layers_bwd": marks["b0<"] - marks["bN>"], "head_bwd": t2 - marks["b0<"]}


def install_stage_marks(module, stage: int, last: bool, loss_fn, marks: dict[str, list[float]]):
    """A pipeline stage's hooks (``validation/train_hf_parallel.py``'s stage module, its layers in
    ``module.layers``): each event's host clock appended to ``marks[event]``, so the k-th entry of
    every forward event is micro-batch k's, and of every backward event too. Events: ``F`` the
    stage's forward starts, ``f0>``/``fN<`` entering the first layer and leaving the last, ``L`` the
    loss computed (the last stage: ``loss_fn`` wrapped, returned), ``bN>``/``b0<`` the backward at
    the last layer's output and the first layer's input, ``G`` the embedding's gradient accumulated
    (the first stage's backward done)."""

    def note(name: str) -> None:
        marks.setdefault(name, []).append(time.perf_counter())

    hook_layers(list(module.layers.values()), note)
    module.register_forward_pre_hook(lambda _mod, _args: note("F"))
    if stage == 0:
        module.embed_in.weight.register_post_accumulate_grad_hook(lambda _p: note("G"))
    if not last:
        return loss_fn

    def timed_loss(*args, **kwargs):
        out = loss_fn(*args, **kwargs)
        note("L")
        return out

    return timed_loss


def stage_parts(marks: dict[str, list[float]], first: bool, last: bool) -> dict[str, list[float]]:
    """Per micro-batch, a pipeline stage's parts in seconds from :func:`install_stage_marks`: its
    layers always; the head where it is the first stage, the tail where it is the last."""
    n = len(marks["f0>"])
    out = {"layers_fwd": [marks["fN<"][k] - marks["f0>"][k] for k in range(n)],
           "layers_bwd": [marks["b0<"][k] - marks["bN>"][k] for k in range(n)]}
    if first:
        out["head_fwd"] = [marks["f0>"][k] - marks["F"][k] for k in range(n)]
        out["head_bwd"] = [marks["G"][k] - marks["b0<"][k] for k in range(n)]
    if last:
        out["tail_fwd"] = [marks["L"][k] - marks["fN<"][k] for k in range(n)]
        out["tail_bwd"] = [marks["bN>"][k] - marks["L"][k] for k in range(n)]
    return out


class MicroBatchClock(list):
    """The trainer's ``mb_clock``: each micro-batch's parts, split as it ends, appended to ``parts``."""

    def __init__(self, marks: dict[str, float], parts: dict[str, list[float]]) -> None:
        super().__init__()
        self.marks, self.parts = marks, parts

    def append(self, stamps: tuple[float, float, float]) -> None:  # type: ignore[override]
        for k, v in split(self.marks, *stamps).items():
            self.parts.setdefault(k, []).append(v)


def in_layers(parts: dict[str, list[float]], layers: int) -> dict:
    """Medians in microseconds, and the four ends in units of one layer's forward plus backward."""
    med = {k: statistics.median(v) for k, v in parts.items()}
    layer = (med["layers_fwd"] + med["layers_bwd"]) / layers
    out: dict = {k: med[k] / layer for k in (*PARTS, "update") if k in med}  # a pipeline stage: its own ends
    out.update({f"{k}_us": v * 1e6 for k, v in med.items()})
    out["layer_us"] = layer * 1e6
    out["layers"] = layers
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", default="tp2", help="comma-separated; those of this world size run")
    ap.add_argument("--shapes", default="validation/hf_parallel_shapes_host.csv")
    ap.add_argument("--only", default=None)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    env = probe_common.start(torch, dist)
    for name in args.layouts.split(","):
        if thp.parse_layout(name).world != env.world:
            continue
        for shape in thp.read_shapes(args.shapes, args.only.split(",") if args.only else None):
            marks: dict[str, float] = {}
            stage_marks: dict[str, list[float]] = {}
            where: dict = {}

            def on_stage(module, stage, last, loss_fn, stage_marks=stage_marks, where=where):
                where.update(stage=stage, last=last, layers=len(module.layers))
                return install_stage_marks(module, stage, last, loss_fn, stage_marks)

            built = probe_common.warm_trainer(env, name, shape, args.warmup, on_stage=on_stage,
                                              on_model=lambda model, marks=marks: install_marks(model, marks))
            assert built is not None  # the world was checked above
            targs, trainer = built
            parts: dict[str, list[float]] = {}
            # the trainer appends (start, loss, end) once a micro-batch is issued, while the hooks'
            # marks are still that micro-batch's (a pipeline's stages: their own lists of events)
            targs.mb_clock = MicroBatchClock(marks, parts)
            targs.phase_log, targs.phase_sync = [], "before"  # the update's host time, the GPU drained first
            for _ in range(args.iters):
                stage_marks.clear()
                trainer.step()
                if where:
                    for k, v in stage_parts(stage_marks, where["stage"] == 0, where["last"]).items():
                        parts.setdefault(k, []).extend(v)
            update = [a for kind, a, _ in targs.phase_log if kind == "update"]  # none in a pipeline's step
            if update:
                parts["update"] = update
            targs.mb_clock = targs.phase_log = None
            row = {"layout": name, "name": shape.name, "rank": env.rank, "iters": args.iters,
                   "micro_batches": shape.micro_batches, **in_layers(parts, where.get("layers", shape.layers)),
                   **({"stage": where["stage"]} if where else {}),
                   "device": probe_common.device_name(torch, env), "torch": torch.__version__}
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            if env.rank == 0 or (where and where["last"] and env.rank == env.world - 1):
                ends = ", ".join(f"{k.replace('_', ' ')} {row[k]:.2f}" for k in PARTS if k in row)
                print(f"{name} {shape.name} rank {env.rank}: {ends}, update {row.get('update', 0):.2f} layers "
                      f"(a layer {row['layer_us']:.0f} us)", flush=True)
            trainer = None
            env.barrier()
            thp.free_memory(env)
    return probe_common.finish(env)


if __name__ == "__main__":
    probe_common.entry(main)
