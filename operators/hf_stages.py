"""framework "hf": Hugging Face GPT-NeoX under PyTorch-native parallelism.

What ``validation/train_gptneox.py`` (one GPU) and ``validation/train_hf_parallel.py`` (several)
run, stage by stage and rank by rank:

* the model: ``GPTNeoXForCausalLM``, fp32 weights under ``torch.autocast(bf16)``, parallel
  residual, untied embeddings, fused AdamW (:class:`OpKind` ``hf_*`` kinds measure that exact code);
* ``mp`` > 1 = DTensor tensor parallelism with the Megatron plan: column-parallel QKV, MLP-up and
  LM head, row-parallel attention output and MLP-down, vocabulary-parallel embedding, the loss
  under ``loss_parallel``. The collectives that follow (per micro-batch):

  - forward: 2 all-reduces per layer of the row-parallel bf16 outputs (b*l*d), 1 of the
    embedding's fp32 partial output (the fp32 weight makes it fp32), 3 of b*l fp32 values in the
    vocab-parallel cross-entropy (max, sum of exponentials, target logit);
  - backward: 2 per layer of the fp32 gradients of the column-parallel inputs (the LayerNorm
    outputs are fp32; autocast casts the gradient back before DTensor's Replicate boundary
    reduces it) and 1 for the LM head's input;

* ``pp`` > 1 = ``torch.distributed.pipelining`` (1F1B or GPipe): equal layers per stage, the
  remainder on the last stages, embedding on the first and norm, head and loss on the last;
  activations cross stages as the fp32 residual stream; after the last micro-batch the schedule
  divides every gradient by m (``scale_grads``);
* ``dp`` > 1 = DDP: fp32 gradients in 25 MiB buckets (the first 1 MiB) in reverse parameter
  order, all-reduced while the last micro-batch's backward runs (``no_sync`` before it); DDP
  copies the gradients into its buckets and back;
* ``dp`` > 1 with ``training.zero_stage: 3`` = FSDP2 (``fully_shard`` on every layer and on the
  root, default policy: fp32 all-gathers and reduce-scatters, ``reshard_after_forward``, no sync
  suppression between micro-batches, as torchtitan trains): each rank keeps 1/dp of every
  parameter, gradient and optimizer state; per micro-batch every unit is all-gathered for its
  forward and again for its backward and its gradients reduce-scattered (sim.costs prices how
  much of that the prefetching hides).

Memory-bound passes over the gradients are priced at the rate of the measured fp32 gradient
accumulation (``hf_grad_accum``: read two gradients, write one, 12 bytes per parameter) per byte
they move: the pipelining schedule's division by m as one such pass; DDP's two copies, the
gradients into the buckets scaled by 1/dp (``mul_out``: PyTorch's reducer fuses the division
into the copy when no comm hook is registered) and, after the all-reduce, the buckets back into
the gradients, 8 bytes per parameter each, as 16/12 of a pass (``DDP_COPY_PASSES``). Measured by
validation/probe_ddp.py on 2 H100s (d3072-L8, 1.2 B parameters): DDP with a no-op comm hook,
which keeps both copies, is 6.7 ms slower than no DDP (16 bytes per parameter at ~3 TB/s is
6.4 ms); with ``gradient_as_bucket_view`` (no copies) 4 ms faster than DDP.
"""

from __future__ import annotations

from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Op, OpKind
from trainsim.operators.partition import padded_vocab, stage_role
from trainsim.operators.spec import Mlp, ModelSpec, Parallelism, Position, Recompute, Schedule, Split, TrainingSpec
from trainsim.operators.stages import DPBuckets, FSDPUnits, GradSegment, StagePlan, counted, merge

MIB = 2**20
DDP_FIRST_BUCKET_BYTES = 1 * MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
DDP_BUCKET_BYTES = 25 * MIB  # DistributedDataParallel(bucket_cap_mb=25), the default
#: DDP's copy into the buckets and back, 8 bytes per parameter each, in 12-byte accumulation passes
DDP_COPY_PASSES = 2 * 8 / 12
FP32_ENTRIES = 2  # an fp32 value is two of the 2-byte entries collectives are counted in
LOSS_PARALLEL_ALLREDUCES = 3  # max, sum of exponentials, target logit


