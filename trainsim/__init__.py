"""trainsim: predict the iteration time of pipeline/tensor/data-parallel LLM training.

The library API (each function returns a frozen result with ``to_dict()``)::

    import trainsim
    sc = trainsim.load_scenario("gpt20b-dgxh100", overrides=["training.micro_batches=8"])
    print(trainsim.predict(sc).iteration_s)     # Eq. 7
    print(trainsim.simulate(sc).iteration_s)    # the SimPy simulation

Subpackages: :mod:`trainsim.operators`, :mod:`trainsim.topology`, :mod:`trainsim.calibration`,
:mod:`trainsim.sim`, :mod:`trainsim.scenarios`. In the repository they are the top-level folders
of the same names; an installed wheel holds them under ``trainsim/`` (see docs/architecture.md).
Importing :mod:`trainsim` is cheap: the API is loaded on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

#: the subpackages, which live in the repository's top-level folders
SUBPACKAGES = ("operators", "topology", "calibration", "sim", "scenarios")

# A source checkout keeps the subpackages beside this folder, not inside it: there, the
# checkout's root is part of the package's search path, so ``trainsim.sim`` is ``<root>/sim``
# with or without an (editable) install. An installed wheel has them inside and skips this.
_here = Path(__file__).resolve().parent
if not (_here / "sim").is_dir() and (_here.parent / "sim" / "engine.py").is_file():
    __path__.append(str(_here.parent))  # noqa: F821 (a package's __path__)

_API = ("load_scenario", "predict", "simulate", "compare", "monte_carlo", "sweep", "Prediction", "Simulation",
        "Comparison", "MonteCarlo", "Sweep", "Scenario", "ConfigError", "TimeToTrain", "time_to_train")

if TYPE_CHECKING:  # pragma: no cover
    from trainsim.api import (
        Comparison,
        ConfigError,
        MonteCarlo,
        Prediction,
        Scenario,
        Simulation,
        Sweep,
        TimeToTrain,
        compare,
        load_scenario,
        monte_carlo,
        predict,
        simulate,
        sweep,
        time_to_train,
    )

__all__ = [
    "Comparison", "ConfigError", "MonteCarlo", "Prediction", "Scenario", "Simulation", "Sweep", "TimeToTrain",
    "__version__", "compare", "load_scenario", "monte_carlo", "predict", "simulate", "sweep", "time_to_train",
]


def __getattr__(name: str) -> Any:
    if name in _API:
        from trainsim import api

        return getattr(api, name)
    raise AttributeError(f"module 'trainsim' has no attribute {name!r}")
