"""3D-parallel (PP x MP x DP) training of a GPT-NeoX-style decoder in plain PyTorch, timed.

Launch one process per GPU with torchrun (NCCL; multicast off, see docs/multi_gpu.md)::

    env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
      PYTHONPATH=. python -m torch.distributed.run --standalone --nproc-per-node 8 \\
      validation/train_3d.py --pp 2 --mp 2 --dp 2 --hidden 4096 --heads 32 --layers 16 --seq 2048 \\
      --micro-batch 2 --micro-batches 8 --out validation/measured_3d.csv

or on the CPU with gloo (``--dtype fp32``, any world of a few processes).

The model, per layer: LayerNorm, column-parallel QKV (heads split over MP), causal
``scaled_dot_product_attention``, row-parallel output projection + MP all-reduce, residual
add, LayerNorm, column-parallel MLP up, GeLU, row-parallel MLP down + MP all-reduce,
residual add; a vocab-parallel embedding in front, final LayerNorm, vocab-parallel LM head
and vocab-parallel cross-entropy at the end (Megatron's layout; vocabulary padded to
``128 * mp`` as :func:`operators.partition.padded_vocab`). Layers are split over stages by
:func:`operators.partition.partition_encoders`, the simulator's rule.

Ranks follow Megatron's order (:class:`topology.placement.Placement`): MP fastest, then DP,
then PP. The pipeline is Megatron's non-interleaved 1F1B (warm-up / steady / drain counts of
:func:`sim.schedule.one_f_one_b`) over ``batch_isend_irecv``, with the paired
send-forward-recv-backward / send-backward-recv-forward exchanges Megatron uses so that no
two stages block in a send to each other; with mp > 1 each MP rank sends 1/mp of the
activation and the receiver all-gathers it (Megatron's scatter-gather). After the last
backward the gradients are all-reduced (averaged) over the DP group, then AdamW steps.
With ``--dtype bf16`` parameters, activations and gradients (so the P2P, MP and DP messages)
are bf16 and AdamW updates fp32 master copies (Megatron's mixed precision, no ZeRO).

Weights are drawn per (layer, tensor) from a seed as FULL tensors and then sharded, so any
layout trains the same model as :func:`reference_step`, the single-process reference the
correctness test compares with.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import statistics
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainsim.operators.errors import ConfigError  # noqa: E402
from trainsim.operators.partition import padded_vocab, partition_encoders  # noqa: E402
from trainsim.operators.spec import Parallelism  # noqa: E402
from trainsim.sim.schedule import one_f_one_b  # noqa: E402
from trainsim.topology.placement import Placement  # noqa: E402

COLUMNS = ("layout", "pp", "mp", "dp", "hidden", "heads", "layers", "seq", "micro_batch", "micro_batches",
           "recompute", "min_s", "median_s", "max_mem_gib", "device", "torch", "vocab")
DEFAULT_OUT = Path(__file__).with_name("measured_3d.csv")
LN_EPS = 1e-5

# shard dimension of each tensor under MP (None: replicated on every MP rank)
LAYER_TENSORS = {  # name -> (shape as a function of (d, f), shard dim)
    "ln1_w": (lambda d, f: (d,), None), "ln1_b": (lambda d, f: (d,), None),
    "qkv_w": (lambda d, f: (3 * d, d), 0), "qkv_b": (lambda d, f: (3 * d,), 0),
    "dense_w": (lambda d, f: (d, d), 1), "dense_b": (lambda d, f: (d,), None),
    "ln2_w": (lambda d, f: (d,), None), "ln2_b": (lambda d, f: (d,), None),
    "up_w": (lambda d, f: (f, d), 0), "up_b": (lambda d, f: (f,), 0),
    "down_w": (lambda d, f: (d, f), 1), "down_b": (lambda d, f: (d,), None),
}
EDGE_SHARD = {"embed": 0, "final_ln_w": None, "final_ln_b": None, "head_w": 0}


@dataclass(frozen=True)
class Config:
    pp: int = 1
    mp: int = 1
    dp: int = 1
    hidden: int = 64
    heads: int = 4
    layers: int = 2
    seq: int = 16
    micro_batch: int = 2
    micro_batches: int = 2
    vocab: int = 50257  # unpadded; padded to 128 * mp (Eq. 1-2)
    recompute: bool = False
    dtype: str = "fp32"
    seed: int = 0
    lr: float = 1e-3
    adam_eps: float = 1e-8
    idle_s: float = 0.0  # the GPU idles this long before each timed iteration (a burst, as the operator samples)

    def __post_init__(self) -> None:
        for k in ("pp", "mp", "dp", "hidden", "heads", "layers", "seq", "micro_batch", "micro_batches", "vocab"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"--{k.replace('_', '-')}", f"must be a positive integer, got {v!r}")
        if self.hidden % self.heads:
            raise ConfigError("--heads", f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.heads % self.mp:
            raise ConfigError("--mp", f"heads {self.heads} is not divisible by mp {self.mp}")
        if self.dtype not in ("fp32", "bf16", "fp16"):
            raise ConfigError("--dtype", f"expected fp32, bf16 or fp16, got {self.dtype!r}")
        if not 0.0 <= self.idle_s < 3600.0:  # NaN fails too
            raise ConfigError("--idle-s", f"must be seconds in [0, 3600), got {self.idle_s!r}")
        partition_encoders(self.layers, self.pp)  # raises if a stage would get no layer

    @property
    def ffn(self) -> int:
        return 4 * self.hidden

    @property
    def padded_vocab(self) -> int:
        return padded_vocab(self.vocab, self.mp)

    @property
    def world(self) -> int:
        return self.pp * self.mp * self.dp

    @property
    def layout(self) -> str:
        return f"pp{self.pp}-mp{self.mp}-dp{self.dp}"

    def stage_layers(self, stage: int) -> range:
        counts = partition_encoders(self.layers, self.pp)
        first = sum(counts[:stage])
        return range(first, first + counts[stage])


# ----------------------------------------------------------------------------- initialisation


def _seed(*keys: int) -> int:
    s = 0
    for k in keys:
        s = (s * 1_000_003 + k + 1) % (2**62)
    return s


def full_tensor(torch, cfg: Config, name: str, layer: int, device):
    """One FULL (unsharded) fp32 tensor, drawn from its own seed: identical in every layout."""
    d, f = cfg.hidden, cfg.ffn
    names = list(LAYER_TENSORS) + list(EDGE_SHARD)
    gen = torch.Generator(device=device).manual_seed(_seed(cfg.seed, layer, names.index(name)))
    if name in LAYER_TENSORS:
        shape = LAYER_TENSORS[name][0](d, f)
    else:
        shape = (d,) if name.startswith("final_ln") else (cfg.padded_vocab, d)
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    if name.endswith("ln_w") or name in ("ln1_w", "ln2_w"):
        return 1.0 + 0.1 * x  # not exactly 1, so a wrong norm gradient shows
    if name.endswith("_b"):
        return 0.1 * x
    if name == "embed":
        return x
    return x * (shape[1] ** -0.5)  # weights [out, in]: unit-variance outputs


def shard(t, dim: int | None, mp: int, index: int):
    if dim is None or mp == 1:
        return t
    return t.chunk(mp, dim=dim)[index].contiguous()


def make_batch(torch, cfg: Config, device):
    """Token ids of the whole global batch [dp * m * b, seq + 1]; identical on every rank."""
    gen = torch.Generator(device=device).manual_seed(_seed(cfg.seed, 999_983))
    n = cfg.dp * cfg.micro_batches * cfg.micro_batch
    return torch.randint(0, cfg.vocab, (n, cfg.seq + 1), generator=gen, device=device)


def micro_slice(cfg: Config, dp_index: int, micro: int) -> slice:
    """Rows of the global batch that DP rank ``dp_index`` trains on in micro-batch ``micro``."""
    start = (micro * cfg.dp + dp_index) * cfg.micro_batch
    return slice(start, start + cfg.micro_batch)


# ----------------------------------------------------------------------------- tensor parallelism


def _tp_functions(torch, dist):
    class CopyToMP(torch.autograd.Function):
        """Megatron's f: identity forward, all-reduce of the gradient backward."""

        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            g = g.contiguous().clone()
            dist.all_reduce(g, group=ctx.group)
            return g, None

    class ReduceFromMP(torch.autograd.Function):
        """Megatron's g: all-reduce forward, identity backward."""

        @staticmethod
        def forward(ctx, x, group):
            x = x.contiguous().clone()
            dist.all_reduce(x, group=group)
            return x

        @staticmethod
        def backward(ctx, g):
            return g, None

    class VocabParallelCE(torch.autograd.Function):
        """Cross-entropy over logits split by vocabulary (Megatron's _VocabParallelCrossEntropy)."""

        @staticmethod
        def forward(ctx, logits, target, group, vstart):
            logits = logits.float()
            vloc = logits.shape[-1]
            lmax = logits.max(dim=-1)[0]
            dist.all_reduce(lmax, op=dist.ReduceOp.MAX, group=group)
            logits = logits - lmax.unsqueeze(-1)
            outside = (target < vstart) | (target >= vstart + vloc)
            local = (target - vstart).masked_fill(outside, 0)
            rows = torch.arange(logits.shape[0], device=logits.device)
            picked = logits[rows, local].masked_fill(outside, 0.0)
            dist.all_reduce(picked, group=group)
            exp = logits.exp()
            sum_exp = exp.sum(dim=-1)
            dist.all_reduce(sum_exp, group=group)
            ctx.save_for_backward(exp.div_(sum_exp.unsqueeze(-1)), outside, local)
            return sum_exp.log() - picked

        @staticmethod
        def backward(ctx, g):
            softmax, outside, local = ctx.saved_tensors
            grad = softmax.clone()
            rows = torch.arange(grad.shape[0], device=grad.device)
            grad[rows, local] -= (~outside).to(grad.dtype)
            return grad * g.unsqueeze(-1), None, None, None

    return CopyToMP, ReduceFromMP, VocabParallelCE


