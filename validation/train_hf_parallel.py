"""Hugging Face GPT-NeoX trained under PyTorch-native parallelism (DDP, DTensor TP, pipelining, FSDP2), timed.

One torchrun process group runs many (layout, shape) pairs in sequence, so process start-up and
NCCL initialisation are paid once. On a GPU host (multicast off, see docs/multi_gpu.md)::

    env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=. \\
      python -m torch.distributed.run --standalone --nproc-per-node 2 validation/train_hf_parallel.py \\
      --layouts dp2,tp2,pp2,fsdp2 --out validation/measured_hf_parallel.csv

(``--layouts 1gpu`` with ``--nproc-per-node 1``); on the CPU the same runs over gloo in fp32.

The workload is validation/train_gptneox.py's, per rank: ``GPTNeoXForCausalLM`` with random init
(``torch.manual_seed(0)`` before building, so identical on every rank), intermediate size 4d, the
default partial rotary (25 %) and parallel residual, SDPA attention, no dropout, no cache, untied
embeddings; fp32 parameters, compute under ``torch.autocast`` in bf16 (``--dtype fp32``: no
autocast); fused ``torch.optim.AdamW(lr=1e-4)`` on CUDA (the plain loop on the CPU). One iteration:
each data-parallel rank runs ``m`` micro-batches of ``b`` random sequences of length ``l``
(labels = inputs, the shifted causal-LM cross-entropy, mean over the micro-batch's tokens) and then
one optimizer step and ``zero_grad(set_to_none=True)``. The global batch is drawn once from a
seeded CPU generator; data-parallel rank ``r`` trains rows ``[r*m*b, (r+1)*m*b)``, micro-batch
``i`` rows ``i*b .. i*b+b`` of those.

Layouts (``--layouts``, comma-separated; a layout's GPU count must equal the world size):

* ``1gpu``: the plain model, ``model(input_ids=x, labels=x).loss.backward()`` per micro-batch.
* ``dpN``: ``DistributedDataParallel(bucket_cap_mb=25)``; ``no_sync()`` for micro-batches
  ``1..m-1``, the last one's backward overlaps the gradient all-reduce (averaged over ranks).
* ``tpN``: DTensor TP with ``parallelize_module`` and the Megatron plan (QKV and MLP-up
  column-parallel, attention-out and MLP-down row-parallel, vocabulary-parallel embedding and LM
  head, ``loss_parallel`` cross-entropy); LayerNorms replicated, no sequence parallelism. (In
  transformers 5.x the LM head of ``GPTNeoXForCausalLM`` is ``lm_head``, formerly ``embed_out``.)
  The optimizer gets one param group per kind of parameter (plain, DTensor per mesh): fused AdamW
  refuses a list mixing plain tensors and DTensors (:func:`optimizer_groups`).
* ``ppN``: ``torch.distributed.pipelining``, one stage per rank built from the HF model (torchtitan
  style), ``Schedule1F1B`` (``--schedule gpipe``: ``ScheduleGPipe``), ``n_microbatches = m``.
  Layer split: ``L // pp`` layers per stage, the ``L % pp`` remaining ones one each to the LAST
  stages (the first stage also holds the embedding, the last the final norm and LM head); the
  counts are recorded in ``stage_layers`` (e.g. ``2-3-3``).
* ``fsdpN``: FSDP2 ``fully_shard`` on every ``GPTNeoXLayer`` then on the root, default
  ``MixedPrecisionPolicy`` (fp32 all-gather and reduce-scatter) and ``reshard_after_forward``;
  gradients are reduce-scattered after every micro-batch's backward (no sync suppression,
  torchtitan's default).
* ``fsdpAxtpB`` and ``ppAxtpB``: torchtitan's 2D meshes (``init_device_mesh`` with dims
  ``("dp", "tp")`` or ``("pp", "tp")``, tp fastest): the TP plan on the "tp" sub-mesh, then
  ``fully_shard`` over "dp", or one TP-parallelised pipeline stage per "pp" coordinate. Each
  distinct mesh is created once per run and reused by later pairs (:meth:`Env.mesh` says why).

Gradient scale, as each API does it by default (so the layouts train the same model up to AdamW's
``eps``): ``1gpu``, ``tp`` sum the m micro-batch gradients; DDP and FSDP additionally average over
the data-parallel ranks; the pipelining schedules (``scale_grads=True``) divide the accumulated
gradients by ``m``. :func:`reference_step` reproduces each in one process for the tests.

Timing: per iteration barrier, CUDA synchronize, ``perf_counter``, the iteration, synchronize,
barrier, ``perf_counter`` on rank 0 (so the slowest rank's wall); ``--warmup`` untimed iterations
first; the row gives min and median over ``--iters`` (>= 8) and the peak
``max_memory_allocated`` over ranks. ``--kernels`` profiles one more iteration on rank 0 and
appends the CUDA kernel time by category to ``<out>.kernels.jsonl`` (``--kernels-all-ranks``: on
every rank, rank r > 0 into ``<out>.kernels.rank<r>.jsonl``, e.g. each pipeline stage's compute).
Rows already in ``--out`` are skipped, so an interrupted batch resumes.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import inspect
import json
import os
import re
import socket
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_SHAPES = Path(__file__).with_name("hf_parallel_shapes.csv")
DEFAULT_OUT = Path(__file__).with_name("measured_hf_parallel.csv")
VOCAB = 50432
SHAPE_COLUMNS = ("name", "hidden", "heads", "layers", "seq_len", "micro_batch", "micro_batches")
COLUMNS = ("layout", "world", "dp", "fsdp", "tp", "pp", "schedule", "name", "hidden", "heads", "layers", "seq_len",
           "micro_batch", "micro_batches", "vocab", "stage_layers", "p2p_dtype", "min_s", "median_s", "iters",
           "max_mem_gib", "loss", "device", "torch", "transformers", "nccl")
# what makes a row the same measurement (a resumed batch skips it)
KEY_COLUMNS = ("layout", "schedule", "name", "hidden", "heads", "layers", "seq_len", "micro_batch", "micro_batches",
               "vocab")
SCHEDULES = ("1f1b", "gpipe")
KERNEL_CATEGORIES = ("nccl_all_reduce", "nccl_all_gather", "nccl_reduce_scatter", "nccl_send_recv", "nccl_other",
                     "gemm", "attention", "elementwise_other")


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


# ----------------------------------------------------------------------------- layouts and shapes


@dataclass(frozen=True)
class Layout:
    """A parallel layout: degrees of DDP, FSDP, TP and PP (the ones not named are 1)."""

    name: str
    dp: int = 1
    fsdp: int = 1
    tp: int = 1
    pp: int = 1

    @property
    def world(self) -> int:
        return self.dp * self.fsdp * self.tp * self.pp

    @property
    def data_parallel(self) -> int:
        """Ranks that see different data (each trains m micro-batches of its own)."""
        return self.dp * self.fsdp


# the combinations of degrees this trainer implements, as the sorted tuple of their names
_COMBOS = {(), ("dp",), ("tp",), ("pp",), ("fsdp",), ("fsdp", "tp"), ("pp", "tp")}
_PART = re.compile(r"(dp|fsdp|tp|pp)([1-9][0-9]*)")


def parse_layout(name: str) -> Layout:
    """``1gpu``, ``dpN``, ``tpN``, ``ppN``, ``fsdpN``, ``fsdpAxtpB`` or ``ppAxtpB``."""
    if name == "1gpu":
        return Layout(name)
    degrees: dict[str, int] = {}
    for part in name.split("x"):
        m = _PART.fullmatch(part)
        if m is None or m.group(1) in degrees:
            raise UsageError(f"--layouts: cannot parse {name!r} (expected 1gpu, dpN, tpN, ppN, fsdpN, fsdpAxtpB, "
                             "ppAxtpB)")
        degrees[m.group(1)] = int(m.group(2))
    if tuple(sorted(degrees)) not in _COMBOS:
        raise UsageError(f"--layouts: {name!r} combines {'+'.join(degrees)}, not implemented (1gpu, dp, tp, pp, "
                         "fsdp, fsdp x tp, pp x tp)")
    return Layout(name, **degrees)


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    heads: int
    layers: int
    seq_len: int
    micro_batch: int
    micro_batches: int

    def check(self, layout: Layout, schedule: str) -> None:
        """Refuse a shape the layout cannot split."""
        if self.hidden % self.heads:
            raise UsageError(f"shape {self.name}: hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.heads % layout.tp:
            raise UsageError(f"shape {self.name}: heads {self.heads} are not divisible by tp {layout.tp}"
                             f" ({layout.name})")
        if self.layers < layout.pp:
            raise UsageError(f"shape {self.name}: {self.layers} layers cannot fill {layout.pp} stages"
                             f" ({layout.name})")
        if layout.pp > 1 and schedule == "1f1b" and self.micro_batches < layout.pp:  # Schedule1F1B refuses it
            raise UsageError(f"shape {self.name}: 1F1B needs micro_batches >= pp, got {self.micro_batches} < "
                             f"{layout.pp} ({layout.name})")


def read_shapes(path: str | os.PathLike, only: Sequence[str] | None = None) -> list[Shape]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != SHAPE_COLUMNS:
            raise UsageError(f"--shapes {path}: columns must be {','.join(SHAPE_COLUMNS)}")
        shapes = []
        for row in reader:
            try:
                vals = {k: int(row[k]) for k in SHAPE_COLUMNS[1:]}
            except (TypeError, ValueError):
                raise UsageError(f"--shapes {path}: row {row.get('name')!r} has a non-integer field") from None
            if min(vals.values()) < 1:
                raise UsageError(f"--shapes {path}: row {row['name']!r} has a field < 1")
            shapes.append(Shape(name=row["name"], **vals))
    if only:
        unknown = set(only) - {s.name for s in shapes}
        if unknown:
            raise UsageError(f"--only: no shape named {', '.join(sorted(unknown))} in {path}")
        shapes = [s for s in shapes if s.name in set(only)]
    return shapes


def stage_layer_counts(layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage: ``layers // pp`` each, the remainder one each to the last stages.

    The last stages take the extra layers because the first stage also runs the embedding and
    the last the LM head; with the vocabulary of 50k the head outweighs a layer at these widths,
    but we keep Megatron's plain rule of even splits (remainder at the end) rather than tune it.
    """
    base, extra = divmod(layers, pp)
    return [base + (1 if s >= pp - extra else 0) for s in range(pp)]


