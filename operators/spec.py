"""What is trained and how it is split: frozen, validated configuration types.

Enums, not strings, once past the YAML edge. Each ``__post_init__`` checks its own
fields and raises :class:`ConfigError` naming the scenario field.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from trainsim.operators.errors import ConfigError, require_int, show


class Precision(str, Enum):
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"  # Transformer Engine: the four encoder GEMMs in FP8, everything else in bf16

    @property
    def bytes(self) -> int:
        """Bytes of an activation or weight element outside the FP8 GEMMs."""
        return 2


class GradAccumulation(str, Enum):
    """How gradients are accumulated over micro-batches and reach the fp32 master weights
    (``training.grad_accumulation``, framework megatron).

    ``fused``: Megatron-Core's ``gradient_accumulation_fusion``: the weight-gradient GEMMs add into
    the fp32 main gradients, no pass of their own. ``autograd``: plain PyTorch mixed precision (what
    validation/train_3d.py runs): autograd accumulates into each 16-bit parameter's ``.grad`` (micro-
    batches 2..m: one read-add-write pass, 6 bytes per parameter), then each fp32 master gets
    ``.grad = grad.float()`` (6 bytes) and is copied back after the step (6 bytes); at the step the
    16-bit and the fp32 gradients are both alive.
    """

    FUSED = "fused"
    AUTOGRAD = "autograd"


class Kernels(str, Enum):
    """How the elementwise and normalisation operators run (``training.kernels``).

    ``eager``: PyTorch's eager sequences, several kernels each (what the paper's GPT-NeoX and the
    Hugging Face models run, and what the eager operator kinds measure). ``fused``: Megatron-Core
    with Transformer Engine, one fused kernel each for RoPE, SwiGLU and the FP8 cast (the
    ``*_fused`` operator kinds; RMSNorm is one kernel either way). Unset: fused for framework
    megatron in bf16 or fp8 (the Transformer Engine era), eager otherwise (fp16, the paper's runs;
    framework hf).
    """

    EAGER = "eager"
    FUSED = "fused"


class Recompute(str, Enum):
    NONE = "none"
    SELECTIVE = "selective"  # the attention core only (Korthikanti et al. 2022)
    FULL = "full"


class Mlp(str, Enum):
    GELU = "gelu"  # two matrices: d -> ffn, GeLU, ffn -> d
    SWIGLU = "swiglu"  # three matrices of ffn: gate and up (fused, d -> 2 ffn), SiLU(gate) * up, ffn -> d


class Position(str, Enum):
    ROPE = "rope"
    LEARNED = "learned"  # a [seq_len, d] position embedding added to the token embedding
    ALIBI = "alibi"  # a bias inside the attention kernel: no operator, no parameter
    NONE = "none"  # no position encoding (NoPE; the synthetic model of validation/train_3d.py)


class Split(str, Enum):
    """How encoders are assigned to pipeline stages (operators.partition)."""

    DEEPSPEED = "deepspeed"  # the paper's: layers + 5 blocks split evenly, then the blocks removed
    MEGATRON = "megatron"  # equal encoders per stage; embedding on the first, loss on the last


class Norm(str, Enum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class Attention(str, Enum):
    FUSED_SOFTMAX = "fused_softmax"  # QK^T (baddbmm), scaled upper-triangular softmax, .V (bmm)
    SOFTMAX = "softmax"  # QK^T, fill-mask, softmax, .V
    FLASH = "flash"  # one flash-attention kernel


class Framework(str, Enum):
    """How the training step is implemented, which decides the operator decomposition.

    ``megatron``: the paper's Megatron/DeepSpeed kernels on half-precision weights.
    ``hf``: Hugging Face GPT-NeoX with fp32 weights under ``torch.autocast`` (casts,
    fp32 residual stream and loss, fp32 gradient accumulation, fused AdamW); one GPU.
    """

    MEGATRON = "megatron"
    HF = "hf"


class Schedule(str, Enum):
    ONE_F_ONE_B = "1f1b"
    GPIPE = "gpipe"
    INTERLEAVED_1F1B = "interleaved-1f1b"


#: Upper bounds of the integer fields. Each is far beyond any model or cluster built (the largest
#: published models have hidden ~2.5e4, ~1.3e2 layers, ~1e6 tokens of context and ~2.6e5 vocabulary
#: entries; the largest clusters ~1e5 GPUs), and low enough that every count the tool derives
#: (parameters, FLOPs, bytes, ranks) stays exact or finite and every per-GPU table fits in memory.
#: A value above its bound is an error, never clamped.
MAX_WIDTH = 2**20  # hidden, heads, micro_batch
MAX_FFN = 2**22
MAX_LAYERS = 2**16
MAX_SEQ_LEN = 2**24
MAX_VOCAB = 2**24
MAX_SYNCS = 2**10  # MP all-reduces per encoder and direction
MAX_MICRO_BATCHES = 2**24
MAX_DP_BUCKET = 2**48
MAX_GPUS = 2**20  # pp * mp * dp, and each of them
MAX_VIRTUAL_STAGES = 2**10
BOUND_REASON = "the bound is far beyond any real model or cluster and keeps every derived count priceable"


def _bounded(field: str, value: object, maximum: int, minimum: int = 1) -> int:
    return require_int(field, value, minimum=minimum, maximum=maximum, reason=BOUND_REASON)


def parse_enum(enum_type: type[Enum], fieldname: str, value: object) -> Enum:
    if isinstance(value, enum_type):
        return value
    allowed = ", ".join(e.value for e in enum_type)
    if not isinstance(value, str):
        raise ConfigError(fieldname, f"must be one of {allowed}, got {show(value)}")
    try:
        return enum_type(value.lower())
    except ValueError:
        raise ConfigError(fieldname, f"unknown value {show(value)}; expected one of {allowed}") from None


@dataclass(frozen=True)
class ModelSpec:
    """A GPT-NeoX-style decoder (Table IV). ``vocab`` is the tokenizer's, unpadded."""

    name: str
    hidden: int
    heads: int
    layers: int
    seq_len: int
    vocab: int = 50257
    ffn_hidden: int = 0  # 0 means 4 * hidden (the paper's GeLU MLP)
    norm: Norm = Norm.LAYERNORM
    attention: Attention = Attention.FUSED_SOFTMAX
    rotary: bool = True
    fwd_mp_syncs: int = 2  # MP all-reduces per encoder in forward
    bwd_mp_syncs: int = 2  # ... and in backward
    kv_heads: int = 0  # key/value heads (GQA, MQA); 0 means heads (multi-head attention)
    mlp: Mlp = Mlp.GELU
    tied_embeddings: bool = False  # the LM head reuses the input embedding's weight
    # rope | learned | alibi | none; None: rope when ``rotary`` (the paper's GPT-NeoX), else none (what
    # ``rotary: false`` always meant: no rotary operator and no position parameters)
    position: Position | None = None
    bias: bool = True  # linear layers carry biases (GPT-NeoX, GPT-3); LLaMA-family models have none
    dropout: bool = True  # attention and hidden dropout (their masks are kept); LLaMA-family models have none
    # the attention-probability dropout as a kernel of its own (Megatron's CoreAttention, whose
    # --attention-dropout defaults to 0.1, outside flash attention, which drops inside its kernel).
    # Off unless set: the paper's GPT-NeoX configurations (attention-dropout 0) and the LLaMA family
    # train without it, and the reference samples have no such operator.
    attention_dropout: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ConfigError("model.name", f"must be a string, got {show(self.name)}")
        for key, top in (("hidden", MAX_WIDTH), ("heads", MAX_WIDTH), ("layers", MAX_LAYERS),
                         ("seq_len", MAX_SEQ_LEN), ("vocab", MAX_VOCAB)):
            _bounded(f"model.{key}", getattr(self, key), top)
        _bounded("model.ffn_hidden", self.ffn_hidden, MAX_FFN, minimum=0)
        _bounded("model.fwd_mp_syncs", self.fwd_mp_syncs, MAX_SYNCS, minimum=0)
        _bounded("model.bwd_mp_syncs", self.bwd_mp_syncs, MAX_SYNCS, minimum=0)
        _bounded("model.kv_heads", self.kv_heads, MAX_WIDTH, minimum=0)
        for key in ("rotary", "tied_embeddings", "bias", "dropout", "attention_dropout"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"model.{key}", f"must be true or false, got {show(getattr(self, key))}")
        if self.hidden % self.heads:
            raise ConfigError("model.heads", f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.kv_heads and self.heads % self.kv_heads:
            raise ConfigError("model.kv_heads", f"heads {self.heads} is not divisible by kv_heads {self.kv_heads} "
                                                "(each key/value head serves an equal group of query heads)")
        object.__setattr__(self, "norm", parse_enum(Norm, "model.norm", self.norm))
        object.__setattr__(self, "attention", parse_enum(Attention, "model.attention", self.attention))
        if self.attention_dropout and not self.dropout:
            raise ConfigError("model.attention_dropout", "contradicts model.dropout: false (no dropout masks)")
        object.__setattr__(self, "mlp", parse_enum(Mlp, "model.mlp", self.mlp))
        if self.position is None:
            object.__setattr__(self, "position", Position.ROPE if self.rotary else Position.NONE)
        else:
            position = parse_enum(Position, "model.position", self.position)
            if not self.rotary and position is Position.ROPE:
                raise ConfigError("model.position", "rope contradicts model.rotary: false; give one of them")
            object.__setattr__(self, "position", position)
            object.__setattr__(self, "rotary", position is Position.ROPE)

    @property
    def ffn(self) -> int:
        """MLP width: ``ffn_hidden``, else 4d for GeLU and LLaMA's 2/3 of 4d rounded up to 256 for SwiGLU."""
        if self.ffn_hidden:
            return self.ffn_hidden
        if self.mlp is Mlp.SWIGLU:
            return -(-(8 * self.hidden // 3) // 256) * 256
        return 4 * self.hidden

    @property
    def kv(self) -> int:
        """Key/value heads."""
        return self.kv_heads or self.heads

    @property
    def qkv_width(self) -> int:
        """Output width of the QKV projection: queries of every head, keys and values of the kv heads."""
        return self.hidden + 2 * self.kv * self.head_dim

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass(frozen=True)
class TrainingSpec:
    micro_batch: int = 4
    micro_batches: int = 16
    precision: Precision = Precision.FP16
    recompute: Recompute = Recompute.FULL
    zero_stage: int = 1
    # DP gradient all-reduce / ZeRO all-gather bucket, in entries (the reference's comm_bucket)
    dp_bucket: int = 1_260_000_000
    framework: Framework = Framework.MEGATRON
    # Megatron-Core's distributed optimizer: gradients reduce-scattered over the data-parallel
    # group, the fp32 optimizer state sharded over it, updated parameters all-gathered
    distributed_optimizer: bool = False
    # ZeRO-3 as PyTorch FSDP2 runs it (per-layer all-gather before forward and backward, per-layer
    # reduce-scatter, prefetch overlap); the same as zero_stage 3
    fsdp: bool = False
    # DP gradient reduction in buckets during the last backward (Megatron's overlap_grad_reduce,
    # DeepSpeed's overlap_comm); None: the scenario's simulation.overlap_dp (default off)
    overlap_grad_reduce: bool | None = None
    # the parameter all-gather of the sharded optimizer overlapped with the next forward
    overlap_param_gather: bool = False
    # eager | fused (Kernels); None: fused for framework megatron in bf16 / fp8, else eager
    kernels: Kernels | None = None
    # fused | autograd (GradAccumulation, framework megatron): Megatron-Core's fused accumulation
    # into fp32 main gradients, or plain PyTorch's into 16-bit .grad with fp32 master copies
    grad_accumulation: GradAccumulation = GradAccumulation.FUSED
    # Megatron-Core's DDP ``grad_reduce_in_fp32`` under the distributed optimizer: the gradient
    # buffer, its accumulation and its reduce-scatter in fp32 (Megatron-LM's default for bf16 and
    # fp8) or in bf16 (NeMo's performance recipes). None: fp32 for bf16 / fp8, the buffer's own
    # 16 bits for fp16
    grad_reduce_in_fp32: bool | None = None

    def __post_init__(self) -> None:
        _bounded("training.micro_batch", self.micro_batch, MAX_WIDTH)
        _bounded("training.micro_batches", self.micro_batches, MAX_MICRO_BATCHES)
        _bounded("training.dp_bucket", self.dp_bucket, MAX_DP_BUCKET)
        require_int("training.zero_stage", self.zero_stage, minimum=0)
        if self.zero_stage not in (0, 1, 2, 3):
            raise ConfigError("training.zero_stage", f"ZeRO stages are 0, 1, 2 and 3, got {self.zero_stage!r}")
        for key in ("distributed_optimizer", "fsdp", "overlap_param_gather"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"training.{key}", f"must be true or false, got {show(getattr(self, key))}")
        if self.overlap_grad_reduce is not None and not isinstance(self.overlap_grad_reduce, bool):
            raise ConfigError("training.overlap_grad_reduce", f"must be true or false, got "
                                                              f"{show(self.overlap_grad_reduce)}")
        object.__setattr__(self, "precision", parse_enum(Precision, "training.precision", self.precision))
        object.__setattr__(self, "recompute", parse_enum(Recompute, "training.recompute", self.recompute))
        object.__setattr__(self, "framework", parse_enum(Framework, "training.framework", self.framework))
        if self.kernels is not None:
            object.__setattr__(self, "kernels", parse_enum(Kernels, "training.kernels", self.kernels))
        object.__setattr__(self, "grad_accumulation",
                           parse_enum(GradAccumulation, "training.grad_accumulation", self.grad_accumulation))
        if self.grad_accumulation is GradAccumulation.AUTOGRAD:
            if self.framework is not Framework.MEGATRON:
                raise ConfigError("training.grad_accumulation", "autograd accumulation with fp32 master copies is "
                                                                "a framework megatron option (framework hf models "
                                                                "its own fp32 gradients)")
            if self.zero_stage != 0 or self.distributed_optimizer:
                raise ConfigError("training.grad_accumulation", "autograd accumulation is modelled with full "
                                                                "optimizer state on every rank (zero_stage 0, no "
                                                                "distributed optimizer)")
            if self.precision not in (Precision.BF16, Precision.FP16):
                raise ConfigError("training.grad_accumulation", "autograd accumulation with fp32 master copies "
                                                                "needs 16-bit parameters (precision bf16 or fp16)")
        if self.framework is Framework.HF and self.kernels is Kernels.FUSED:
            raise ConfigError("training.kernels", "framework hf runs the model's eager PyTorch kernels; "
                                                  "fused kernels are Megatron-Core's (framework megatron)")
        if self.fsdp:
            if self.zero_stage not in (1, 3):  # 1 is the default: fsdp alone means stage 3
                raise ConfigError("training.fsdp", f"FSDP is ZeRO stage 3; it contradicts training.zero_stage: "
                                                   f"{self.zero_stage}")
            object.__setattr__(self, "zero_stage", 3)
        if self.distributed_optimizer and self.zero_stage == 3:
            raise ConfigError("training.distributed_optimizer", "Megatron's distributed optimizer shards the "
                                                                "optimizer state (stage 1 memory); it cannot be "
                                                                "combined with ZeRO-3 / FSDP")
        if self.grad_reduce_in_fp32 is not None:
            if not isinstance(self.grad_reduce_in_fp32, bool):
                raise ConfigError("training.grad_reduce_in_fp32",
                                  f"must be true or false, got {show(self.grad_reduce_in_fp32)}")
            if not self.distributed_optimizer:
                raise ConfigError("training.grad_reduce_in_fp32", "the gradient buffer's precision is modelled "
                                                                  "for Megatron-Core's distributed optimizer "
                                                                  "(training.distributed_optimizer: true)")
            if self.grad_reduce_in_fp32 and self.precision is Precision.FP16:
                raise ConfigError("training.grad_reduce_in_fp32", "fp16 runs keep fp16 gradients and fp32 main "
                                                                  "gradients with the sharded optimizer state")
        if self.framework is Framework.HF and (self.zero_stage == 2 or self.distributed_optimizer):
            raise ConfigError("training.zero_stage" if self.zero_stage == 2 else "training.distributed_optimizer",
                              "framework hf models PyTorch DDP (zero_stage 0/1) and FSDP2 (zero_stage 3)")
        if self.framework is Framework.HF and self.precision is Precision.FP8:
            raise ConfigError("training.precision", "fp8 is modelled for framework megatron (Transformer Engine); "
                                                    "framework hf runs bf16 autocast")
        if self.framework is Framework.HF and self.recompute is Recompute.SELECTIVE:
            raise ConfigError("training.recompute", "framework hf checkpoints whole layers (none or full)")

    @property
    def resolved_kernels(self) -> Kernels:
        """``kernels``, or its default: fused for framework megatron in bf16 / fp8, else eager."""
        if self.kernels is not None:
            return self.kernels
        te_era = self.framework is Framework.MEGATRON and self.precision in (Precision.BF16, Precision.FP8)
        return Kernels.FUSED if te_era else Kernels.EAGER

    @property
    def fused_kernels(self) -> bool:
        """RoPE, SwiGLU and the FP8 cast as fused kernels (``kernels``, resolved)."""
        return self.resolved_kernels is Kernels.FUSED

    @property
    def fsdp_sharded(self) -> bool:
        """Parameters sharded per layer over the data-parallel group (ZeRO-3 / FSDP)."""
        return self.zero_stage == 3

    @property
    def grad_reduce_bytes(self) -> int:
        """Bytes of a gradient element in the distributed optimizer's buffer and reduce-scatter
        (``grad_reduce_in_fp32``, resolved); 2 outside it."""
        if not self.distributed_optimizer or self.precision is Precision.FP16:
            return 2
        return 2 if self.grad_reduce_in_fp32 is False else 4

    @property
    def reduce_scatters_grads(self) -> bool:
        """Gradients are reduce-scattered (each rank keeps its shard) instead of all-reduced."""
        return self.zero_stage >= 2 or self.distributed_optimizer


@dataclass(frozen=True)
class Parallelism:
    pp: int = 1
    mp: int = 1
    dp: int = 1
    schedule: Schedule = Schedule.ONE_F_ONE_B
    virtual_stages: int = 1  # model chunks per pipeline rank (interleaved 1F1B)
    # Megatron sequence parallelism: the MP all-reduces become reduce-scatters plus all-gathers and
    # norms, dropout and residual adds run on 1/mp of the sequence
    sequence_parallel: bool = False
    cp: int = 1  # context parallelism: the sequence split over cp ranks, attention over a K/V ring
    split: Split = Split.DEEPSPEED
    first_stage_layers: int = 0  # Megatron split: encoders of the first / last stage; 0: equal share
    last_stage_layers: int = 0
    # mp > kv heads: each key/value head is replicated over mp / kv_heads ranks (must be said)
    replicate_kv_heads: bool = False
    # Transformer Engine's userbuffers: sequence parallelism's all-gathers and reduce-scatters
    # pipelined with the GEMMs beside them (Megatron's --tp-comm-overlap)
    tp_comm_overlap: bool = False

    def __post_init__(self) -> None:
        for key in ("pp", "mp", "dp", "cp"):
            _bounded(f"parallelism.{key}", getattr(self, key), MAX_GPUS)
        _bounded("parallelism.virtual_stages", self.virtual_stages, MAX_VIRTUAL_STAGES)
        for key in ("first_stage_layers", "last_stage_layers"):
            _bounded(f"parallelism.{key}", getattr(self, key), MAX_LAYERS, minimum=0)
        for key in ("sequence_parallel", "replicate_kv_heads", "tp_comm_overlap"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"parallelism.{key}", f"must be true or false, got {show(getattr(self, key))}")
        if self.gpus > MAX_GPUS:
            raise ConfigError("parallelism", f"pp*mp*dp*cp = {self.pp} x {self.mp} x {self.dp} x {self.cp} = "
                              f"{self.gpus:,} GPUs; the tool prices at most {MAX_GPUS:,} GPUs ({BOUND_REASON})")
        object.__setattr__(self, "schedule", parse_enum(Schedule, "parallelism.schedule", self.schedule))
        object.__setattr__(self, "split", parse_enum(Split, "parallelism.split", self.split))
        if self.virtual_stages > 1 and self.schedule is not Schedule.INTERLEAVED_1F1B:
            raise ConfigError("parallelism.virtual_stages", "only the interleaved-1f1b schedule uses virtual stages")
        if self.tp_comm_overlap and not self.sequence_parallel:
            raise ConfigError("parallelism.tp_comm_overlap", "overlaps sequence parallelism's all-gathers and "
                                                             "reduce-scatters: set parallelism.sequence_parallel")
        if (self.first_stage_layers or self.last_stage_layers) and self.split is not Split.MEGATRON:
            key = "first_stage_layers" if self.first_stage_layers else "last_stage_layers"
            raise ConfigError(f"parallelism.{key}", "is an option of parallelism.split: megatron")

    @property
    def gpus(self) -> int:
        return self.pp * self.mp * self.dp * self.cp

    @property
    def degrees(self) -> str:
        """How error messages name the GPU count: ``pp*mp*dp``, with ``*cp`` where cp > 1."""
        return "pp*mp*dp*cp" if self.cp > 1 else "pp*mp*dp"

    @property
    def grad_ranks(self) -> int:
        """Ranks over which a parameter's gradient is reduced (and the optimizer state sharded): DP x CP."""
        return self.dp * self.cp


def check_model_fits(model: ModelSpec, par: Parallelism) -> None:
    """Cross-section checks that need both the model and the layout."""
    if model.heads % par.mp:
        raise ConfigError("parallelism.mp", f"model.heads {model.heads} is not divisible by mp {par.mp}")
    if model.ffn % par.mp:
        raise ConfigError("parallelism.mp", f"MLP width {model.ffn} is not divisible by mp {par.mp}")
    kv = model.kv
    if kv % par.mp:
        if par.mp % kv:
            raise ConfigError("parallelism.mp", f"mp {par.mp} and model.kv_heads {kv}: neither divides the other, "
                                                "so key/value heads cannot be split or replicated evenly")
        if not par.replicate_kv_heads:
            raise ConfigError("parallelism.mp", f"mp {par.mp} > model.kv_heads {kv}: set "
                                                f"parallelism.replicate_kv_heads: true to replicate each key/value "
                                                f"head over {par.mp // kv} ranks")
    if par.cp > 1:
        if model.seq_len % (2 * par.cp):
            raise ConfigError("parallelism.cp", f"model.seq_len {model.seq_len} is not divisible by 2 * cp = "
                                                f"{2 * par.cp} (causal load balancing splits the sequence in 2 cp "
                                                "chunks)")
        if model.attention is not Attention.FLASH:
            raise ConfigError("parallelism.cp", "context parallelism runs flash attention over a K/V ring; set "
                                                "model.attention: flash")
    if par.sequence_parallel and par.mp > 1 and (model.seq_len // par.cp) % par.mp:
        raise ConfigError("parallelism.sequence_parallel", f"the sequence per rank {model.seq_len // par.cp} "
                                                           f"is not divisible by mp {par.mp}")


