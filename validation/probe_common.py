"""What the torchrun probes of validation/ share: start a process group, end it, run ``main``."""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from typing import Any

import train_hf_parallel as thp


def start(torch: Any, dist: Any, env_class: type = thp.Env) -> Any:
    """This rank's ``Env`` (``env_class``) on its GPU (the CPU and gloo without one), NVLink
    multicast off, a one-process run given a rendezvous of its own."""
    from trainsim.calibration.collectives_bench import ensure_multicast_off

    ensure_multicast_off()  # before init_process_group: NCCL reads it at communicator creation
    if "MASTER_ADDR" not in os.environ:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(thp._free_port()), RANK="0", WORLD_SIZE="1")
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    return env_class(torch, dist, dist.get_rank(), dist.get_world_size(), device)


def finish(env: Any) -> int:
    """Every rank done before any tears down; 0."""
    env.barrier()
    env.dist.destroy_process_group()
    return 0


def entry(main: Callable[[], int]) -> None:
    """Run a probe's ``main`` and exit without NCCL's teardown (a traceback and exit 1 on error)."""
    try:
        rc = main()
    except Exception:
        traceback.print_exc()
        rc = 1
    from trainsim.calibration.collectives_bench import exit_skipping_teardown

    exit_skipping_teardown(rc)


def warm_trainer(env: Any, name: str, shape: Any, steps: int, **hooks: Any) -> tuple[Any, Any] | None:
    """(its arguments, the trainer) of layout ``name`` on ``shape`` after ``steps`` warm-up
    iterations (bf16 on GPUs, fp32 on the CPU); None when the layout needs another world size.
    ``hooks``: the trainer's probe hooks (``on_model``, ``on_stage``: validation/train_hf_parallel.py),
    set on its arguments before it is built."""
    layout = thp.parse_layout(name)
    if layout.world != env.world:
        return None
    targs = thp.build_parser().parse_args(["--layouts", name, "--out", "/dev/null"])
    targs.dtype = "bf16" if env.cuda else "fp32"
    for key, hook in hooks.items():
        setattr(targs, key, hook)
    trainer = thp.build_trainer(env, layout, shape, targs)
    for _ in range(steps):
        trainer.step()
    return targs, trainer


def append_json(path: str, row: dict) -> None:
    """One JSON line appended to a probe's ``--out`` (rank 0 writes; the file is resumable)."""
    with open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")


def device_name(torch: Any, env: Any) -> str:
    """The GPU's name, "cpu" without one."""
    return str(torch.cuda.get_device_name(env.device)) if env.cuda else "cpu"


def record(env: Any, torch: Any, out: str, row: dict, line: str) -> None:
    """Rank 0: ``row``, with the GPU's name, appended to ``out`` and ``line`` printed."""
    if env.rank == 0:
        append_json(out, {**row, "device": device_name(torch, env)})
        print(line, flush=True)
