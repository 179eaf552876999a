"""Probe: where in a pipelined iteration each rank's memory peaks, and what is allocated there.

validation/probe_memory.py found pp2's peaks 0.3-2.9 GiB above operators/memory.py but built
every trainer in one process. This probe builds one layout on one shape per process (the device
script loops over shapes) and, during one iteration after two warm-up ones, records
``memory_allocated`` and the running ``max_memory_allocated`` at every GPT-NeoX layer's forward
start and end, every layer's backward end, the embedding and the LM head, and around the
optimizer step (global module and optimizer hooks: the trainer is used as it is). It also records
the bytes of the stage's parameters, gradients (before the step) and optimizer states. One JSON
line per rank is appended to ``--out``; the rank's summary is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe_common  # noqa: E402
import train_hf_parallel as thp  # noqa: E402

ALLOCATOR_FRAMES = ("unwind", "CapturedTraceback", "gather_with_cpp", "CachingAllocator", "c10::Storage",
                    "StorageImpl", "empty_generic", "empty_cuda", "at::empty", "at::detail::empty")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", required=True)
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--shape", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--snapshot-at", default=None, metavar="TAG#K",
                    help="at the K-th event TAG (e.g. 'F> lm_head#2'), list the largest live allocations "
                         "with the Python frames that made them (torch.cuda.memory._snapshot)")
    args = ap.parse_args()
    import torch
    import torch.distributed as dist
    from torch.nn.modules import module as nn_module
    from torch.optim import optimizer as optim_module

    env = probe_common.start(torch, dist)
    gib = 2.0**30
    shape = thp.read_shapes(args.shapes, [args.shape])[0]
    built = probe_common.warm_trainer(env, args.layout, shape, 2)
    if built is None:
        return probe_common.finish(env)
    _targs, trainer = built
    events: list[tuple[str, float, float]] = []
    on = [False]
    counter: dict[str, int] = {}
    snap_tag, _, snap_k = (args.snapshot_at or "").partition("#")
    largest: list[dict] = []
    sites: dict[str, float] = {}

    def snapshot() -> None:
        blocks = []
        for seg in torch.cuda.memory._snapshot()["segments"]:
            for blk in seg["blocks"]:
                if blk["state"] == "active_allocated":
                    # the allocator's own frames dropped; backward's allocations (the autograd engine's
                    # thread) have C++ frames only
                    frames = [f"{f['filename'].split('site-packages/')[-1]}:{f['line']} {f['name'][:90]}"
                              for f in blk.get("frames", [])
                              if not any(k in f["name"] for k in ALLOCATOR_FRAMES)][:30]
                    blocks.append({"mib": blk["size"] / 2**20, "frames": frames})
        largest.extend(sorted(blocks, key=lambda b: -b["mib"])[:25])
        # every live block by the first frame that names an operator (or Python code): what holds the memory
        for blk in blocks:
            native = next((f.split(" ", 1)[-1].split("(")[0] for f in blk["frames"]
                           if "at::native::" in f and "empty" not in f), "")
            code = next((f.split(" ", 1)[0] + " " + f.split(" ", 1)[-1][:30] for f in blk["frames"]
                         if ".py:" in f and "torch/" not in f.split(" ", 1)[0]), "")
            site = f"{native} | {code}" if native or code else ("no frames: allocated before the recorded step"
                                                                  if not blk["frames"] else "other")
            sites[site] = sites.get(site, 0.0) + blk["mib"]

    def mark(tag: str) -> None:
        if on[0]:
            events.append((tag, torch.cuda.memory_allocated(env.device) / gib,
                           torch.cuda.max_memory_allocated(env.device) / gib))
            if tag == snap_tag:
                counter[tag] = counter.get(tag, 0) + 1
                if str(counter[tag]) == snap_k:
                    snapshot()

    def name_of(mod) -> str | None:
        cls = type(mod).__name__
        if cls == "GPTNeoXLayer" or cls == "Embedding":
            return cls
        if cls == "Linear" and getattr(mod, "out_features", 0) > 10000:
            return "lm_head"
        return None

    def fwd_pre(mod, _inp):
        n = name_of(mod)
        if n:
            mark(f"F> {n}")

    def fwd_post(mod, _inp, _out):
        n = name_of(mod)
        if n:
            mark(f"F< {n}")

    def bwd_post(mod, _gin, _gout):
        n = name_of(mod)
        if n:
            mark(f"B< {n}")

    def opt_pre(_opt, _a, _k):
        grads = sum(p.grad.numel() * p.grad.element_size() for g in _opt.param_groups for p in g["params"]
                    if p.grad is not None)
        counter["grad_bytes"] = grads
        mark("opt>")

    def opt_post(opt, _a, _k):
        counter["opt_state_bytes"] = sum(t.numel() * t.element_size() for s in opt.state.values()
                                         for t in s.values() if torch.is_tensor(t))
        mark("opt<")

    handles = [nn_module.register_module_forward_pre_hook(fwd_pre),
               nn_module.register_module_forward_hook(fwd_post),
               nn_module.register_module_full_backward_hook(bwd_post),
               optim_module.register_optimizer_step_pre_hook(opt_pre),
               optim_module.register_optimizer_step_post_hook(opt_post)]
    params = list(trainer.named_params())
    param_bytes = sum(p.numel() * p.element_size() for _n, p in params)
    n_params = sum(p.numel() for _n, p in params)
    if snap_tag:
        torch.cuda.memory._record_memory_history(max_entries=200000, stacks="all")
    torch.cuda.synchronize()
    rest = torch.cuda.memory_allocated(env.device) / gib
    torch.cuda.reset_peak_memory_stats(env.device)
    on[0] = True
    mark("start")
    trainer.step()
    torch.cuda.synchronize()
    mark("end")
    on[0] = False
    for h in handles:
        h.remove()
    peak = torch.cuda.max_memory_allocated(env.device) / gib
    # the first event whose running maximum is the peak: the peak was reached just before it
    at = next((i for i, e in enumerate(events) if e[2] >= peak - 1e-9), len(events) - 1)
    row = {"layout": args.layout, "shape": shape.name, "rank": env.rank, "hidden": shape.hidden,
           "layers": shape.layers, "seq_len": shape.seq_len, "micro_batch": shape.micro_batch,
           "micro_batches": shape.micro_batches, "stage_layers": trainer.stage_layers, "params": n_params,
           "param_bytes": param_bytes, "grad_bytes": counter.get("grad_bytes"),
           "opt_state_bytes": counter.get("opt_state_bytes"), "rest_gib": rest, "peak_gib": peak,
           "peak_after": events[at - 1][0] if at > 0 else None, "peak_before": events[at][0],
           "events": events, "largest_at_snapshot": largest,
           "mib_by_site_at_snapshot": dict(sorted(sites.items(), key=lambda kv: -kv[1])),
           "device": probe_common.device_name(torch, env)}
    for r in range(env.world):  # one rank at a time appends its line
        if r == env.rank:
            probe_common.append_json(args.out, row)
            print(f"{args.layout} {shape.name} rank {env.rank}: params {n_params / 1e6:.1f} M, rest {rest:.2f}, "
                  f"peak {peak:.2f} GiB between {row['peak_after']!r} and {row['peak_before']!r}; "
                  f"grads {(counter.get('grad_bytes') or 0) / gib:.2f} GiB, "
                  f"optimizer {(counter.get('opt_state_bytes') or 0) / gib:.2f} GiB", flush=True)
        env.barrier()
    if largest and env.rank == 0:
        for site, mib in sorted(sites.items(), key=lambda kv: -kv[1])[:25]:
            print(f"  site {mib:9.1f} MiB  {site}", flush=True)
        for blk in largest[:10]:
            calls = " <- ".join(f.split(" ", 1)[-1][:60] for f in blk["frames"])
            print(f"  {blk['mib']:9.1f} MiB  {calls}", flush=True)
    del trainer
    thp.free_memory(env)
    return probe_common.finish(env)


if __name__ == "__main__":
    probe_common.entry(main)