# ----------------------------------------------------------------------------- model, data and loss


def build_model(torch, shape: Shape, vocab: int, device):
    """The HF model, fp32, random init from ``torch.manual_seed(0)``: the same on every rank."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(vocab_size=vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
                        num_attention_heads=shape.heads, intermediate_size=4 * shape.hidden,
                        max_position_embeddings=max(shape.seq_len, 2048), hidden_dropout=0.0,
                        attention_dropout=0.0, use_cache=False, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with device:
        model = GPTNeoXForCausalLM(cfg)
    model.config._attn_implementation = "sdpa"
    model.train()
    assert next(model.parameters()).dtype == torch.float32
    return model


def global_batch(torch, shape: Shape, vocab: int, data_parallel: int):
    """Token ids of every data-parallel rank's m*b sequences, [dp*m*b, l], identical on every rank.

    Drawn on the CPU (a CUDA generator would give other numbers than the CPU reference).
    """
    gen = torch.Generator().manual_seed(1)
    n = data_parallel * shape.micro_batches * shape.micro_batch
    return torch.randint(0, vocab, (n, shape.seq_len), generator=gen)


def shifted_ce(logits, labels):
    """HF's causal-LM loss (``ForCausalLMLoss``) as it computes it: token t predicts t+1, mean over
    the b*(l-1) predictions. The labels are shifted (padded with the ignored index), not the logits:
    slicing the logits (``logits[:, :-1]``) copies them, strided, in the forward and again in the
    backward, b*(l-1)*v values each time, which the one-GPU, DDP and TP layouts (the model's own
    loss) never pay (measured on an H200 pair, 2026-11-28: 3.8-7.6 ms an iteration on the last
    stage; the pipelined rows measured before then carry it)."""
    import torch.nn.functional as F

    shifted = F.pad(labels, (0, 1), value=-100)[:, 1:]
    return F.cross_entropy(logits.flatten(0, 1).float(), shifted.flatten(), ignore_index=-100)


def tp_plan(layer_ids: Sequence[int], prefix: str, embed: str | None, head: str | None) -> dict:
    """The Megatron TP plan for GPT-NeoX's module names (``prefix`` before ``layers.<i>``)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    # GPT-NeoX's fused query_key_value output is laid out [heads, 3, head_dim] (the attention views
    # it as (..., -1, 3*head_size)), so splitting its columns in tp equal blocks gives every rank
    # whole heads with their q, k and v; transformers 5.17's GPTNeoXAttention infers the head count
    # from the tensor (-1 in the view, -1 in the final reshape), so no module attribute needs
    # adjusting for h/tp heads per rank.
    plan: dict = {}
    for i in layer_ids:
        plan[f"{prefix}layers.{i}.attention.query_key_value"] = ColwiseParallel()
        plan[f"{prefix}layers.{i}.attention.dense"] = RowwiseParallel()
        plan[f"{prefix}layers.{i}.mlp.dense_h_to_4h"] = ColwiseParallel()
        plan[f"{prefix}layers.{i}.mlp.dense_4h_to_h"] = RowwiseParallel()
    if embed is not None:  # vocabulary-parallel embedding (masked lookup + all-reduce)
        plan[embed] = RowwiseParallel(input_layouts=Replicate())
    if head is not None:  # logits stay sharded over the vocabulary for loss_parallel
        plan[head] = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
    return plan


def make_stage_module(torch, model, stage: int, counts: Sequence[int]):
    """One pipeline stage cut from the HF model, torchtitan style: only this stage's modules.

    The first stage holds ``embed_in``, the last ``final_layer_norm`` and ``lm_head``; layers
    keep their model index in a ``ModuleDict`` (so parameter names map back to the model's).
    Every stage owns a reference to the model's ``rotary_emb`` (a buffer only) and computes the
    cos/sin it needs from positions 0..l-1, as ``GPTNeoXModel.forward`` does.
    """
    nn = torch.nn
    first = sum(counts[:stage])
    ids = range(first, first + counts[stage])
    last = stage == len(counts) - 1

    class GPTNeoXStage(nn.Module):
        # the model is an argument, not a closure variable: a class body closing over it would keep
        # every other stage's layers alive for as long as the stage lives (+4 bytes per parameter of
        # the other stages, measured before 2026-11-26: validation/memory_timeline_h100_2gpu/)
        def __init__(self, model) -> None:
            super().__init__()
            self.embed_in = model.gpt_neox.embed_in if stage == 0 else None
            self.layers = nn.ModuleDict({str(i): model.gpt_neox.layers[i] for i in ids})
            self.final_layer_norm = model.gpt_neox.final_layer_norm if last else None
            self.lm_head = model.lm_head if last else None
            self.rotary_emb = model.gpt_neox.rotary_emb

        def forward(self, x):
            h = self.embed_in(x) if self.embed_in is not None else x
            pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
            cos_sin = self.rotary_emb(h, position_ids=pos)
            for layer in self.layers.values():
                # attention_mask=None: with SDPA and no padding the HF model passes None too
                # (is_causal=True in scaled_dot_product_attention)
                h = layer(h, attention_mask=None, position_embeddings=cos_sin)
            if self.lm_head is None:
                return h
            return self.lm_head(self.final_layer_norm(h))

    return GPTNeoXStage(model), list(ids)


def hf_name(stage_name: str) -> str:
    """A stage module's parameter name as the full model calls it."""
    return stage_name if stage_name.startswith("lm_head.") else f"gpt_neox.{stage_name}"


def optimizer_groups(params: Sequence) -> list[dict]:
    """The parameters in groups of one kind: plain tensors, and DTensors per device mesh.

    Without sequence parallelism the LayerNorm parameters stay plain tensors beside the TP
    DTensors (and under FSDP x TP they are DTensors on the dp mesh beside 2D ones); the foreach
    and fused AdamW kernels refuse such mixed lists ("got mixed torch.Tensor and DTensor"). One
    param group per kind, all with the same hyper-parameters, keeps the update identical.
    """
    from torch.distributed.tensor import DTensor

    groups: dict[object, list] = {}
    for p in params:
        key = id(p.device_mesh) if isinstance(p, DTensor) else None
        groups.setdefault(key, []).append(p)
    return [{"params": ps} for ps in groups.values()]


# ----------------------------------------------------------------------------- one (layout, shape) pair


@dataclass
class Env:
    """What the process knows about the distributed run."""

    torch: Any
    dist: Any
    rank: int
    world: int
    device: Any
    meshes: dict = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def barrier(self) -> None:
        if self.cuda:
            self.dist.barrier(device_ids=[self.device.index])
        else:
            self.dist.barrier()

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def timed_step(self, trainer: Trainer) -> tuple[float, Any]:
        """One iteration between barriers with the GPU drained on both sides: (the slowest rank's
        seconds, the step's result)."""
        self.barrier()
        self.sync()
        t0 = time.perf_counter()
        res = trainer.step()
        self.sync()
        self.barrier()
        return time.perf_counter() - t0, res

    def mesh(self, shape: tuple[int, ...], names: tuple[str, ...]):
        """The device mesh of this shape and dim names, created once per run and then reused.

        Not destroyed between pairs: DTensor caches sharding decisions keyed by specs whose meshes
        compare equal when their ranks and dim names agree (``("dp","tp")["tp"]`` equals
        ``("pp","tp")["tp"]``), so a later pair can be handed a spec that names an earlier pair's
        group; destroyed, that group fails to resolve ("Could not resolve the process group",
        seen on torch 2.13 + gloo). Kept, it is the same set of ranks and works, and NCCL
        communicators are set up once per distinct mesh rather than once per pair.
        """
        key = (shape, names)
        if key not in self.meshes:
            from torch.distributed.device_mesh import init_device_mesh

            self.meshes[key] = init_device_mesh(self.device.type, shape, mesh_dim_names=names)
        return self.meshes[key]


@dataclass
class Trainer:
    """A built layout: ``step()`` runs one iteration; the rest is for the row, the tests and cleanup."""

    step: Callable[[], tuple[float, int] | None]  # (sum of micro-batch losses, count) where this rank owns them
    named_params: Callable[[], Iterator[tuple[str, Any]]]  # full-model names
    schedule: str = "none"
    stage_layers: str = ""
    p2p_dtype: Callable[[], str] = lambda: "none"


def build_trainer(env: Env, layout: Layout, shape: Shape, args) -> Trainer:
    torch = env.torch
    model = build_model(torch, shape, args.vocab, env.device)
    m, b = shape.micro_batches, shape.micro_batch
    autocast = args.dtype == "bf16"

    def amp():
        return torch.autocast(env.device.type, dtype=torch.bfloat16, enabled=autocast)

    def make_opt(params):
        kw = {"fused": True} if env.cuda else {"foreach": False}
        return torch.optim.AdamW(optimizer_groups(list(params)), lr=args.lr, eps=args.adam_eps, **kw)

    mesh = None
    if layout.tp > 1 and (layout.fsdp > 1 or layout.pp > 1):
        mesh = env.mesh((layout.fsdp * layout.pp, layout.tp), ("dp" if layout.fsdp > 1 else "pp", "tp"))
    elif layout.tp > 1 or layout.fsdp > 1:
        mesh = env.mesh((layout.world,), ("tp" if layout.tp > 1 else "dp",))
    tp_mesh = mesh["tp"] if mesh is not None and layout.tp > 1 else None
    loss_ctx = contextlib.nullcontext
    if tp_mesh is not None:
        from torch.distributed.tensor.parallel import loss_parallel

        loss_ctx = loss_parallel

    # this rank's data: rows of its data-parallel index (the tp index does not change the data)
    dp_index = (env.rank // layout.tp) if layout.data_parallel > 1 else 0
    rows = global_batch(torch, shape, args.vocab, layout.data_parallel)[dp_index * m * b:(dp_index + 1) * m * b]
    batch = rows.to(env.device)

    if layout.pp > 1:
        return _pipeline_trainer(env, layout, shape, args, model, batch, amp, make_opt, tp_mesh, loss_ctx, mesh)

    from torch.distributed.tensor import DTensor

    if tp_mesh is not None:
        from torch.distributed.tensor.parallel import parallelize_module

        parallelize_module(model, tp_mesh,
                           tp_plan(range(shape.layers), "gpt_neox.", "gpt_neox.embed_in", "lm_head"))
    if layout.fsdp > 1:
        from torch.distributed.fsdp import fully_shard

        dp_mesh = mesh["dp"] if layout.tp > 1 else mesh
        for layer in model.gpt_neox.layers:
            fully_shard(layer, mesh=dp_mesh)
        fully_shard(model, mesh=dp_mesh)
    on_model = getattr(args, "on_model", None)  # a probe's hooks (validation/probe_tp_host_pace.py); None here
    if on_model is not None:
        on_model(model)
    net = model
    ddp = False
    # validation/probe_ddp.py's variants (absent in a measured run): DDP's keyword arguments, a comm hook,
    # no DDP at all (each rank trains alone: one GPU's work beside another), no no_sync
    if layout.dp > 1 and not getattr(args, "ddp_off", False):
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model, device_ids=[env.device.index] if env.cuda else None, bucket_cap_mb=25,
                  **(getattr(args, "ddp_kwargs", None) or {}))
        if getattr(args, "ddp_comm_hook", None) is not None:
            net.register_comm_hook(None, args.ddp_comm_hook)
        ddp = True
    sync_every = bool(getattr(args, "ddp_sync_every", False))
    opt = make_opt(model.parameters())
    micro = [batch[i * b:(i + 1) * b] for i in range(m)]

    # validation/probe_host_split.py's clock (None in a measured run): per micro-batch the host's
    # seconds to issue its forward and its backward, the GPU drained before ("before") or also
    # after each of them ("each"); per iteration the update's. Read at each call: the probe turns
    # it on after warm-up.
    # validation/probe_parallel_head_host.py's clock (None in a measured run): per micro-batch the
    # host's clock after the GPU is drained, after the loss's forward and after its backward
    def micro_step(x):
        phase_log, phase_sync = getattr(args, "phase_log", None), getattr(args, "phase_sync", "before")
        clock = getattr(args, "mb_clock", None)
        if phase_log is not None or clock is not None:
            env.sync()
            t0 = time.perf_counter()
        with loss_ctx():
            with amp():
                if tp_mesh is not None:  # sharded logits: the cross-entropy under loss_parallel
                    loss = shifted_ce(net(input_ids=x).logits, x)
                else:
                    loss = net(input_ids=x, labels=x).loss
            if phase_log is not None or clock is not None:
                if phase_sync == "each" and phase_log is not None:
                    env.sync()
                t1 = time.perf_counter()
            loss.backward()  # inside loss_parallel, as its docs require
        if clock is not None:
            clock.append((t0, t1, time.perf_counter()))
        if phase_log is not None:
            if phase_sync == "each":
                env.sync()
            phase_log.append(("mb", t1 - t0, time.perf_counter() - t1))
        return loss.detach()

    def step():
        losses = []
        phase_log, phase_sync = getattr(args, "phase_log", None), getattr(args, "phase_sync", "before")
        for i, x in enumerate(micro):
            # DDP: skip the all-reduce for all but the last micro-batch; its backward overlaps it
            sync = contextlib.nullcontext() if not ddp or sync_every or i == m - 1 else net.no_sync()
            with sync:
                losses.append(micro_step(x))
        if phase_log is not None:
            env.sync()
            t0 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if phase_log is not None:
            if phase_sync == "each":
                env.sync()
            phase_log.append(("update", time.perf_counter() - t0, 0.0))
        owner = tp_mesh is None or tp_mesh.get_local_rank() == 0
        if not owner:
            return None
        total = torch.stack([t.full_tensor() if isinstance(t, DTensor) else t for t in losses]).sum()
        return float(total), m

    return Trainer(step=step, named_params=model.named_parameters, stage_layers=str(shape.layers))


def _pipeline_trainer(env: Env, layout: Layout, shape: Shape, args, model, batch, amp, make_opt, tp_mesh,
                      loss_ctx, mesh) -> Trainer:
    torch = env.torch
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    counts = stage_layer_counts(shape.layers, layout.pp)
    stage_index = env.rank // layout.tp  # tp fastest
    module, ids = make_stage_module(torch, model, stage_index, counts)
    del model  # the other stages' layers are freed with it
    last = stage_index == layout.pp - 1
    if tp_mesh is not None:
        from torch.distributed.tensor.parallel import parallelize_module

        parallelize_module(module, tp_mesh, tp_plan(ids, "", "embed_in" if stage_index == 0 else None,
                                                     "lm_head" if last else None))
    pp_group = mesh["pp"].get_group() if mesh is not None else None  # None: the world
    on_stage = getattr(args, "on_stage", None)  # a probe's hooks (validation/probe_parallel_head_host.py)
    loss_fn = shifted_ce if on_stage is None else on_stage(module, stage_index, last, shifted_ce)
    stage = PipelineStage(module, stage_index, layout.pp, env.device, group=pp_group)
    schedule_cls = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
    # scale_grads=True (the default): after the last backward the schedule divides every
    # accumulated gradient by n_microbatches, i.e. the loss is the MEAN over micro-batches, while
    # the other layouts here (like train_gptneox.py) SUM the micro-batch gradients; AdamW makes
    # the two nearly the same update (they differ only through eps).
    schedule = schedule_cls(stage, n_microbatches=shape.micro_batches, loss_fn=loss_fn)
    opt = make_opt(module.parameters())
    # step(return_outputs=False) keeps the last stage from concatenating every micro-batch's
    # logits after the step (work no training loop needs); older torch has no such argument
    no_outputs = {"return_outputs": False} if "return_outputs" in inspect.signature(schedule.step).parameters else {}
    seen_dtype: list[str] = []

    def record_dtype(_mod, _inp, out) -> None:  # what crosses to the next stage, as it leaves this one
        if not seen_dtype:
            seen_dtype.append(str(out.dtype).replace("torch.", ""))

    hook = module.register_forward_hook(record_dtype) if not last else None

    def step():
        losses: list = []
        # the whole pipeline step under autocast (forward of every micro-batch happens inside;
        # backward ignores the autocast state) and under loss_parallel when the logits are sharded
        with loss_ctx(), amp():
            if stage_index == 0:
                schedule.step(batch, **no_outputs)
            elif last:
                schedule.step(target=batch, losses=losses, **no_outputs)
            else:
                schedule.step(**no_outputs)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if hook is not None and seen_dtype:
            hook.remove()
        if not last or (tp_mesh is not None and tp_mesh.get_local_rank() != 0):
            return None
        vals = [t.full_tensor() if hasattr(t, "full_tensor") else t for t in losses]
        return float(torch.stack([v.detach() for v in vals]).sum()), len(vals)

    def named():
        for name, p in module.named_parameters():
            yield hf_name(name), p

    def p2p_dtype() -> str:
        return seen_dtype[0] if seen_dtype else "none"

    return Trainer(step=step, named_params=named, schedule=args.schedule, stage_layers="-".join(map(str, counts)),
                   p2p_dtype=p2p_dtype)


# ----------------------------------------------------------------------------- timing one pair


def run_pair(env: Env, layout: Layout, shape: Shape, args) -> dict:
    """Build, warm up, time; returns the row (on every rank; rank 0 writes it) and the kernel profile.

    Out of memory is re-raised after the pair's groups are released (the caller skips the pair);
    any other error is printed here, at once, and re-raised without the closing barrier: the
    other ranks then wait in a collective, and the failing process' exit is what makes torchrun
    stop them.
    """
    trainer: Trainer | None = None
    try:
        trainer = build_trainer(env, layout, shape, args)
        result = _measure(env, trainer, layout, shape, args)
    except env.torch.OutOfMemoryError:
        env.barrier()  # the caller frees the memory once the exception (and the frames it holds) is gone
        raise
    except Exception:
        traceback.print_exc()
        print(f"rank {env.rank}: {layout.name} {shape.name} failed", file=sys.stderr, flush=True)
        raise
    trainer = None  # the model, optimizer, DDP/FSDP/pipeline state live in its closures
    env.barrier()  # every rank done with the pair before the next one starts
    free_memory(env)
    return result


def free_memory(env: Env) -> None:
    """Collect what the last pair left (DDP and FSDP hold reference cycles) and return cached GPU memory."""
    gc.collect()
    if env.cuda:
        env.torch.cuda.empty_cache()


def _measure(env: Env, trainer: Trainer, layout: Layout, shape: Shape, args) -> dict:
    torch, dist = env.torch, env.dist
    if env.cuda:
        torch.cuda.reset_peak_memory_stats(env.device)
    times: list[float] = []
    first = None
    for it in range(args.warmup + args.iters):
        dt, res = env.timed_step(trainer)
        if it == 0:
            first = res
            if args.dump:
                _dump(env, trainer, layout, shape, res, args.dump)
        if it >= args.warmup:
            times.append(dt)
    kernels = None
    if args.kernels or args.kernels_all_ranks or args.timeline:
        tl = None
        if args.timeline:  # every rank's kernels with their launch times, for the ranks' skew
            tl = (f"{args.out}.timeline.rank{env.rank}.jsonl", {"layout": layout.name, "name": shape.name,
                                                                 "rank": env.rank})
        kernels = _profile(env, trainer, args.kernels_all_ranks or args.timeline, tl)
    # the first iteration's mean micro-batch loss over its owners (the same model and data in every layout)
    lt = torch.tensor([first[0], first[1]] if first else [0.0, 0.0], dtype=torch.float64, device=env.device)
    dist.all_reduce(lt)
    mem = (torch.cuda.max_memory_allocated(env.device) if env.cuda else _rss_bytes()) / 2**30
    mt = torch.tensor([mem], dtype=torch.float64, device=env.device)
    dist.all_reduce(mt, op=dist.ReduceOp.MAX)
    p2p = trainer.p2p_dtype()
    if layout.pp > 1:  # the dtype is seen on the first stage (rank 0 in tp-fastest order)
        obj = [p2p]
        dist.broadcast_object_list(obj, src=0)
        p2p = obj[0]
    row = _row(env, layout, shape, args, trainer, times, float(mt.item()), float(lt[0] / lt[1]), p2p)
    return {"row": row, "kernels": kernels}


def _row(env: Env, layout, shape, args, trainer, times, mem_gib, loss, p2p) -> dict:
    import transformers

    torch = env.torch
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if env.cuda else "none"
    return {"layout": layout.name, "world": layout.world, "dp": layout.dp, "fsdp": layout.fsdp, "tp": layout.tp,
            "pp": layout.pp, "schedule": trainer.schedule, "name": shape.name, "hidden": shape.hidden,
            "heads": shape.heads, "layers": shape.layers, "seq_len": shape.seq_len, "micro_batch": shape.micro_batch,
            "micro_batches": shape.micro_batches, "vocab": args.vocab, "stage_layers": trainer.stage_layers,
            "p2p_dtype": p2p, "min_s": f"{min(times):.6f}", "median_s": f"{statistics.median(times):.6f}",
            "iters": len(times), "max_mem_gib": f"{mem_gib:.3f}", "loss": f"{loss:.6f}",
            "device": torch.cuda.get_device_name(env.device) if env.cuda else "cpu", "torch": torch.__version__,
            "transformers": transformers.__version__, "nccl": nccl}


def _rss_bytes() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0  # Linux reports KiB


def _dump(env: Env, trainer: Trainer, layout: Layout, shape: Shape, res, where: str) -> None:
    """Every rank's parameters after the first step as full tensors, and its loss (for the tests)."""
    params = {}
    for name, p in trainer.named_params():  # the same order on every rank: full_tensor() is a collective
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        params[name] = t.detach().float().cpu().clone()
    state = {"rank": env.rank, "loss": None if res is None else res[0] / res[1], "params": params}
    d = Path(where) / f"{layout.name}-{shape.name}"
    d.mkdir(parents=True, exist_ok=True)
    env.torch.save(state, d / f"rank{env.rank}.pt")


# ----------------------------------------------------------------------------- kernel profile


def kernel_category(name: str) -> str:
    """The category of a CUDA kernel, from its name."""
    n = name.lower()
    if "nccl" in n:
        for key, cat in (("allreduce", "nccl_all_reduce"), ("allgather", "nccl_all_gather"),
                         ("reducescatter", "nccl_reduce_scatter"), ("sendrecv", "nccl_send_recv"),
                         ("send", "nccl_send_recv"), ("recv", "nccl_send_recv")):
            if key in n.replace("_", ""):
                return cat
        return "nccl_other"
    if any(k in n for k in ("flash", "fmha", "efficient_attention", "attention", "sdpa")):
        return "attention"
    if any(k in n for k in ("gemm", "cutlass", "xmma", "nvjet", "cublas", "splitk", "matmul")):
        return "gemm"
    return "elementwise_other"


TOP_KERNELS = 40  # the kernels that take the most time, by name, so a miss can be traced to an operator
TOP_KERNEL_NAME_CHARS = 160
TOP_GAPS = 16
GAP_MIN_S = 10e-6  # shorter idle between kernels is the launch pipeline's own


def summarize_trace(events: Sequence[dict], wall_s: float) -> dict:
    """Kernel seconds by category, the device's busy time (union of kernel intervals) and the wall.

    ``top_kernels``: the ``TOP_KERNELS`` kernel names with the most time, ``[name, seconds, count]``;
    ``span_s`` (first kernel's start to last one's end), ``idle_in_span_s`` (the span less the busy
    time) and ``top_gaps`` (:func:`idle_gaps`).

    ``wall_s - busy_s`` is time the GPU ran no kernel at all: launch gaps, host-side DTensor /
    pipelining work, waiting for peers; ``busy_s - compute_busy_s`` approximates exposed NCCL.
    """
    # (start s, duration s, name, correlation id), in start order
    kernels = sorted((float(e["ts"]) * 1e-6, float(e.get("dur", 0.0)) * 1e-6, str(e.get("name", "")),
                      (e.get("args") or {}).get("correlation"))
                     for e in events if e.get("cat") == "kernel" and e.get("ph") == "X")
    by_cat = dict.fromkeys(KERNEL_CATEGORIES, 0.0)
    by_name: dict[str, list[float]] = {}
    spans, compute = [], []
    for start, dur, name, _ in kernels:
        cat = kernel_category(name)
        by_cat[cat] += dur
        tally = by_name.setdefault(name[:TOP_KERNEL_NAME_CHARS], [0.0, 0])
        tally[0] += dur
        tally[1] += 1
        spans.append((start, start + dur))
        if not cat.startswith("nccl"):
            compute.append((start, start + dur))
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:TOP_KERNELS]
    busy = _union(spans)
    span = max(b for _, b in spans) - spans[0][0] if spans else 0.0
    return {"wall_s": wall_s, "busy_s": busy, "compute_busy_s": _union(compute), "kernels": len(spans),
            **{f"{k}_s": v for k, v in by_cat.items()},
            "top_kernels": [[name, secs, int(count)] for name, (secs, count) in top],
            "span_s": span, "idle_in_span_s": span - busy, "top_gaps": idle_gaps(kernels, events)}


