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

    @property
    def bytes(self) -> int:
        return 2


class Recompute(str, Enum):
    NONE = "none"
    FULL = "full"


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

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ConfigError("model.name", f"must be a string, got {show(self.name)}")
        for key, top in (("hidden", MAX_WIDTH), ("heads", MAX_WIDTH), ("layers", MAX_LAYERS),
                         ("seq_len", MAX_SEQ_LEN), ("vocab", MAX_VOCAB)):
            _bounded(f"model.{key}", getattr(self, key), top)
        _bounded("model.ffn_hidden", self.ffn_hidden, MAX_FFN, minimum=0)
        _bounded("model.fwd_mp_syncs", self.fwd_mp_syncs, MAX_SYNCS, minimum=0)
        _bounded("model.bwd_mp_syncs", self.bwd_mp_syncs, MAX_SYNCS, minimum=0)
        if not isinstance(self.rotary, bool):
            raise ConfigError("model.rotary", f"must be true or false, got {show(self.rotary)}")
        if self.hidden % self.heads:
            raise ConfigError("model.heads", f"hidden {self.hidden} is not divisible by heads {self.heads}")
        object.__setattr__(self, "norm", parse_enum(Norm, "model.norm", self.norm))
        object.__setattr__(self, "attention", parse_enum(Attention, "model.attention", self.attention))

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

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

    def __post_init__(self) -> None:
        _bounded("training.micro_batch", self.micro_batch, MAX_WIDTH)
        _bounded("training.micro_batches", self.micro_batches, MAX_MICRO_BATCHES)
        _bounded("training.dp_bucket", self.dp_bucket, MAX_DP_BUCKET)
        require_int("training.zero_stage", self.zero_stage, minimum=0)
        if self.zero_stage not in (0, 1, 3):
            raise ConfigError("training.zero_stage", f"supported ZeRO stages are 0, 1 and 3, got {self.zero_stage!r}")
        object.__setattr__(self, "precision", parse_enum(Precision, "training.precision", self.precision))
        object.__setattr__(self, "recompute", parse_enum(Recompute, "training.recompute", self.recompute))
        object.__setattr__(self, "framework", parse_enum(Framework, "training.framework", self.framework))
        if self.zero_stage == 3 and self.framework is not Framework.HF:
            raise ConfigError("training.zero_stage", "ZeRO stage 3 is modelled as PyTorch FSDP2 (framework: hf); "
                                                     "Megatron's distributed optimizer is stage 1")


@dataclass(frozen=True)
class Parallelism:
    pp: int = 1
    mp: int = 1
    dp: int = 1
    schedule: Schedule = Schedule.ONE_F_ONE_B
    virtual_stages: int = 1  # model chunks per pipeline rank (interleaved 1F1B)

    def __post_init__(self) -> None:
        for key in ("pp", "mp", "dp"):
            _bounded(f"parallelism.{key}", getattr(self, key), MAX_GPUS)
        _bounded("parallelism.virtual_stages", self.virtual_stages, MAX_VIRTUAL_STAGES)
        if self.pp * self.mp * self.dp > MAX_GPUS:
            raise ConfigError("parallelism", f"pp*mp*dp = {self.pp} x {self.mp} x {self.dp} = "
                              f"{self.pp * self.mp * self.dp:,} GPUs; the tool prices at most {MAX_GPUS:,} GPUs "
                              f"({BOUND_REASON})")
        object.__setattr__(self, "schedule", parse_enum(Schedule, "parallelism.schedule", self.schedule))
        if self.virtual_stages > 1 and self.schedule is not Schedule.INTERLEAVED_1F1B:
            raise ConfigError("parallelism.virtual_stages", "only the interleaved-1f1b schedule uses virtual stages")

    @property
    def gpus(self) -> int:
        return self.pp * self.mp * self.dp


def check_model_fits(model: ModelSpec, par: Parallelism) -> None:
    """Cross-section checks that need both the model and the layout."""
    if model.heads % par.mp:
        raise ConfigError("parallelism.mp", f"model.heads {model.heads} is not divisible by mp {par.mp}")
    if model.ffn % par.mp:
        raise ConfigError("parallelism.mp", f"MLP width {model.ffn} is not divisible by mp {par.mp}")



# Table IV. The "LLaMA" and "Llemma" configurations keep GPT-NeoX's GeLU 4d MLP.
MODEL_PRESETS: dict[str, ModelSpec] = {
    "gpt-20b": ModelSpec("gpt-20b", hidden=6144, heads=64, layers=44, seq_len=2048,
                         norm=Norm.LAYERNORM, attention=Attention.FUSED_SOFTMAX,
                         fwd_mp_syncs=1, bwd_mp_syncs=2),
    "llama-13b": ModelSpec("llama-13b", hidden=5120, heads=40, layers=40, seq_len=2048,
                           norm=Norm.RMSNORM, attention=Attention.FUSED_SOFTMAX,
                           fwd_mp_syncs=2, bwd_mp_syncs=2),
    "llemma-7b": ModelSpec("llemma-7b", hidden=4096, heads=32, layers=32, seq_len=4096,
                           norm=Norm.RMSNORM, attention=Attention.FLASH,
                           fwd_mp_syncs=2, bwd_mp_syncs=2),
}
