"""Recorded model selections: a profile's chosen candidates, fitted without selecting them again.

Fitting a profile selects, per regressor, the candidate of its grid with the lowest validation MAPE
(:class:`calibration.select.OperatorRegressor`: every candidate fitted on 80 % of the samples, then the
best refitted on all of them). Given the samples, the grid, the model, the constraints and
``random_state``, that choice is deterministic, and it is most of a cold fit's work: on the shipped
H100 profile 11.0 s of fitting against 4.1 s for the chosen candidates alone, with byte-identical
trees (docs/benchmarks.md). A record keeps each choice and its candidates' validation MAPEs, so a cold
fit refits the chosen candidate only and ``trainsim profile show`` still shows every MAPE.

A record applies only to the fit it was made for: the samples' hash, the grid's tag, ``random_state``,
the model, ``monotone`` and the collective policy must all match (anything else, e.g. a user's own
sample folder or a changed sample file, is selected as before). It also names the scikit-learn and
xgboost versions that made it; under other versions the recorded candidate is still the one fitted
(a choice, like the grid itself), which ``tests/test_selection_record.py`` checks is still within a
stated margin of the best.

Files: ``selection.json`` in a sample folder (the shipped profiles), and
:data:`REFERENCE_RECORD` for the reference profiles (their samples live outside the repository; the
record holds no sample, only choices and scores).

    python -m trainsim.calibration.selection_record NAME [NAME ...] [--models efficiency,duration,monotone]

fits each named profile afresh with selection (a temporary cache) and writes its record.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainsim.operators.errors import ConfigError

RECORD_FILE = "selection.json"
FORMAT = 1
#: the reference profiles' record (beside the shipped profiles' folders)
REFERENCE_RECORD = Path(__file__).resolve().parent / "profiles" / "reference_selection.json"
#: what must match for a record to apply (besides the model's name)
SIGNATURE = ("data_hash", "grid", "random_state", "model", "monotone", "collective_model")

Selection = dict[str, tuple[int, list[float | None]]]


def signature(data_hash: str, grid: str, random_state: int, model: str, monotone: bool,
              collective_model: str) -> dict[str, Any]:
    return {"data_hash": data_hash, "grid": grid, "random_state": random_state, "model": model,
            "monotone": monotone, "collective_model": collective_model}


def selection_of(summaries: Mapping[str, Mapping[str, Any]],
                 grid: Sequence[tuple[str, Mapping[str, Any]]]) -> Selection:
    """Each tree regressor's choice in ``grid`` (its index) and candidate MAPEs, from fitted summaries
    (``FittedProfile.regressors[key].summary``); curves and single-candidate fits are left out."""
    cands = [(kind, dict(params)) for kind, params in grid]
    out: Selection = {}
    for key, s in summaries.items():
        mapes = s.get("candidate_mape") or []
        if (s.get("kind"), s.get("params")) not in cands or len(mapes) != len(cands):
            continue  # a collective curve, or fitted with another grid
        out[key] = (cands.index((s["kind"], dict(s["params"]))), list(mapes))
    return out


def read_selection(file: Path, sig: Mapping[str, Any]) -> Selection | None:
    """The selection recorded in ``file`` for the fit ``sig`` (:func:`signature`), or None."""
    if not file.is_file():
        return None
    try:
        doc = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(str(file), f"unreadable selection record: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("fits"), list):
        raise ConfigError(str(file), f"not a selection record of format {FORMAT}")
    for fit in doc["fits"]:
        if isinstance(fit, dict) and _same_fit(fit, sig):
            return _checked(file, fit.get("selection"))
    return None


def _same_fit(fit: Mapping[str, Any], sig: Mapping[str, Any]) -> bool:
    return all(fit.get(k) == sig[k] for k in SIGNATURE)


def _checked(file: Path, raw: Any) -> Selection:
    if not isinstance(raw, dict):
        raise ConfigError(str(file), "a fit's selection must map regressor keys to [best, [MAPE, ...]]")
    out: Selection = {}
    for key, v in raw.items():
        ok = (isinstance(v, list) and len(v) == 2 and isinstance(v[0], int) and isinstance(v[1], list)
              and 0 <= v[0] < len(v[1])
              and all(m is None or (isinstance(m, (int, float)) and math.isfinite(m) and m >= 0) for m in v[1]))
        if not ok:
            raise ConfigError(str(file), f"selection of {key!r} must be [best index, [MAPE or null, ...]], got {v!r}")
        out[str(key)] = (v[0], list(v[1]))
    return out


def write_fits(file: Path, fits: Sequence[Mapping[str, Any]]) -> None:
    """Replace the fits of ``file`` that have the same signatures as ``fits`` where they stand (a
    rewritten record changes only the entries that changed), append the new ones, keep the others."""
    out: list[Any] = json.loads(file.read_text()).get("fits", []) if file.is_file() else []
    for new in fits:
        at = next((i for i, f in enumerate(out) if _same_fit(f, new)), None)
        if at is None:
            out.append(new)
        else:
            out[at] = new
    doc = {"format": FORMAT, "fits": out}
    file.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------- the command


def record(name: str, models: Sequence[str], reference_dir: str | None = None) -> tuple[Path, list[dict[str, Any]]]:
    """Fit profile ``name`` afresh under each of ``models`` with selection, and return the record
    file it belongs in with one fit entry per model."""
    from trainsim.calibration import profile as P

    if not models:
        raise ConfigError("--models", "names no profile model")
    fits = []
    for model in models:
        with tempfile.TemporaryDirectory() as cache:
            prof = P.load_profile(name, reference_dir=reference_dir, cache_dir=cache, model=model, reselect=True)
        m = prof.manifest
        grid = P.candidate_grid(m["candidates"])
        sig = signature(m["data_hash"], m["candidates"], m["random_state"], m["model"], m["monotone"],
                        m["collective_model"])
        sel = selection_of({k: r.summary for k, r in prof.regressors.items()}, grid)
        fits.append({**sig, "versions": m["versions"], "selection": {k: [b, s] for k, (b, s) in sorted(sel.items())}})
    return (REFERENCE_RECORD if name.startswith("reference:") else Path(m["source"]) / RECORD_FILE), fits


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainsim.calibration.selection_record",
                                 description="record each named profile's model selection (see the module doc)")
    ap.add_argument("names", nargs="+", metavar="NAME", help="a shipped profile, a sample folder or reference:CLUSTER")
    ap.add_argument("--models", default="efficiency,duration,monotone",
                    help="comma-separated profile models to record (default: all three)")
    ap.add_argument("--reference-data", default=None, metavar="DIR")
    a = ap.parse_args(argv)
    from trainsim.calibration.samples import DataQuirkWarning

    warnings.simplefilter("ignore", DataQuirkWarning)  # reported by `trainsim profile show`, not here
    try:
        for name in a.names:
            file, fits = record(name, [m.strip() for m in a.models.split(",") if m.strip()], a.reference_data)
            write_fits(file, fits)
            n = sum(len(f["selection"]) for f in fits)
            print(f"{name}: {len(fits)} fit(s), {n} selections -> {file}")
    except ConfigError as e:
        print(f"selection_record: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