def idle_gaps(kernels: Sequence[tuple[float, float, str, Any]], events: Sequence[dict]) -> list[list]:
    """The ``TOP_GAPS`` longest stretches with no kernel running between the first kernel and the
    last (``kernels`` as :func:`summarize_trace` lists them, in start order), each ``[offset_s, gap_s,
    kernel before, kernel after, launch_lag_s, blocking host calls]``: ``launch_lag_s`` is when the
    kernel after the gap was launched, from the gap's start (near the gap's length: the host was
    late), and the host calls are the CUDA runtime calls in ``events`` that cover over half the gap
    (a synchronisation)."""
    if not kernels:
        return []
    runtime = [(float(e["ts"]) * 1e-6, float(e.get("dur", 0.0)) * 1e-6, str(e.get("name", "")),
                (e.get("args") or {}).get("correlation"))
               for e in events if e.get("cat") == "cuda_runtime" and e.get("ph") == "X"]
    launched = {corr: ts for ts, _, _, corr in runtime if corr is not None}
    first, end, before = kernels[0][0], kernels[0][0] + kernels[0][1], kernels[0][2]
    gaps = []
    for ts, dur, name, corr in kernels:
        if ts > end + GAP_MIN_S:
            lag = launched[corr] - end if corr in launched else None
            blocking = sorted({n for rts, rdur, n, _ in runtime
                               if min(rts + rdur, ts) - max(rts, end) > 0.5 * (ts - end)})
            gaps.append([end - first, ts - end, before[:80], name[:80], lag, blocking])
        if ts + dur > end:
            end, before = ts + dur, name
    return sorted(gaps, key=lambda g: -g[1])[:TOP_GAPS]


