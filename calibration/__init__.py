"""Calibration: samples, reference loader, fitted and roofline duration profiles.

The only package that may import scikit-learn, xgboost (and torch, in the harness).
Importing ``calibration`` stays light: the fitting stack is imported only when a
profile has to be fitted (``calibration.select``), never to load a cached one.
"""

from trainsim.calibration.forest import TreeEnsemble
from trainsim.calibration.profile import (
    ExtrapolationWarning,
    FittedProfile,
    cache_root,
    fit_profile,
    load_profile,
    shipped_profiles,
)
from trainsim.calibration.reference import find_quirks, load_reference, resolve_reference_dir
from trainsim.calibration.roofline import RooflineProfile
from trainsim.calibration.samples import (
    CollectiveSample,
    ComputeSample,
    DataQuirkWarning,
    SampleSet,
    SampleWriter,
    load_sample_dir,
    read_collectives,
    read_compute,
    write_samples,
)

__all__ = [
    "CollectiveSample", "ComputeSample", "DataQuirkWarning", "ExtrapolationWarning", "FittedProfile",
    "OperatorRegressor", "RooflineProfile", "SampleSet", "SampleWriter", "TreeEnsemble", "cache_root",
    "find_quirks", "fit_profile", "load_profile", "load_reference", "load_sample_dir", "read_collectives",
    "read_compute", "resolve_reference_dir", "shipped_profiles", "write_samples",
]


def __getattr__(name: str):
    # OperatorRegressor pulls in scikit-learn and xgboost: import it only when asked for.
    if name == "OperatorRegressor":
        from trainsim.calibration.select import OperatorRegressor

        return OperatorRegressor
    raise AttributeError(f"module 'calibration' has no attribute {name!r}")