class Stage:
    """The layers one rank holds (its pipeline stage, its MP shard) and their forward."""

    def __init__(self, torch, dist, cfg: Config, stage: int, mp_index: int, mp_group, device, dtype) -> None:
        self.torch, self.cfg, self.stage, self.mp_index, self.mp_group = torch, cfg, stage, mp_index, mp_group
        self.first, self.last = stage == 0, stage == cfg.pp - 1
        self.copy_to, self.reduce_from, self.vp_ce = _tp_functions(torch, dist)
        self.params: dict[str, object] = {}
        for layer in cfg.stage_layers(stage):
            for name, (_, dim) in LAYER_TENSORS.items():
                self._add(f"layers.{layer}.{name}", full_tensor(torch, cfg, name, layer, device), dim, dtype)
        edge = (["embed"] if self.first else []) + (["final_ln_w", "final_ln_b", "head_w"] if self.last else [])
        for name in edge:
            self._add(name, full_tensor(torch, cfg, name, -1, device), EDGE_SHARD[name], dtype)

    def _add(self, name: str, full, dim, dtype) -> None:
        t = shard(full, dim, self.cfg.mp, self.mp_index).to(dtype)
        self.params[name] = t.requires_grad_(True)

    def _mp(self) -> bool:
        return self.cfg.mp > 1

    def _f(self, x):
        return self.copy_to.apply(x, self.mp_group) if self._mp() else x

    def _g(self, x):
        return self.reduce_from.apply(x, self.mp_group) if self._mp() else x

    def embed(self, ids):
        F = self.torch.nn.functional
        w = self.params["embed"]
        if not self._mp():
            return F.embedding(ids, w)
        vloc = w.shape[0]
        start = self.mp_index * vloc
        outside = (ids < start) | (ids >= start + vloc)
        out = F.embedding((ids - start).masked_fill(outside, 0), w)
        return self._g(out.masked_fill(outside.unsqueeze(-1), 0.0))

    def layer(self, x, i: int):
        F, p, cfg = self.torch.nn.functional, self.params, self.cfg
        w = {k: p[f"layers.{i}.{k}"] for k in LAYER_TENSORS}
        d = cfg.hidden
        b, seq = x.shape[0], x.shape[1]
        heads, hd = cfg.heads // cfg.mp, d // cfg.heads
        h = self._f(F.layer_norm(x, (d,), w["ln1_w"], w["ln1_b"], LN_EPS))
        qkv = F.linear(h, w["qkv_w"], w["qkv_b"]).view(b, seq, heads, 3, hd)  # head-major QKV layout
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(dim=3))
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        ctx = ctx.transpose(1, 2).reshape(b, seq, heads * hd)
        x = x + self._g(F.linear(ctx, w["dense_w"])) + w["dense_b"]
        h = self._f(F.layer_norm(x, (d,), w["ln2_w"], w["ln2_b"], LN_EPS))
        h = F.gelu(F.linear(h, w["up_w"], w["up_b"]))
        return x + self._g(F.linear(h, w["down_w"])) + w["down_b"]

    def forward(self, x, ids=None, labels=None):
        """Stage forward; on the last stage the mean loss of the micro-batch."""
        torch, cfg = self.torch, self.cfg
        if self.first:
            x = self.embed(ids)
        for i in cfg.stage_layers(self.stage):
            if cfg.recompute:
                x = torch.utils.checkpoint.checkpoint(self.layer, x, i, use_reentrant=False)
            else:
                x = self.layer(x, i)
        if not self.last:
            return x
        F, p = torch.nn.functional, self.params
        h = self._f(F.layer_norm(x, (cfg.hidden,), p["final_ln_w"], p["final_ln_b"], LN_EPS))
        logits = F.linear(h, p["head_w"]).flatten(0, 1)
        if self._mp():
            vstart = self.mp_index * p["head_w"].shape[0]
            return self.vp_ce.apply(logits, labels.flatten(), self.mp_group, vstart).mean()
        return F.cross_entropy(logits.float(), labels.flatten())


