"""Pipeline schedules as pure step lists, one per stage (no SimPy here).

A stage process in :mod:`sim.processes` only walks the list its stage gets; all the
scheduling policy lives in these functions, which are tested on their own.

* :func:`one_f_one_b` — Megatron's non-interleaved 1F1B: stage ``s`` of ``pp`` runs
  ``min(pp - s - 1, m)`` warm-up forwards, then alternates one forward and one
  backward, then drains the remaining backwards.
* :func:`gpipe` — all forwards, then all backwards (in reverse micro-batch order,
  the order autograd unwinds a GPipe mini-batch).
* :func:`interleaved_one_f_one_b` — Megatron's interleaved 1F1B with ``v`` model
  chunks (virtual stages) per pipeline rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from trainsim.operators.errors import ConfigError
from trainsim.operators.spec import Schedule


class StepKind(str, Enum):
    """A forward or a backward step (equal to the strings ``"F"`` and ``"B"``)."""

    F = "F"
    B = "B"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


F, B = StepKind.F, StepKind.B


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    micro: int
    chunk: int = 0  # model chunk (virtual stage) on this pipeline rank; 0 unless interleaved


def _check(pp: int, m: int, stage: int) -> None:
    if pp < 1:
        raise ConfigError("parallelism.pp", f"must be >= 1, got {pp}")
    if m < 1:
        raise ConfigError("training.micro_batches", f"must be >= 1, got {m}")
    if not 0 <= stage < pp:
        raise IndexError(f"stage {stage} outside 0..{pp - 1}")


def one_f_one_b(pp: int, m: int, stage: int) -> tuple[Step, ...]:
    _check(pp, m, stage)
    warmup = min(pp - stage - 1, m)
    steady = m - warmup
    steps = [Step(F, i) for i in range(warmup)]
    for i in range(steady):
        steps.append(Step(F, warmup + i))
        steps.append(Step(B, i))
    steps += [Step(B, steady + i) for i in range(warmup)]
    return tuple(steps)


def gpipe(pp: int, m: int, stage: int) -> tuple[Step, ...]:
    _check(pp, m, stage)
    return tuple([Step(F, i) for i in range(m)] + [Step(B, i) for i in reversed(range(m))])


def interleaved_one_f_one_b(pp: int, m: int, stage: int, chunks: int) -> tuple[Step, ...]:
    """Megatron-LM's ``forward_backward_pipelining_with_interleaving`` order.

    Model chunk ``c`` of rank ``s`` is virtual stage ``c * pp + s``. The k-th forward
    of a rank runs chunk ``(k mod pp*v) // pp`` on micro-batch ``(k // (pp*v)) * pp +
    k mod pp``; backwards visit chunks in the reverse order. With ``v == 1`` this is
    plain 1F1B.
    """
    _check(pp, m, stage)
    if chunks < 1:
        raise ConfigError("parallelism.virtual_stages", f"must be >= 1, got {chunks}")
    if m % pp:
        raise ConfigError("training.micro_batches",
                          f"the interleaved schedule needs micro_batches ({m}) to be a multiple of pp ({pp})")
    if chunks == 1:
        return one_f_one_b(pp, m, stage)
    total = m * chunks
    group = pp * chunks
    if m == pp:  # Megatron: every forward is a warm-up when m == pp
        warmup = total
    else:
        warmup = min((pp - stage - 1) * 2 + (chunks - 1) * pp, total)

    def step(kind: StepKind, k: int) -> Step:
        chunk = (k % group) // pp
        if kind is B:
            chunk = chunks - chunk - 1
        micro = (k // group) * pp + k % pp
        return Step(kind, micro, chunk)

    steps = [step(F, k) for k in range(warmup)]
    remaining = total - warmup
    for k in range(remaining):
        steps.append(step(F, warmup + k))
        steps.append(step(B, k))
    steps += [step(B, k) for k in range(remaining, total)]
    return tuple(steps)


def build_schedule(schedule: Schedule, pp: int, m: int, stage: int, chunks: int = 1) -> tuple[Step, ...]:
    """The step list of one stage under a :class:`operators.spec.Schedule`."""
    if schedule is Schedule.ONE_F_ONE_B:
        return one_f_one_b(pp, m, stage)
    if schedule is Schedule.GPIPE:
        return gpipe(pp, m, stage)
    if schedule is Schedule.INTERLEAVED_1F1B:
        return interleaved_one_f_one_b(pp, m, stage, chunks)
    raise ConfigError("parallelism.schedule", f"unsupported schedule {schedule!r}")  # pragma: no cover
