"""What one training iteration computes: model specs, layouts, operators, stage plans.

Pure Python and numpy: no simpy, no scikit-learn, no torch.
"""

from trainsim.operators.duration import DurationModel
from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Collective, CollKind, Direction, Op, OpKind, features
from trainsim.operators.partition import (
    StageRole,
    encoder_params,
    model_params,
    padded_vocab,
    partition_encoders,
    split_encoders,
    stage_params,
)
from trainsim.operators.presets import MODEL_PRESETS
from trainsim.operators.spec import (
    Attention,
    GradAccumulation,
    Kernels,
    Mlp,
    ModelSpec,
    Norm,
    Parallelism,
    Position,
    Precision,
    Recompute,
    Schedule,
    Split,
    TrainingSpec,
)
from trainsim.operators.stages import OpCount, StagePlan, build_stage_plans, encoder_ops

__all__ = [
    "MODEL_PRESETS", "Attention", "CollKind", "Collective", "ConfigError", "Direction", "DurationModel", "Mlp",
    "ModelSpec", "Norm", "Op", "OpCount", "OpKind", "Parallelism", "Position", "Precision", "Kernels",
    "GradAccumulation", "Recompute", "Schedule", "Split", "StagePlan", "StageRole", "TrainingSpec",
    "build_stage_plans", "encoder_ops", "encoder_params", "features", "model_params", "padded_vocab",
    "partition_encoders", "split_encoders", "stage_params",
]
