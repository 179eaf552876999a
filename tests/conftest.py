import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = ROOT.parent / "shared" / "reference-data" / "estimate-train-time"


def reference_dir() -> Path | None:
    p = Path(os.environ.get("TRAINSIM_REFERENCE_DATA", DEFAULT_REFERENCE))
    return p if (p / "Perlmutter").is_dir() else None


@pytest.fixture(scope="session")
def reference_data() -> Path:
    p = reference_dir()
    if p is None:
        pytest.skip("reference samples not found (set TRAINSIM_REFERENCE_DATA)")
    return p


@pytest.fixture(scope="session", autouse=True)
def _shared_profile_cache(tmp_path_factory):
    """One profile cache for the whole run, so a reference profile is fitted at most once."""
    if os.environ.get("TRAINSIM_CACHE"):
        yield
        return
    os.environ["TRAINSIM_CACHE"] = str(tmp_path_factory.mktemp("trainsim-cache"))
    yield
    del os.environ["TRAINSIM_CACHE"]


@pytest.fixture(scope="session")
def paper_predictions(reference_data):
    """Eq. 7 for the ten bundled paper cases on the reference samples."""
    from trainsim.scenarios.compose import predict
    from trainsim.scenarios.schema import load_scenario

    out = {}
    for case in ("gpt20b-4-4-8", "gpt20b-4-8-4", "gpt20b-8-4-4", "llama13b-4-8-2", "llemma7b-4-2-2"):
        for cluster in ("perlmutter", "vista"):
            name = f"paper-{case}-{cluster}"
            out[name] = predict(load_scenario(name), reference_data=str(reference_data))
    return out