#: the kinds after which a layer's MP all-reduces run (once per layer; the others once per stage)
_LAYER_MP_KINDS = frozenset({OpKind.HF_DENSE, OpKind.HF_MLP_DOWN, OpKind.HF_QKV, OpKind.HF_MLP_UP})


def _per_micro_batch(issue_mp: list[tuple[str, OpKind, int, int]], layers: int,
                     passes: tuple[str, ...]) -> list[tuple[int, int]]:
    """(entries, count) of the MP all-reduces of ``passes`` per micro-batch, from the issue order."""
    out: dict[int, int] = {}
    for pass_, kind, entries, count in issue_mp:
        if pass_ in passes:
            out[entries] = out.get(entries, 0) + count * (layers if kind in _LAYER_MP_KINDS else 1)
    return list(out.items())


def hf_stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage: equal, the remainder one each on the last stages."""
    if pp > layers:
        raise ConfigError("parallelism.pp", f"{pp} stages for {layers} layers: more stages than layers")
    base, extra = divmod(layers, pp)
    return tuple(base + (1 if s >= pp - extra else 0) for s in range(pp))


def _ffn_field(model: ModelSpec) -> int:
    return model.ffn if model.ffn != 4 * model.hidden else 0


def hf_encoder_ops(model: ModelSpec, b: int, mp: int = 1) -> list[Op]:
    """One Hugging Face GPTNeoXLayer (parallel residual) on one tensor-parallel rank, in execution order."""
    d, h, l, f = model.hidden, model.heads, model.seq_len, _ffn_field(model)

    def op(kind: OpKind) -> Op:
        return Op(kind, b=b, l=l, d=d, h=h, f=f, mp=1 if kind in _WHOLE else mp)

    norm = op(OpKind.HF_LAYERNORM)
    return [norm, op(OpKind.HF_QKV), op(OpKind.HF_ATTENTION), op(OpKind.HF_DENSE),
            norm, op(OpKind.HF_MLP_UP), op(OpKind.GELU), op(OpKind.HF_MLP_DOWN), op(OpKind.HF_RESIDUAL)]


# Replicated under the tensor-parallel plan (no sequence parallelism): whole on every rank.
_WHOLE = frozenset({OpKind.HF_LAYERNORM, OpKind.HF_RESIDUAL})


def hf_recompute_ops(model: ModelSpec, b: int, mp: int = 1) -> list[Op]:
    """What the backward re-runs of one checkpointed GPTNeoXLayer.

    ``torch.utils.checkpoint`` (non-reentrant, as transformers calls it) stops the
    recompute as soon as the last tensor the backward needs has been saved again: the
    inputs of dense_4h_to_h are saved before its GEMM runs, so the recompute casts that
    weight but runs neither the GEMM nor the residual add (measured: validation/probe_recompute.py).
    """
    *head, _down, _residual = hf_encoder_ops(model, b, mp)
    return [*head, Op(OpKind.HF_WEIGHT_CAST, d=model.hidden, f=_ffn_field(model), mp=mp)]


def hf_layer_tensors(d: int, f: int, mp: int) -> tuple[int, ...]:
    """One layer's parameter tensors on one tensor-parallel rank, in reverse module order (the order
    DDP buckets them): MLP-down bias and weight, MLP-up, dense, QKV, the two LayerNorms."""
    return (d, d * f // mp, f // mp, f * d // mp, d, d * d // mp, 3 * d // mp, 3 * d * d // mp, d, d, d, d)


def _check_gptneox(model: ModelSpec, par: Parallelism) -> None:
    """Refuse what Hugging Face GPT-NeoX under PyTorch-native parallelism does not have."""
    checks = (("model.kv_heads", model.kv != model.heads, "GPT-NeoX has multi-head attention"),
              ("model.mlp", model.mlp is not Mlp.GELU, "GPT-NeoX has a GeLU MLP"),
              ("model.tied_embeddings", model.tied_embeddings, "GPT-NeoX's embed_in and embed_out are separate"),
              ("model.position", model.position is not Position.ROPE, "GPT-NeoX has rotary positions"),
              ("parallelism.sequence_parallel", par.sequence_parallel, "the modelled DTensor plan has none"),
              ("parallelism.cp", par.cp > 1, "context parallelism is modelled for framework megatron"),
              ("parallelism.split", par.split is Split.MEGATRON, "torch pipelining splits its own way"))
    for key, bad, why in checks:
        if bad:
            raise ConfigError(key, f"not supported with training.framework: hf ({why})")


def build_hf_plans(model: ModelSpec, training: TrainingSpec, par: Parallelism) -> tuple[StagePlan, ...]:
    """Every pipeline stage's plan for framework "hf" (see the module docstring)."""
    _check_gptneox(model, par)
    if par.schedule is Schedule.INTERLEAVED_1F1B:
        raise ConfigError("parallelism.schedule", "the hf framework models torch.distributed.pipelining's "
                          "1f1b and gpipe schedules; interleaved-1f1b is Megatron's")
    if training.zero_stage == 3 and par.dp == 1:
        raise ConfigError("training.zero_stage", "FSDP (zero_stage 3) over one data-parallel rank shards "
                                                 "nothing: it needs parallelism.dp > 1")
    b, l, d, mp, m = training.micro_batch, model.seq_len, model.hidden, par.mp, training.micro_batches
    f = model.ffn
    v = padded_vocab(model.vocab, 1)
    if v % mp:
        raise ConfigError("parallelism.mp", f"vocabulary {v} is not divisible by mp {mp}")
    counts = hf_stage_layers(model.layers, par.pp)
    full = training.recompute is Recompute.FULL
    layer_params = sum(hf_layer_tensors(d, f, mp))
    vocab_params = v * d // mp
    fsdp = training.zero_stage == 3 and par.dp > 1
    shard = par.dp if fsdp else 1
    bld = b * l * d
    plans = []
    for s, n in enumerate(counts):
        role = stage_role(s, par.pp)
        head = [Op(OpKind.HF_EMBEDDING, b=b, l=l, d=d, v=v, mp=mp)] if role.has_embedding else []
        tail = ([Op(OpKind.HF_LAYERNORM, b=b, l=l, d=d, h=model.heads),
                 Op(OpKind.HF_LM_HEAD, b=b, l=l, d=d, v=v, mp=mp), Op(OpKind.HF_LOSS, b=b, l=l, d=d, v=v, mp=mp)]
                if role.has_head else [])
        enc = hf_encoder_ops(model, b, mp)
        rec = hf_recompute_ops(model, b, mp) if full else []
        forward = merge(counted(head, 1), counted(enc, n), counted(tail, 1))
        recompute = merge(counted(rec, n)) if full else ()

        # the MP all-reduces where the GPU runs them (the flow shop's order); per micro-batch below
        issue_mp: list[tuple[str, OpKind, int, int]] = []
        if mp > 1:
            issue_mp += [("fwd", OpKind.HF_DENSE, bld, 1), ("fwd", OpKind.HF_MLP_DOWN, bld, 1),  # bf16 outputs
                         ("bwd", OpKind.HF_QKV, FP32_ENTRIES * bld, 1),
                         ("bwd", OpKind.HF_MLP_UP, FP32_ENTRIES * bld, 1)]
            if role.has_embedding:
                issue_mp.append(("fwd", OpKind.HF_EMBEDDING, FP32_ENTRIES * bld, 1))
            if role.has_head:
                issue_mp += [("fwd", OpKind.HF_LOSS, FP32_ENTRIES * b * l, LOSS_PARALLEL_ALLREDUCES),
                             ("bwd", OpKind.HF_LM_HEAD, FP32_ENTRIES * bld, 1)]
            if full:  # the recompute re-runs the attention's row-parallel output, not MLP-down's
                issue_mp.append(("rec", OpKind.HF_DENSE, bld, 1))
        mp_fwd = _per_micro_batch(issue_mp, n, ("fwd",))
        mp_bwd = _per_micro_batch(issue_mp, n, ("bwd", "rec"))

        vocab_mats = int(role.has_embedding) + int(role.has_head)
        params = n * layer_params + vocab_mats * vocab_params + (2 * d if role.has_head else 0)
        # The update kinds' feature is the parameter count (operators.ops.hf_params, which counts
        # both vocabulary matrices): a stage holding one or none gets half the rows or one row, which
        # is exact to within d * (1 + 2 / mp) parameters.
        v_eff = max(1, v * vocab_mats // 2)
        # FSDP: the optimizer and the accumulation run on this rank's 1/dp shard of every tensor,
        # priced as the tensor-parallel shard of mp * dp ranks (norms are the only tensors TP keeps
        # whole: d per layer, a 1e-4 share of a layer's parameters at d = 1024)
        update = dict(d=d, v=v_eff, f=_ffn_field(model), layers=n, mp=mp * shard)

        segments: list[GradSegment] = []
        if role.has_head:
            segments.append(GradSegment((vocab_params, d, d), tuple(counted(tail, 1))))
        layer = GradSegment(hf_layer_tensors(d, f, mp), tuple(counted(enc, 1)), tuple(counted(rec, 1)), layer=True)
        segments += [layer] * n
        if role.has_embedding:
            segments.append(GradSegment((vocab_params,), tuple(counted(head, 1))))

        extra_passes = (1 if par.pp > 1 else 0) + (DDP_COPY_PASSES if par.dp > 1 and not fsdp else 0)
        units = None
        if fsdp:  # fp32 parameters and gradients: 2 entries per parameter, 1/dp of each per rank
            root = vocab_mats * vocab_params + (2 * d if role.has_head else 0)
            units = FSDPUnits(layers=n, layer_shard=FP32_ENTRIES * layer_params // par.dp,
                              root_shard=FP32_ENTRIES * root // par.dp, ranks=par.dp)
        plans.append(StagePlan(
            index=s, role=role, encoders=n, forward=forward, backward=forward, recompute=recompute,
            mp_allreduces_fwd=sum(c for _, c in mp_fwd), mp_allreduces_bwd=sum(c for _, c in mp_bwd),
            mp_allreduce_entries=bld,
            p2p_entries=FP32_ENTRIES * bld if par.pp > 1 else 0,
            params=params,
            optimizer=Op(OpKind.HF_OPTIMIZER, **update),
            grad_accum=Op(OpKind.HF_GRAD_ACCUM, **update),
            grad_accum_count=m - 1 + extra_passes,
            mp_colls_fwd=tuple(mp_fwd), mp_colls_bwd=tuple(mp_bwd),
            issue_head=tuple(head), issue_layer=tuple(enc), issue_recompute=tuple(rec), issue_tail=tuple(tail),
            issue_mp=tuple(issue_mp),
            grad_segments=tuple(segments),
            dp_buckets=None if fsdp else DPBuckets(DDP_FIRST_BUCKET_BYTES // 2, DDP_BUCKET_BYTES // 2, FP32_ENTRIES),
            fsdp=units,
            runtime=(("fsdp2_tp" if mp > 1 else "fsdp2") if fsdp
                     else "ddp" if par.dp > 1 and mp == 1 and par.pp == 1
                     else ("dtensor_tp" if mp > 1 else "eager") + ("_pp" if par.pp > 1 else "")),
        ))
    return tuple(plans)


__all__ = ["DDP_BUCKET_BYTES", "DDP_FIRST_BUCKET_BYTES", "build_hf_plans", "hf_encoder_ops",
           "hf_layer_tensors", "hf_recompute_ops", "hf_stage_layers"]
