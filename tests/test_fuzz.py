"""Fuzzing the scenario loader and the resource guard: the only exception ever raised is ConfigError.

Scenario mappings with random sections, keys and values of random types (huge integers, NaN and
infinities, nested lists and mappings, strings with any character) are written as YAML files, raw
bytes are written as scenario files, and random ``--set`` strings are applied; then
``load_scenario`` and ``check_resources`` (simulated and closed-form) run on the result.

500 examples run by default; ``pytest -m fuzz`` runs 10,000.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainsim.operators import ConfigError
from trainsim.scenarios.guard import check_resources
from trainsim.scenarios.schema import SECTIONS, load_scenario

BASE = {
    "model": {"preset": "llemma-7b"},
    "training": {"micro_batch": 4, "micro_batches": 8},
    "parallelism": {"pp": 4, "mp": 2, "dp": 2},
    "cluster": {"preset": "perlmutter"},
    "profile": {"name": "roofline"},
}
KNOWN_KEYS = {
    "model": ["preset", "name", "hidden", "heads", "layers", "seq_len", "vocab", "ffn_hidden", "norm", "attention",
              "rotary", "fwd_mp_syncs", "bwd_mp_syncs"],
    "training": ["micro_batch", "micro_batches", "precision", "recompute", "zero_stage", "dp_bucket", "framework"],
    "parallelism": ["pp", "mp", "dp", "schedule", "virtual_stages"],
    "cluster": ["preset", "gpus_per_node", "nvlink_gbps", "nic_gbps", "nics_per_node", "intra_latency_us",
                "inter_latency_us", "gpu", "max_nodes"],
    "profile": ["name", "reference_data"],
    "simulation": ["mode", "seed", "jitter", "overlap_dp"],
}
WORDS = ["gpt-20b", "llama-13b", "roofline", "perlmutter", "vista", "dgx-h100", "h100-sxm", "fp16", "bf16", "full",
         "none", "1f1b", "gpipe", "interleaved-1f1b", "realistic", "ideal", "layernorm", "flash", "hf", "megatron",
         "reference:Vista", "roofline:h100-sxm", "noise", "congestion", "compute", "sigma", "nic", "nvlink"]

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
integers = st.one_of(
    st.integers(min_value=-4, max_value=70),
    st.integers(),
    st.sampled_from([0, 1, 2**20, 2**20 + 1, 2**24, 2**31, 2**48, 2**63, 2**64, 10**30, -(10**30), 10**4000]),
)
scalars = st.one_of(st.none(), st.booleans(), integers, st.floats(allow_nan=True, allow_infinity=True), text,
                    st.sampled_from(WORDS))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(text, st.sampled_from(WORDS)), inner, max_size=4)),
    max_leaves=12)


@st.composite
def scenario_mappings(draw):
    data = {k: dict(v) for k, v in BASE.items()} if draw(st.booleans()) else {}
    for _ in range(draw(st.integers(0, 6))):
        section = draw(st.one_of(st.sampled_from(SECTIONS), st.sampled_from(["name", "description"]), text))
        if draw(st.integers(0, 9)) == 0:  # a whole section of any shape
            data[section] = draw(values)
            continue
        sec = data.get(section)
        if not isinstance(sec, dict):
            sec = data[section] = {}
        key = draw(st.one_of(st.sampled_from(KNOWN_KEYS.get(section, ["x"])), text))
        sec[key] = draw(values)
    return data


set_strings = st.one_of(
    st.text(max_size=40),  # anything at all, surrogates (non-UTF-8 argv bytes) included
    st.builds(lambda s, k, v: f"{s}.{k}={v}", st.sampled_from(SECTIONS),
              st.sampled_from(sorted({k for ks in KNOWN_KEYS.values() for k in ks})),
              st.one_of(text, st.sampled_from(WORDS), integers.map(str), st.just("[1, {a: b}]"), st.just(".nan"))),
)
raw_files = st.one_of(st.binary(max_size=200), text.map(lambda t: t.encode("utf-8", "surrogatepass")))


def _check(path: Path, overrides: list[str]) -> None:
    try:
        sc = load_scenario(str(path), overrides)
    except ConfigError:
        return
    for simulate in (True, False):
        try:
            check_resources(sc, simulate=simulate)
        except ConfigError:
            pass


def _fuzz(data, overrides, raw) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.yaml"
        if raw is not None:
            path.write_bytes(raw)
        else:
            path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
        _check(path, overrides)  # any exception but ConfigError fails the test


FUZZ_ARGS = (st.one_of(scenario_mappings(), st.just(BASE)), st.lists(set_strings, max_size=3),
             st.one_of(st.none(), st.none(), st.none(), raw_files))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*FUZZ_ARGS)
def test_loader_and_guard_raise_only_config_error(data, overrides, raw):
    _fuzz(data, overrides, raw)


@pytest.mark.fuzz
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*FUZZ_ARGS)
def test_loader_and_guard_raise_only_config_error_10k(data, overrides, raw):
    _fuzz(data, overrides, raw)
