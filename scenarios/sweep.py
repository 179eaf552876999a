"""Which layout to pick for a scenario's GPU count and global batch (the library half of
``trainsim sweep``).

Every layout with ``pp * mp * dp * cp`` equal to the scenario's GPU count (cp from the given
degrees, default the scenario's; sequence parallelism on, off or both) is tried at the same global
batch (``micro_batch * micro_batches * dp`` kept; a layout whose dp does not divide it is skipped),
predicted with Eq. 7 and checked against the GPU's memory (:func:`operators.memory.fit_report`);
layouts that fit are simulated, those that do not are ranked after them by Eq. 7 and not simulated
(they cannot run). Layouts that the model or the cluster cannot take (heads not divisible by mp,
more stages than layers, groups straddling nodes unevenly) are kept with the reason they were
skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainsim.operators import ConfigError
from trainsim.scenarios.schema import Scenario


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(gpus: int, pps: Sequence[int], mps: Sequence[int],
            cps: Sequence[int] = (1,)) -> list[tuple[int, int, int, int]]:
    """Every ``(pp, mp, dp, cp)`` with ``pp * mp * dp * cp == gpus`` from the given pp, mp and cp degrees."""
    return [(pp, mp, gpus // (pp * mp * cp), cp) for cp in cps for pp in pps for mp in mps
            if gpus % (pp * mp * cp) == 0]


@dataclass(frozen=True)
class SweepRow:
    layout: str
    pp: int
    mp: int
    dp: int
    cp: int
    sequence_parallel: bool
    micro_batches: int
    simulated_s: float
    eq7_s: float
    tokens_per_s: float
    mfu: float
    bubble_share: float
    memory_gib_per_gpu: float
    fits_memory: bool
    simulated: bool = True  # False: does not fit, so not simulated; simulated_s is Eq. 7's

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Skipped:
    layout: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"layout": self.layout, "reason": self.reason}


@dataclass(frozen=True)
class SweepResult:
    """Layouts ranked: those that fit in memory first, then by simulated iteration time."""

    scenario: str
    gpus: int
    global_batch: int
    gpu_mem_gib: float
    rows: tuple[SweepRow, ...]
    skipped: tuple[Skipped, ...]

    @property
    def best(self) -> SweepRow | None:
        return self.rows[0] if self.rows and self.rows[0].fits_memory else None

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        rows = self.rows if top is None else self.rows[:top]
        return {"scenario": self.scenario, "gpus": self.gpus, "global_batch": self.global_batch,
                "layouts_tried": len(self.rows) + len(self.skipped), "layouts_ranked": len(self.rows),
                "layouts": [r.to_dict() for r in rows], "skipped": [s.to_dict() for s in self.skipped]}


def sweep_layouts(base: Scenario, *, pps: Sequence[int] | None = None, mps: Sequence[int] | None = None,
                  cps: Sequence[int] | None = None, sps: Sequence[bool] | None = None,
                  reference_data: str | None = None, cache_dir: str | None = None,
                  progress: Callable[[int], None] | None = None,
                  check: Callable[[Scenario], None] | None = None) -> SweepResult:
    """Predict, simulate and memory-check every layout of ``base``'s GPU count (module doc).

    ``check`` is called on every candidate scenario before it is built (the resource guard);
    a :class:`ConfigError` it raises skips that layout with its message as the reason.
    """
    from trainsim.operators.spec import check_model_fits
    from trainsim.scenarios.compose import predict, simulate_prediction

    gpus = base.gpus
    tr = base.training
    global_batch = tr.micro_batch * tr.micro_batches * base.parallelism.dp
    candidates = layouts(gpus, divisors(gpus) if pps is None else pps, divisors(gpus) if mps is None else mps,
                         [base.parallelism.cp] if cps is None else cps)
    sp_choices = [base.parallelism.sequence_parallel] if sps is None else list(dict.fromkeys(sps))
    rows: list[SweepRow] = []
    skipped: list[Skipped] = []
    for (pp, mp, dp, cp), sp in ((c, sp) for c in candidates for sp in sp_choices):
        name = layout_name(pp, mp, dp, cp, sp and mp > 1)
        if sp and mp == 1 and False in sp_choices:
            if progress is not None:
                progress(1)
            continue  # sequence parallelism over one MP rank is the layout without it
        try:
            if global_batch % (tr.micro_batch * dp):
                raise ConfigError("parallelism.dp", f"dp {dp} does not divide the global batch {global_batch} "
                                                    f"at micro_batch {tr.micro_batch}")
            par = dataclasses.replace(base.parallelism, pp=pp, mp=mp, dp=dp, cp=cp, sequence_parallel=sp)
            training = dataclasses.replace(tr, micro_batches=global_batch // (tr.micro_batch * dp))
            sc = dataclasses.replace(base, parallelism=par, training=training, name=f"{base.name} {name}")
            check_model_fits(sc.model, par)
            if check is not None:
                check(sc)
            pred = predict(sc, reference_data=reference_data, cache_dir=cache_dir)
            fit = pred.memory_fit
            sim = simulate_prediction(pred) if fit.fits else None  # a layout that cannot run is not simulated
        except ConfigError as e:
            skipped.append(Skipped(name, str(e)))
            continue
        finally:
            if progress is not None:
                progress(1)
        t = sim.iteration_s if sim is not None else pred.eq7.iteration_s
        rows.append(SweepRow(
            layout=name, pp=pp, mp=mp, dp=dp, cp=cp, sequence_parallel=sp and mp > 1,
            micro_batches=training.micro_batches, simulated_s=t, eq7_s=pred.eq7.iteration_s,
            tokens_per_s=sim.tokens_per_s or 0.0 if sim is not None else pred.tokens_per_s(t),
            mfu=sim.mfu or 0.0 if sim is not None else pred.mfu(t),
            bubble_share=sim.bubble_share if sim is not None else 0.0, memory_gib_per_gpu=fit.needed_gib,
            fits_memory=fit.fits, simulated=sim is not None,
        ))
    rows.sort(key=lambda r: (not r.fits_memory, r.simulated_s))
    return SweepResult(base.name, gpus, global_batch, base.cluster.gpu.mem_gib, tuple(rows), tuple(skipped))


def layout_name(pp: int, mp: int, dp: int, cp: int = 1, sp: bool = False) -> str:
    """``pp-mp-dp``, with ``-cpN`` and ``-sp`` where used."""
    return f"{pp}-{mp}-{dp}" + (f"-cp{cp}" if cp > 1 else "") + ("-sp" if sp else "")


def count_layouts(gpus: int, pps: Sequence[int] | None, mps: Sequence[int] | None,
                  cps: Sequence[int] | None = None, sps: Sequence[bool] | None = None) -> int:
    return len(layouts(gpus, divisors(gpus) if pps is None else pps, divisors(gpus) if mps is None else mps,
                       cps or (1,))) * (len(set(sps)) if sps else 1)