# ----------------------------------------------------------------------------- the 1F1B pipeline


class Pipe:
    """P2P between this rank and its peers on the neighbouring stages (same dp, mp index)."""

    def __init__(self, torch, dist, cfg: Config, place: Placement, rank: int, mp_group, shape, dtype, device):
        self.torch, self.dist, self.cfg = torch, dist, cfg
        s, j, k = place.coords(rank)
        self.prev = place.rank(s - 1, j, k) if s > 0 else None
        self.next = place.rank(s + 1, j, k) if s < cfg.pp - 1 else None
        self.mp_index, self.mp_group = k, mp_group
        self.shape, self.dtype, self.device = shape, dtype, device
        self.numel = math.prod(shape)

    def _chunk(self, t):
        """What this rank sends: all of t, or its 1/mp slice (Megatron's scatter-gather)."""
        flat = t.detach().contiguous().view(-1)
        return flat.chunk(self.cfg.mp)[self.mp_index].contiguous() if self.cfg.mp > 1 else flat

    def _buffer(self):
        return self.torch.empty(self.numel // self.cfg.mp, dtype=self.dtype, device=self.device)

    def _gather(self, part):
        if self.cfg.mp == 1:
            return part.view(self.shape)
        full = self.torch.empty(self.numel, dtype=self.dtype, device=self.device)
        gather = getattr(self.dist, "all_gather_single", None) or self.dist.all_gather_into_tensor
        gather(full, part, group=self.mp_group)
        return full.view(self.shape)

    def exchange(self, send_next=None, send_prev=None, recv_next: bool = False, recv_prev: bool = False):
        """One batch of isend/irecv, waited on; returns (from prev, from next) full tensors."""
        dist = self.dist
        ops, got_prev, got_next = [], None, None
        if send_prev is not None and self.prev is not None:
            ops.append(dist.P2POp(dist.isend, self._chunk(send_prev), self.prev))
        if recv_prev and self.prev is not None:
            got_prev = self._buffer()
            ops.append(dist.P2POp(dist.irecv, got_prev, self.prev))
        if send_next is not None and self.next is not None:
            ops.append(dist.P2POp(dist.isend, self._chunk(send_next), self.next))
        if recv_next and self.next is not None:
            got_next = self._buffer()
            ops.append(dist.P2POp(dist.irecv, got_next, self.next))
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        if got_prev is not None:
            got_prev = self._gather(got_prev).requires_grad_(True)
        if got_next is not None:
            got_next = self._gather(got_next)
        return got_prev, got_next


def train_step(torch, stage: Stage, pipe: Pipe, cfg: Config, data, dp_index: int, dp_group, optimizer, masters):
    """One iteration: 1F1B over the micro-batches, DP all-reduce, AdamW. The loss on the last stage."""
    dist = pipe.dist
    m, s = cfg.micro_batches, stage.stage
    steps = one_f_one_b(cfg.pp, m, s)
    warmup = min(cfg.pp - s - 1, m)  # Megatron's count, the warm-up of sim.schedule.one_f_one_b
    assert [st.kind for st in steps[:warmup]] == ["F"] * warmup and len(steps) == 2 * m
    remaining = m - warmup
    fwd_order = iter(st.micro for st in steps if st.kind == "F")
    losses = []
    queue: deque = deque()

    def forward(x):
        i = next(fwd_order)
        rows = data[micro_slice(cfg, dp_index, i)]
        y = stage.forward(x, ids=rows[:, :-1] if stage.first else None, labels=rows[:, 1:] if stage.last else None)
        if stage.last:
            y = y / m
            losses.append(y.detach())
        queue.append((x, y))
        return y if not stage.last else None

    def backward(gy):
        x, y = queue.popleft()
        if stage.last:
            y.backward()
        else:
            torch.autograd.backward(y, grad_tensors=gy)
        return x.grad if x is not None else None

    for _ in range(warmup):
        x, _ = pipe.exchange(recv_prev=True)
        pipe.exchange(send_next=forward(x))
    x = pipe.exchange(recv_prev=True)[0] if remaining else None
    for i in range(remaining):
        y = forward(x)
        gy = pipe.exchange(send_next=y, recv_next=True)[1]
        gx = backward(gy)
        x = pipe.exchange(send_prev=gx, recv_prev=i < remaining - 1)[0]
    for _ in range(warmup):
        gy = pipe.exchange(recv_next=True)[1]
        pipe.exchange(send_prev=backward(gy))

    params = list(stage.params.values())
    if cfg.dp > 1:
        _allreduce_mean([p.grad for p in params], dp_group, cfg.dp, torch, dist)
    if masters is not None:
        for p, mst in zip(params, masters, strict=True):
            mst.grad = p.grad.float()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if masters is not None:
        with torch.no_grad():
            for p, mst in zip(params, masters, strict=True):
                p.copy_(mst)
    for p in params:
        p.grad = None
    if stage.last:
        loss = torch.stack(losses).sum()
        if cfg.dp > 1:
            dist.all_reduce(loss, group=dp_group)
            loss = loss / cfg.dp
        return loss
    return None


def _allreduce_mean(grads, group, dp: int, torch, dist, bucket: int = 2**28) -> None:
    """Average gradients over DP in flat buckets of at most ``bucket`` elements."""
    i = 0
    while i < len(grads):
        j, n = i, 0
        while j < len(grads) and (j == i or n + grads[j].numel() <= bucket):
            n += grads[j].numel()
            j += 1
        flat = torch.cat([g.reshape(-1) for g in grads[i:j]])
        dist.all_reduce(flat, group=group)
        flat.div_(dp)
        off = 0
        for g in grads[i:j]:
            g.copy_(flat[off:off + g.numel()].view_as(g))
            off += g.numel()
        i = j


# ----------------------------------------------------------------------------- single-process reference


def reference_step(cfg: Config):
    """Train the same model on the same global batch for one step in one process (no parallelism).

    Returns (loss, {full parameter name: updated fp32 tensor}). Plain ops only: the whole batch
    in one forward, ``F.cross_entropy``, ``torch.optim.AdamW``.
    """
    import torch

    F = torch.nn.functional
    dev = torch.device("cpu")
    ref = Config(**{**asdict(cfg), "pp": 1, "mp": 1, "dp": 1})
    p = {f"layers.{i}.{n}": full_tensor(torch, cfg, n, i, dev).requires_grad_(True)
         for i in range(cfg.layers) for n in LAYER_TENSORS}
    for n in EDGE_SHARD:
        p[n] = full_tensor(torch, cfg, n, -1, dev).requires_grad_(True)
    assert ref.padded_vocab == cfg.padded_vocab, "choose a vocab that needs no padding for the compared mp"
    data = make_batch(torch, cfg, dev)
    x = F.embedding(data[:, :-1], p["embed"])
    d, hd = cfg.hidden, cfg.hidden // cfg.heads
    for i in range(cfg.layers):
        w = {k: p[f"layers.{i}.{k}"] for k in LAYER_TENSORS}
        b, seq = x.shape[:2]
        qkv = F.linear(F.layer_norm(x, (d,), w["ln1_w"], w["ln1_b"], LN_EPS), w["qkv_w"], w["qkv_b"])
        q, k, v = (t.transpose(1, 2) for t in qkv.view(b, seq, cfg.heads, 3, hd).unbind(dim=3))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, seq, d)
        x = x + F.linear(att, w["dense_w"], w["dense_b"])
        h = F.gelu(F.linear(F.layer_norm(x, (d,), w["ln2_w"], w["ln2_b"], LN_EPS), w["up_w"], w["up_b"]))
        x = x + F.linear(h, w["down_w"], w["down_b"])
    h = F.layer_norm(x, (d,), p["final_ln_w"], p["final_ln_b"], LN_EPS)
    loss = F.cross_entropy(F.linear(h, p["head_w"]).flatten(0, 1), data[:, 1:].flatten())
    loss.backward()
    opt = torch.optim.AdamW(list(p.values()), lr=cfg.lr, eps=cfg.adam_eps, foreach=False)
    opt.step()
    return float(loss.detach()), {k: v.detach() for k, v in p.items()}


