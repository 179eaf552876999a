"""What one training iteration computes: model specs, layouts, operators, stage plans.

Pure Python and numpy: no simpy, no scikit-learn, no torch.
"""

from trainsim.operators.duration import DurationModel
from trainsim.operators.errors import ConfigError
from trainsim.operators.ops import Collective, CollKind, Direction, Op, OpKind, features
from trainsim.operators.partition import StageRole, encoder_params, padded_vocab, partition_encoders, stage_params
from trainsim.operators.spec import (
    MODEL_PRESETS,
    Attention,
    ModelSpec,
    Norm,
    Parallelism,
    Precision,
    Recompute,
    Schedule,
    TrainingSpec,
)
from trainsim.operators.stages import OpCount, StagePlan, build_stage_plans, encoder_ops

__all__ = [
    "MODEL_PRESETS", "Attention", "CollKind", "Collective", "ConfigError", "Direction", "DurationModel",
    "ModelSpec", "Norm", "Op", "OpCount", "OpKind", "Parallelism", "Precision", "Recompute", "Schedule",
    "StagePlan", "StageRole", "TrainingSpec", "build_stage_plans", "encoder_ops", "encoder_params",
    "features", "padded_vocab", "partition_encoders", "stage_params",
]