def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _profile(env: Env, trainer: Trainer, every_rank: bool = False,
             timeline: tuple[str, dict] | None = None) -> dict | None:
    """One more iteration, profiled on rank 0 (the others run it plainly), or on every rank.
    ``timeline``: (path, key) to append this rank's :func:`kernel_timeline` to, as one JSON line."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if env.cuda else [])
    mine = every_rank or env.rank == 0
    ctx = profile(activities=acts) if mine else contextlib.nullcontext()
    with ctx as prof:
        wall, _ = env.timed_step(trainer)
    if not mine:
        return None
    trace = chrome_trace(prof)
    if timeline is not None:
        with open(timeline[0], "a") as fh:
            fh.write(json.dumps({**timeline[1], "wall_s": wall, **kernel_timeline(trace)}) + "\n")
    return summarize_trace(trace.get("traceEvents", []), wall)


def chrome_trace(prof) -> dict:
    """A finished ``torch.profiler`` run's Chrome trace, as a dict."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())


def summarize_profile(prof, wall_s: float) -> dict:
    """:func:`summarize_trace` of a finished ``torch.profiler`` run (through its Chrome trace)."""
    return summarize_trace(chrome_trace(prof).get("traceEvents", []), wall_s)


TIMELINE_NAME_CHARS = 72