def shard_dim(name: str) -> int | None:
    return LAYER_TENSORS[name.rsplit(".", 1)[1]][1] if name.startswith("layers.") else EDGE_SHARD[name]


# ----------------------------------------------------------------------------- driver


def _setup(cfg: Config, backend: str):
    from trainsim.calibration.collectives_bench import ensure_multicast_off

    ensure_multicast_off()
    import torch
    import torch.distributed as dist

    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    if world != cfg.world:
        raise ConfigError("--nproc-per-node", f"pp*mp*dp = {cfg.world} but the world has {world} processes")
    cuda = backend == "nccl"
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend)
    return torch, dist, rank, device


def run(cfg: Config, backend: str, warmup: int, iters: int, dump: str | None = None,
        sweep: Sequence[int] = (), kernels: bool = False, profile_iters: int = 1) -> list[dict]:
    """Time ``cfg``; with ``sweep``, the same model in the same process at each of those
    micro-batch counts in turn (one result each): what the host-cost probe varies in one launch."""
    torch, dist, rank, device = _setup(cfg, backend)
    try:
        result = _run(torch, dist, cfg, rank, device, warmup, iters, dump, tuple(sweep) or (cfg.micro_batches,),
                      kernels and device.type == "cuda", profile_iters)
        # every rank done before any tears down: gloo aborts a process whose peer closed first
        dist.barrier(device_ids=[device.index]) if device.type == "cuda" else dist.barrier()
        return result
    finally:
        dist.destroy_process_group()


