"""Rank placement in Megatron order and the node span of each parallel group.

Megatron-LM builds its groups with the model-parallel (tensor) rank varying fastest, then the
context-parallel rank, then the data-parallel rank, then the pipeline stage::

    rank = stage * (dp * cp * mp) + dp_index * (cp * mp) + cp_index * mp + mp_index
    node = rank // gpus_per_node

So an MP group is ``mp`` consecutive ranks, a CP group ``cp`` ranks ``mp`` apart, and the
gradient group of a parameter shard (Megatron's data-parallel group with context parallelism:
every rank holding the same weights) ``dp * cp`` ranks ``mp`` apart; the P2P partner of a rank
on the next stage is ``dp * cp * mp`` ranks further on. With ``cp = 1`` the gradient group is
the DP group. A collective's
cost depends on its *span*: how many nodes the group touches and how many of its GPUs sit
on each (the ``[nodes, GPUs per node]`` features of the paper's Table I).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

from trainsim.operators.errors import ConfigError
from trainsim.operators.spec import Parallelism


class Placement:
    """Where every (stage, dp_index, mp_index) rank lives. Pure arithmetic; no state but the layout."""

    def __init__(self, par: Parallelism, gpus_per_node: int) -> None:
        if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1:
            raise ConfigError("cluster.gpus_per_node", f"must be a positive integer, got {gpus_per_node!r}")
        gpus = par.gpus
        if gpus % gpus_per_node:
            raise ConfigError("parallelism", f"{par.degrees} = {gpus} GPUs is not a multiple of "
                                             f"cluster.gpus_per_node = {gpus_per_node}")
        self.par = par
        self.gpus_per_node = gpus_per_node
        self.gpus = gpus
        # Group spans are checked here so that a layout whose groups straddle nodes unevenly
        # fails at construction with a field name, not later inside a cost model.
        self._mp_span = self._uniform_span("mp", list(self.mp_groups()))
        self._dp_span = self._uniform_span("dp", list(self.dp_groups()))
        self._cp_span = self._uniform_span("cp", list(self.cp_groups())) if par.cp > 1 else (1, 1)

    def __repr__(self) -> str:
        p = self.par
        return f"Placement(pp={p.pp}, mp={p.mp}, dp={p.dp}, cp={p.cp}, gpus_per_node={self.gpus_per_node})"

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    def rank(self, stage: int, dp_index: int, mp_index: int, cp_index: int = 0) -> int:
        p = self.par
        if not (0 <= stage < p.pp and 0 <= dp_index < p.dp and 0 <= mp_index < p.mp and 0 <= cp_index < p.cp):
            raise IndexError(f"(stage, dp_index, mp_index, cp_index) = ({stage}, {dp_index}, {mp_index}, {cp_index}) "
                             f"outside pp={p.pp}, dp={p.dp}, mp={p.mp}, cp={p.cp}")
        return stage * (p.dp * p.cp * p.mp) + (dp_index * p.cp + cp_index) * p.mp + mp_index

    def coords(self, rank: int) -> tuple[int, int, int]:
        """Inverse of :meth:`rank` for ``cp = 1``: (stage, dp_index, mp_index); see :meth:`coords4`."""
        stage, dp_index, mp_index, _ = self.coords4(rank)
        return stage, dp_index, mp_index

    def coords4(self, rank: int) -> tuple[int, int, int, int]:
        """Inverse of :meth:`rank`: (stage, dp_index, mp_index, cp_index)."""
        if not 0 <= rank < self.gpus:
            raise IndexError(f"rank {rank} outside 0..{self.gpus - 1}")
        p = self.par
        stage, rest = divmod(rank, p.dp * p.cp * p.mp)
        rest, mp_index = divmod(rest, p.mp)
        dp_index, cp_index = divmod(rest, p.cp)
        return stage, dp_index, mp_index, cp_index

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def mp_group(self, stage: int, dp_index: int, cp_index: int = 0) -> tuple[int, ...]:
        first = self.rank(stage, dp_index, 0, cp_index)
        return tuple(range(first, first + self.par.mp))

    def dp_group(self, stage: int, mp_index: int) -> tuple[int, ...]:
        """The gradient group of MP rank ``mp_index`` of a stage: its ``dp * cp`` ranks."""
        first = self.rank(stage, 0, mp_index)
        return tuple(range(first, first + self.par.grad_ranks * self.par.mp, self.par.mp))

    def cp_group(self, stage: int, dp_index: int, mp_index: int) -> tuple[int, ...]:
        """The context-parallel ring of one (stage, replica, MP rank), in ring order."""
        first = self.rank(stage, dp_index, mp_index)
        return tuple(range(first, first + self.par.cp * self.par.mp, self.par.mp))

    def mp_groups(self) -> Iterator[tuple[int, ...]]:
        for s in range(self.par.pp):
            for d in range(self.par.dp):
                for c in range(self.par.cp):
                    yield self.mp_group(s, d, c)

    def cp_groups(self) -> Iterator[tuple[int, ...]]:
        for s in range(self.par.pp):
            for d in range(self.par.dp):
                for m in range(self.par.mp):
                    yield self.cp_group(s, d, m)

    def dp_groups(self) -> Iterator[tuple[int, ...]]:
        for s in range(self.par.pp):
            for m in range(self.par.mp):
                yield self.dp_group(s, m)

    def p2p_pairs(self, stage: int) -> Iterator[tuple[int, int]]:
        """(sender, receiver) rank pairs between ``stage`` and ``stage + 1``."""
        self._check_boundary(stage)
        step = self.par.dp * self.par.cp * self.par.mp
        first = stage * step
        for r in range(first, first + step):
            yield r, r + step

    def span(self, ranks: Iterable[int]) -> tuple[int, int]:
        """(number of distinct nodes, most GPUs of the group on one node)."""
        counts = Counter(r // self.gpus_per_node for r in ranks)
        if not counts:
            raise ValueError("span of an empty group")
        return len(counts), max(counts.values())

    def mp_span(self) -> tuple[int, int]:
        return self._mp_span

    def dp_span(self) -> tuple[int, int]:
        """Span of a gradient group (DP x CP ranks)."""
        return self._dp_span

    def cp_span(self) -> tuple[int, int]:
        return self._cp_span

    def cp_ring_span(self) -> tuple[int, int]:
        """The P2P span a CP ring step is priced at: (2, 1) if the ring crosses nodes (every rank
        steps in lock-step, so its slowest hop sets the pace), else (1, 2)."""
        return (2, 1) if self._cp_span[0] > 1 else (1, 2)

    def p2p_span(self, stage: int) -> tuple[int, int]:
        """(2, 1) if stage's first rank and its partner are on different nodes, else (1, 2).

        Decided by the (dp_index, mp_index) = (0, 0) pair, as the reference does. When
        ``dp * mp`` is a multiple of ``gpus_per_node`` (every layout whose stage fills whole
        nodes) all pairs of the boundary agree; otherwise some pairs may differ, and the link
        model (which looks at every pair) is the finer description.
        """
        self._check_boundary(stage)
        a, b = self.rank(stage, 0, 0), self.rank(stage + 1, 0, 0)
        return (2, 1) if self.node(a) != self.node(b) else (1, 2)

    def _check_boundary(self, stage: int) -> None:
        if not 0 <= stage < self.par.pp - 1:
            raise IndexError(f"stage boundary {stage} outside 0..{self.par.pp - 2}")

    def _uniform_span(self, name: str, groups: Sequence[tuple[int, ...]]) -> tuple[int, int]:
        gpn = self.gpus_per_node
        first = self.span(groups[0])
        for g in groups:
            counts = Counter(r // gpn for r in g)
            nodes, most = len(counts), max(counts.values())
            # A hierarchical collective needs the same number of GPUs on every node it
            # touches, and the [nodes, GPUs per node] features must describe every group.
            if nodes * most != len(g) or (nodes, most) != first:
                raise ConfigError(f"parallelism.{name}",
                                  f"{name.upper()} groups of {len(g)} ranks straddle nodes of "
                                  f"cluster.gpus_per_node = {gpn} unevenly (group {g[:8]}"
                                  f"{'...' if len(g) > 8 else ''}); choose {name} and the other degrees "
                                  f"so that each group fills whole nodes or evenly shares them")
        return first