def kernel_timeline(trace: dict) -> dict:
    """Every kernel of a Chrome trace in start order as ``[launch_us, start_us, dur_us, name]``:
    ``launch_us`` is the start of the CUDA runtime or driver call that launched it (``None`` when the trace
    has no such call), times in microseconds from ``base_ns`` (the trace's ``baseTimeNanoseconds``,
    the same clock in every process of one host, so ranks can be laid side by side)."""
    events = trace.get("traceEvents", [])
    launched = {(e.get("args") or {}).get("correlation"): float(e["ts"])
                for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("ph") == "X"}
    rows = [[launched.get((e.get("args") or {}).get("correlation")), float(e["ts"]),
             float(e.get("dur", 0.0)), str(e.get("name", ""))[:TIMELINE_NAME_CHARS]]
            for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    rows.sort(key=lambda r: r[1])
    return {"base_ns": trace.get("baseTimeNanoseconds"), "kernels": rows}


# ----------------------------------------------------------------------------- output


def append_kernels(out: Path, rank: int, key: dict[str, str], kernels: dict) -> None:
    """A profiled pair's kernel summary: rank 0's into ``<out>.kernels.jsonl``, rank r's (with
    ``--kernels-all-ranks``) into ``<out>.kernels.rank<r>.jsonl`` with its ``rank``."""
    path, tag = (f"{out}.kernels.jsonl", {}) if rank == 0 else (f"{out}.kernels.rank{rank}.jsonl", {"rank": rank})
    with open(path, "a") as fh:
        fh.write(json.dumps({**key, **tag, **kernels}) + "\n")


def done_keys(path: Path) -> set[tuple[str, ...]]:
    if not path.exists() or path.stat().st_size == 0:
        return set()
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise UsageError(f"--out {path}: header is not {','.join(COLUMNS)}; use another --out")
        return {tuple(str(r[k]) for k in KEY_COLUMNS) for r in reader}


def row_key(layout: Layout, shape: Shape, schedule: str, vocab: int) -> tuple[str, ...]:
    vals = {"layout": layout.name, "schedule": schedule if layout.pp > 1 else "none", "vocab": vocab,
            **{k: getattr(shape, k) for k in SHAPE_COLUMNS}}
    return tuple(str(vals[k]) for k in KEY_COLUMNS)


def append_row(path: Path, row: dict) -> None:
    new = not path.exists() or path.stat().st_size == 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        if new:
            w.writeheader()
        w.writerow(row)


def print_table(rows: Sequence[dict]) -> None:
    head = ("layout", "shape", "stages", "min_s", "median_s", "mem_gib", "loss")
    lines = [head] + [(r["layout"] + (f"/{r['schedule']}" if r["schedule"] != "none" else ""), r["name"],
                       r["stage_layers"], r["min_s"], r["median_s"], r["max_mem_gib"], r["loss"]) for r in rows]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    for line in lines:
        print("  ".join(str(v).ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())


# ----------------------------------------------------------------------------- single-process reference


def reference_step(shape: Shape, layout: Layout, vocab: int, lr: float = 1e-4, adam_eps: float = 1e-8):
    """One fp32 step of the same model on the layout's whole global batch, in one process, no parallelism.

    The gradient is the layout's: the sum over every data-parallel rank's m micro-batch mean
    losses, divided by the data-parallel degree (DDP's and FSDP's averaging) and, for pipeline
    layouts, by m (the schedule's ``scale_grads``). Uses HF's own loss (``labels=``) and plain
    ``torch.optim.AdamW``. Returns (mean micro-batch loss, {parameter name: updated tensor}).
    """
    import torch

    cpu = torch.device("cpu")
    model = build_model(torch, shape, vocab, cpu)
    m, b = shape.micro_batches, shape.micro_batch
    data = global_batch(torch, shape, vocab, layout.data_parallel)
    scale = 1.0 / layout.data_parallel / (m if layout.pp > 1 else 1)
    losses = []
    for i in range(0, data.shape[0], b):
        x = data[i:i + b]
        loss = model(input_ids=x, labels=x).loss
        (loss * scale).backward()
        losses.append(float(loss.detach()))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, eps=adam_eps, foreach=False)
    opt.step()
    return sum(losses) / len(losses), {n: p.detach().clone() for n, p in model.named_parameters()}


# ----------------------------------------------------------------------------- driver


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layouts", required=True, help="comma-separated: 1gpu, dpN, tpN, ppN, fsdpN, fsdpAxtpB, ppAxtpB")
    p.add_argument("--shapes", default=str(DEFAULT_SHAPES), metavar="CSV")
    p.add_argument("--only", default=None, metavar="NAMES", help="comma-separated shape names")
    p.add_argument("--schedule", choices=SCHEDULES, default="1f1b", help="pipeline schedule of pp layouts")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--out", default=str(DEFAULT_OUT), metavar="CSV", help="append one row per (layout, shape)")
    p.add_argument("--time-budget", type=float, default=None, metavar="S", help="start no new pair after S seconds")
    p.add_argument("--kernels", action="store_true", help="profile one more iteration: <out>.kernels.jsonl")
    p.add_argument("--kernels-all-ranks", action="store_true",
                   help="profile it on every rank: rank 0 as --kernels, rank r into <out>.kernels.rank<r>.jsonl")
    p.add_argument("--timeline", action="store_true",
                   help="profile one more iteration on every rank and append each rank's kernels with their "
                        "launch times to <out>.timeline.rank<r>.jsonl")
    p.add_argument("--dtype", choices=("auto", "bf16", "fp32"), default="auto",
                   help="bf16: autocast (auto on GPUs); fp32: no autocast (auto on the CPU)")
    p.add_argument("--vocab", type=int, default=VOCAB)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--adam-eps", type=float, default=1e-8)
    p.add_argument("--dump", default=None, metavar="DIR", help="save every rank's parameters after iteration 1")
    return p


def _check_args(args, world: int) -> tuple[list[Layout], list[Shape]]:
    if args.iters < 8:
        raise UsageError(f"--iters must be >= 8 (the protocol's minimum), got {args.iters}")
    if args.warmup < 0 or args.vocab < 2:
        raise UsageError("need --warmup >= 0 and --vocab >= 2")
    layouts = [parse_layout(n) for n in args.layouts.split(",") if n]
    if not layouts:
        raise UsageError("--layouts is empty")
    for lay in layouts:
        if lay.world != world:
            raise UsageError(f"--layouts: {lay.name} needs {lay.world} GPUs but the world has {world} processes")
    if not Path(args.shapes).is_file():
        raise UsageError(f"--shapes {args.shapes}: no such file")
    shapes = read_shapes(args.shapes, args.only.split(",") if args.only else None)
    for lay in layouts:
        for s in shapes:
            s.check(lay, args.schedule)
    if any(lay.tp > 1 for lay in layouts) and args.vocab % max(lay.tp for lay in layouts):
        raise UsageError(f"--vocab {args.vocab} is not divisible by the tp degree")
    done_keys(Path(args.out))  # a wrong header is refused before any work
    return layouts, shapes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    try:
        layouts, shapes = _check_args(args, world)
    except UsageError as e:
        if rank == 0:
            print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        import torch
        import torch.distributed as dist
        import transformers  # noqa: F401  (fail here, not in the first pair)
    except ImportError as e:
        if rank == 0:
            print(f"error: {e.name} is not installed", file=sys.stderr)
        return 2
    from trainsim.calibration.collectives_bench import ensure_multicast_off

    ensure_multicast_off()  # before init_process_group: NCCL reads it at communicator creation
    if "MASTER_ADDR" not in os.environ:  # a plain one-process run (1gpu without torchrun)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1")
    cuda = torch.cuda.is_available()
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if args.dtype == "auto":
        args.dtype = "bf16" if cuda else "fp32"
    dist.init_process_group("nccl" if cuda else "gloo")
    env = Env(torch, dist, dist.get_rank(), dist.get_world_size(), device)
    out = Path(args.out)
    try:
        plan = [(lay, s) for s in shapes for lay in layouts]
        if env.rank == 0:  # rank 0 decides (it alone writes the CSV); everyone follows
            done = done_keys(out)
            todo = [row_key(lay, s, args.schedule, args.vocab) not in done for lay, s in plan]
        else:
            todo = []
        obj = [todo]
        dist.broadcast_object_list(obj, src=0)
        todo = obj[0]
        t0 = time.monotonic()
        rows: list[dict] = []
        for (lay, s), needed in zip(plan, todo, strict=True):
            if not needed:
                continue
            go = torch.tensor([1 if args.time_budget is None or time.monotonic() - t0 < args.time_budget else 0],
                              device=device)
            dist.broadcast(go, src=0)
            if not go.item():
                if env.rank == 0:
                    print("time budget spent; rerun the same command to resume", file=sys.stderr, flush=True)
                break
            res = None
            try:
                res = run_pair(env, lay, s, args)
            except torch.OutOfMemoryError:
                # a symmetric layout runs out of memory on every rank at the same point; an
                # asymmetric one (pp) can leave the others waiting in a collective (see the device script)
                print(f"rank {env.rank}: {lay.name} {s.name}: out of memory, pair skipped", file=sys.stderr,
                      flush=True)
            if res is None:
                free_memory(env)  # here, after the except block let go of the exception's frames
                continue
            if res["kernels"] is not None:  # the ranks that profiled (rank 0, or every one)
                append_kernels(out, env.rank, {"layout": lay.name, "schedule": res["row"]["schedule"], "name": s.name},
                               res["kernels"])
            if env.rank == 0:
                append_row(out, res["row"])
                rows.append(res["row"])
                r = res["row"]
                print(f"{lay.name} {s.name}: min {r['min_s']} s, median {r['median_s']} s, "
                      f"peak {r['max_mem_gib']} GiB, loss {r['loss']}", flush=True)
        env.barrier()  # every rank done before any tears down: gloo aborts a process whose peer closed first
        if env.rank == 0 and rows:
            print_table(rows)
        return 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    from trainsim.calibration.collectives_bench import exit_skipping_teardown

    exit_skipping_teardown(main())