def _run(torch, dist, cfg: Config, rank: int, device, warmup: int, iters: int, dump: str | None,
         micro_batch_counts: Sequence[int], kernels: bool = False, profile_iters: int = 1) -> list[dict]:
    cuda = device.type == "cuda"
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.dtype]
    place = Placement(Parallelism(pp=cfg.pp, mp=cfg.mp, dp=cfg.dp), gpus_per_node=cfg.world)
    mp_group = dp_group = None
    for g in place.mp_groups():  # every rank creates every group, in the same order
        h = dist.new_group(list(g)) if cfg.mp > 1 else None
        if rank in g:
            mp_group = h
    for g in place.dp_groups():
        h = dist.new_group(list(g)) if cfg.dp > 1 else None
        if rank in g:
            dp_group = h
    s, dp_index, mp_index = place.coords(rank)
    stage = Stage(torch, dist, cfg, s, mp_index, mp_group, device, dtype)
    pipe = Pipe(torch, dist, cfg, place, rank, mp_group, (cfg.micro_batch, cfg.seq, cfg.hidden), dtype, device)
    params = list(stage.params.values())
    masters = None
    if dtype != torch.float32:
        masters = [p.detach().float().clone().requires_grad_(True) for p in params]
    fused = {"fused": True} if cuda else {"foreach": False}
    optimizer = torch.optim.AdamW(masters if masters is not None else params, lr=cfg.lr, eps=cfg.adam_eps, **fused)
    data = make_batch(torch, replace(cfg, micro_batches=max(micro_batch_counts)), device)

    def barrier():
        dist.barrier(device_ids=[device.index]) if cuda else dist.barrier()
        if cuda:
            torch.cuda.synchronize(device)

    state = (stage, pipe, data, dp_index, mp_index, dp_group, optimizer, masters, place)
    results = []
    for m in micro_batch_counts:
        cfg_m = replace(cfg, micro_batches=m)
        results.append(_time(torch, dist, cfg_m, rank, device, warmup, iters, dump, state, barrier))
        dump = None  # the correctness dump is of the first step of the first count only
    if kernels:  # profile_iters more iterations of the last count, profiled
        results[-1]["kernels"] = _profile_step(torch, cfg_m, rank, device, state, barrier, profile_iters)
    return results


#: the name of each profiled iteration's record_function span (then its index)
ITERATION_SPAN = "train_3d.iteration."


def _profile_step(torch, cfg: Config, rank: int, device, state, barrier, iters: int = 1) -> dict | None:
    """``iters`` more iterations back to back, profiled on rank 0 (the others run them plainly): their CUDA
    kernel seconds by category and the GPU's busy time (train_hf_parallel.summarize_trace), beside their
    wall time (summed over the iterations), and rank 0's kernel timeline (``timeline``: every kernel's
    launch, start and duration, train_hf_parallel.kernel_timeline, and each iteration's ``[start_us,
    end_us]`` on the host, from its ``record_function`` span): within one process, how a kernel's
    duration changes from a cool GPU's first milliseconds to the power cap's steady state."""
    from torch.profiler import ProfilerActivity, profile, record_function

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from train_hf_parallel import chrome_trace, kernel_timeline, summarize_trace

    stage, pipe, data, dp_index, _, dp_group, optimizer, masters, _ = state
    ctx = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) if rank == 0 else contextlib.nullcontext()
    barrier()
    if cfg.idle_s > 0:  # a burst from a cool GPU, as the timed iterations were
        time.sleep(cfg.idle_s)
    wall = 0.0
    with ctx as prof:
        for k in range(iters):
            t0 = time.perf_counter()
            with record_function(f"{ITERATION_SPAN}{k}"):
                train_step(torch, stage, pipe, cfg, data, dp_index, dp_group, optimizer, masters)
                torch.cuda.synchronize(device)
            wall += time.perf_counter() - t0
    barrier()
    if rank != 0:
        return None
    trace = chrome_trace(prof)
    events = trace.get("traceEvents", [])
    spans = sorted([float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))] for e in events  # the host's span
                   if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                   and str(e.get("name", "")).startswith(ITERATION_SPAN))
    return {**summarize_trace(events, wall), "profiled_iterations": iters,
            "timeline": {**kernel_timeline(trace), "iterations": spans}}



def _time(torch, dist, cfg: Config, rank: int, device, warmup: int, iters: int, dump: str | None, state,
          barrier) -> dict:
    """``warmup + iters`` iterations of ``cfg`` on a built ``state``: the slowest rank's times, the
    peak memory and the first step's loss."""
    stage, pipe, data, dp_index, mp_index, dp_group, optimizer, masters, place = state
    cuda = device.type == "cuda"
    first_loss = None
    times = []
    course = []  # this rank's (start since the first iteration began, seconds) of every iteration, warm-up too
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    begin = None
    for it in range(warmup + iters):
        barrier()
        if it >= warmup and cfg.idle_s > 0:
            time.sleep(cfg.idle_s)
        t0 = time.perf_counter()
        begin = t0 if begin is None else begin
        loss = train_step(torch, stage, pipe, cfg, data, dp_index, dp_group, optimizer, masters)
        if cuda:
            torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        course.append((t0 - begin, dt))
        if it >= warmup:
            times.append(dt)
        if it == 0:
            first_loss = loss
            if dump:
                _dump(torch, dist, cfg, rank, place, stage, masters, loss, dump)
    # the iteration time is the slowest rank's; the loss lives on the last stage's first MP/DP rank
    t = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    mem = (torch.cuda.max_memory_allocated(device) if cuda else _rss_bytes()) / 2**30
    mt = torch.tensor([mem], dtype=torch.float64, device=device)
    dist.all_reduce(mt, op=dist.ReduceOp.MAX)
    lt = torch.tensor([float(first_loss) if first_loss is not None and dp_index == 0 and mp_index == 0 else 0.0],
                      dtype=torch.float64, device=device)
    dist.all_reduce(lt)
    times = [float(x) for x in t.cpu()]
    return {"rank": rank, "loss": float(lt.item()), "times": times, "max_mem_gib": float(mt.item()),
            "device": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__,
            "micro_batches": cfg.micro_batches, "course": course,
            "began_unix_s": time.time() - (time.perf_counter() - (begin or 0.0))}


def _rss_bytes() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0  # Linux reports KiB


def _dump(torch, dist, cfg, rank, place, stage, masters, loss, where) -> None:
    """This rank's parameters after the first step (fp32 masters when they exist) and loss."""
    s, j, k = place.coords(rank)
    names = list(stage.params)
    vals = masters if masters is not None else list(stage.params.values())
    state = {"coords": (s, j, k), "loss": None if loss is None else float(loss),
             "params": {n: v.detach().float().cpu().clone() for n, v in zip(names, vals, strict=True)}}
    Path(where).mkdir(parents=True, exist_ok=True)
    torch.save(state, Path(where) / f"rank{rank}.pt")


def append_row(path: str | os.PathLike, cfg: Config, result: dict) -> dict:
    times = result["times"]
    row = {"layout": cfg.layout, "pp": cfg.pp, "mp": cfg.mp, "dp": cfg.dp, "hidden": cfg.hidden,
           "heads": cfg.heads, "layers": cfg.layers, "seq": cfg.seq, "micro_batch": cfg.micro_batch,
           "micro_batches": cfg.micro_batches, "recompute": "full" if cfg.recompute else "none",
           "min_s": f"{min(times):.6f}", "median_s": f"{statistics.median(times):.6f}",
           "max_mem_gib": f"{result['max_mem_gib']:.3f}", "device": result["device"], "torch": result["torch"],
           "vocab": cfg.vocab}
    p = Path(path)
    new = not p.exists() or p.stat().st_size == 0
    if not new:
        with p.open(newline="") as fh:
            header = next(csv.reader(fh), [])
        if header != list(COLUMNS):
            raise ConfigError(str(p), f"header {','.join(header)} is not {','.join(COLUMNS)}; use another --out")
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        if new:
            w.writeheader()
        w.writerow(row)
    return row


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for k in ("pp", "mp", "dp"):
        p.add_argument(f"--{k}", type=int, default=1)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=50257, help="unpadded vocabulary (padded to 128*mp)")
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--micro-batches", type=int, default=8)
    p.add_argument("--recompute", action="store_true", help="full activation recompute of every layer")
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--dtype", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                   help="auto: bf16 on GPUs, fp32 on the CPU")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--adam-eps", type=float, default=1e-8)
    p.add_argument("--out", default=None, metavar="CSV", help=f"append the row here (e.g. {DEFAULT_OUT.name})")
    p.add_argument("--dump", default=None, metavar="DIR", help="save each rank's parameters after step 1")
    p.add_argument("--kernels", default=None, metavar="JSONL",
                   help="profile one more iteration (--profile-iters K: K more) on rank 0 (GPUs only) and append "
                        "its kernel seconds by category and the GPU's busy time to this file")
    p.add_argument("--profile-iters", type=int, default=1, metavar="K",
                   help="with --kernels: profile K iterations back to back (the summary covers all K, its wall "
                        "their sum)")
    p.add_argument("--timeline", default=None, metavar="JSONL",
                   help="with --kernels: append rank 0's kernel timeline of the profiled iterations (every "
                        "kernel's launch, start, duration and name; each iteration's span) to this file")
    p.add_argument("--idle-s", type=float, default=0.0,
                   help="idle seconds before each timed iteration: bursts from a cool GPU, not back-to-back load")
    p.add_argument("--course", default=None, metavar="JSONL",
                   help="append rank 0's time course (every iteration's start and seconds, warm-up included, and "
                        "the wall-clock start) to this file: the power cap's onset under this trainer's load")
    p.add_argument("--sweep-micro-batches", default="", metavar="M,M,...",
                   help="time the same model at each of these micro-batch counts in one launch (a row each; "
                        "the host-cost probe, validation/device/train3d_host.sh)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import torch
    except ImportError:
        print("error: PyTorch is not installed", file=sys.stderr)
        return 2
    try:
        backend = args.backend if args.backend != "auto" else ("nccl" if torch.cuda.is_available() else "gloo")
        dtype = args.dtype if args.dtype != "auto" else ("bf16" if backend == "nccl" else "fp32")
        if args.iters < 1 or args.warmup < 0:
            raise ConfigError("--iters", "need iters >= 1 and warmup >= 0")
        if not 1 <= args.profile_iters <= 64:
            raise ConfigError("--profile-iters", f"must be 1 to 64 iterations, got {args.profile_iters}")
        if args.timeline and not args.kernels:
            raise ConfigError("--timeline", "needs --kernels (the timeline is of the profiled iterations)")
        cfg = Config(pp=args.pp, mp=args.mp, dp=args.dp, hidden=args.hidden, heads=args.heads, layers=args.layers,
                     seq=args.seq, micro_batch=args.micro_batch, micro_batches=args.micro_batches, vocab=args.vocab,
                     recompute=args.recompute, dtype=dtype, seed=args.seed, lr=args.lr,
                     adam_eps=args.adam_eps, idle_s=args.idle_s)
        sweep = _counts(args.sweep_micro_batches)
        results = run(cfg, backend, args.warmup, args.iters, args.dump, sweep, kernels=args.kernels is not None,
                      profile_iters=args.profile_iters)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for result in results:
        if result["rank"] != 0:
            continue
        cfg_m = replace(cfg, micro_batches=result["micro_batches"])
        t = result["times"]
        print(f"{cfg_m.layout} d={cfg_m.hidden} L={cfg_m.layers} seq={cfg_m.seq} b={cfg_m.micro_batch} "
              f"m={cfg_m.micro_batches} recompute={cfg_m.recompute} {cfg_m.dtype}: loss {result['loss']:.6f}  "
              f"min {min(t):.4f} s  median {statistics.median(t):.4f} s  peak {result['max_mem_gib']:.2f} GiB",
              flush=True)
        if args.out:
            append_row(args.out, cfg_m, result)
        if args.course:
            with open(args.course, "a") as fh:
                fh.write(json.dumps({"layout": cfg_m.layout, "hidden": cfg_m.hidden, "heads": cfg_m.heads,
                                     "layers": cfg_m.layers, "seq": cfg_m.seq, "micro_batch": cfg_m.micro_batch,
                                     "micro_batches": cfg_m.micro_batches,
                                     "recompute": "full" if cfg_m.recompute else "none", "warmup": args.warmup,
                                     "device": result["device"],
                                     "began_unix_s": result["began_unix_s"], "course": result["course"]}) + "\n")
        if args.kernels and result.get("kernels"):
            key = {"layout": cfg_m.layout, "hidden": cfg_m.hidden, "layers": cfg_m.layers,
                   "micro_batch": cfg_m.micro_batch, "micro_batches": cfg_m.micro_batches,
                   "recompute": "full" if cfg_m.recompute else "none", "idle_s": cfg_m.idle_s}
            summary = dict(result["kernels"])
            timeline = summary.pop("timeline", None)
            with open(args.kernels, "a") as fh:
                fh.write(json.dumps({**key, **summary}) + "\n")
            if args.timeline and timeline is not None:
                with open(args.timeline, "a") as fh:
                    fh.write(json.dumps({**key, **timeline}) + "\n")
    return 0


def _counts(text: str) -> tuple[int, ...]:
    """``--sweep-micro-batches``: positive integers separated by commas (empty: no sweep)."""
    if not text.strip():
        return ()
    try:
        counts = tuple(int(x) for x in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise ConfigError("--sweep-micro-batches", f"expected positive integers separated by commas, got {text!r}")
    return counts


if __name__ == "__main__":
    from trainsim.calibration.collectives_bench import exit_skipping_teardown

    exit_skipping_teardown(main())
