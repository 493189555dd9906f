"""``kvcore simulate --speculative-config JSON`` takes what vLLM 0.32 takes, and reads it
as vLLM does (kvcore.sim.speculative).

* vLLM's own serve parser (``EngineArgs.add_cli_args``) parses the flag as kvcore
  writes it, to the same object;
* generated n-gram configs (num_speculative_tokens, the rejection sampler, synthetic
  rates and lengths, prompt lookup bounds, an unknown field, ``tensor_parallel_size``):
  vLLM's ``SpeculativeConfig`` accepts exactly those kvcore accepts, and the synthetic
  per-position rates kvcore simulates are the ones vLLM resolves;
* per method (vLLM's functions called on the parsed settings, no draft model loaded):
  ``use_eagle`` / ``use_eagle_block_drop``, ``VllmConfig.num_lookahead_tokens`` and
  ``max_num_new_slots_for_drafting`` (0 for every method kvcore schedules: no
  drafting slots) equal kvcore's; the MTP aliases and the field list are vLLM's.

Not covered: building vLLM's SpeculativeConfig for eagle / eagle3 / mtp (vLLM loads
the draft model's or target's Hugging Face config, which needs the checkpoint).
"""

from __future__ import annotations

import dataclasses
import json
import types
from types import SimpleNamespace
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError
from kvcore.sim.speculative import (
    _MTP_ALIASES,
    SCHEDULED_METHODS,
    VLLM_FIELDS,
    length_rates,
    parse_speculative_config,
)

pytest.importorskip("vllm")


@pytest.fixture(scope="module")
def parser() -> Any:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return EngineArgs.add_cli_args(FlexibleArgumentParser())


def _vllm_accepts(d: dict[str, Any]) -> Any:
    from vllm.config.speculative import SpeculativeConfig

    try:
        return SpeculativeConfig(**d)
    except (ValueError, TypeError):  # pydantic's ValidationError is a ValueError
        return None


def _kvcore_accepts(d: dict[str, Any]) -> Any:
    try:
        return parse_speculative_config(json.dumps(d))
    except ConfigError:
        return None


_RATES = st.lists(st.floats(-0.2, 1.2, allow_nan=False), min_size=0, max_size=5)
_CONFIGS = st.fixed_dictionaries(
    {"method": st.sampled_from(["ngram", "ngram_gpu"]),
     "num_speculative_tokens": st.integers(-1, 4)},
    optional={"rejection_sample_method": st.sampled_from(["standard", "synthetic",
                                                          "block"]),
              "synthetic_acceptance_rates": _RATES,
              "synthetic_acceptance_length": st.floats(0.0, 6.5, allow_nan=False),
              "prompt_lookup_min": st.integers(0, 6),
              "prompt_lookup_max": st.integers(0, 6),
              "tensor_parallel_size": st.just(2),
              "draft_tokens": st.just(3)})




@st.composite
def _synthetic(draw: Any) -> dict[str, Any]:
    """Synthetic-sampler configs near the valid ones (sorted rates of about k entries,
    lengths around [1, k + 1])."""
    k = draw(st.integers(1, 4))
    d: dict[str, Any] = {"method": "ngram", "num_speculative_tokens": k,
                         "rejection_sample_method": "synthetic"}
    if draw(st.booleans()):
        n = draw(st.sampled_from([k, k, k, k - 1, k + 1]))
        rates = sorted(draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)),
                       reverse=draw(st.integers(0, 5)) > 0)
        d["synthetic_acceptance_rates"] = rates
    if draw(st.booleans()):
        d["synthetic_acceptance_length"] = draw(st.floats(0.5, k + 1.5))
    return d


SEEN = {"accepted": 0, "refused": 0, "synthetic": 0}


@settings(max_examples=200)
@given(st.one_of(_CONFIGS, _synthetic()))
def test_accepts_what_vllm_accepts(d: dict[str, Any]) -> None:
    ours = _kvcore_accepts(d)
    theirs = _vllm_accepts(d)
    assert (ours is None) == (theirs is None), (d, ours, theirs)
    SEEN["refused" if ours is None else "accepted"] += 1
    if ours is None:
        return
    SEEN["synthetic"] += theirs.rejection_sample_method == "synthetic"
    assert ours.method == theirs.method
    assert ours.num_speculative_tokens == theirs.num_speculative_tokens
    if theirs.rejection_sample_method == "synthetic":
        assert list(ours.synthetic_acceptance_rates) == pytest.approx(
            theirs.synthetic_acceptance_rates, abs=0)
    else:
        assert ours.synthetic_acceptance_rates is None


def test_generated_configs_were_both_accepted_and_refused() -> None:
    """Runs after the generated cases (same module, file order)."""
    if not SEEN["accepted"] + SEEN["refused"]:
        pytest.skip("run with the whole module")
    assert SEEN["accepted"] >= 10 and SEEN["refused"] >= 10 and SEEN["synthetic"] >= 3, \
        SEEN


@pytest.mark.parametrize("text", [
    '{"method": "ngram", "num_speculative_tokens": 3}',
    '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}',
    '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
    '"num_speculative_tokens": 3}',
    '{"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": '
    '"synthetic", "synthetic_acceptance_length": 2.5}',
])
def test_vllm_serve_parses_the_flag(parser: Any, text: str) -> None:
    ns = parser.parse_args(["--model", "m", "--speculative-config", text])
    assert ns.speculative_config == json.loads(text)
    assert parse_speculative_config(text).config == json.loads(text)


def _vllm_view(method: str, k: int, drop_off: bool) -> tuple[bool, int, int]:
    """vLLM's (use_eagle_block_drop, num_lookahead_tokens, drafting slots) of a method,
    its own functions on a namespace of the fields they read."""
    from vllm.config.speculative import SpeculativeConfig
    from vllm.config.vllm import VllmConfig

    sc = SimpleNamespace(method=method, num_speculative_tokens=k,
                         disable_eagle_block_drop=drop_off, parallel_drafting=False,
                         draft_model_config=None)
    for name in ("use_eagle", "use_eagle_block_drop", "use_dflash", "use_dspark",
                 "uses_draft_model"):
        setattr(sc, name, types.MethodType(getattr(SpeculativeConfig, name), sc))
    vc = SimpleNamespace(speculative_config=sc, num_speculative_tokens=k)
    return (sc.use_eagle_block_drop(), VllmConfig.num_lookahead_tokens.fget(vc),
            SpeculativeConfig.max_num_new_slots_for_drafting.fget(sc))


@settings(max_examples=40)
@given(st.sampled_from(SCHEDULED_METHODS), st.integers(1, 8), st.booleans())
def test_scheduling_settings_are_vllms(method: str, k: int, drop_off: bool) -> None:
    d: dict[str, Any] = {"method": method, "num_speculative_tokens": k,
                         "disable_eagle_block_drop": drop_off}
    if method in ("eagle", "eagle3"):
        d["model"] = "some/head"
    s = parse_speculative_config(d)
    block_drop, lookahead, slots = _vllm_view(method, k, drop_off)
    assert s.use_eagle == block_drop
    assert s.num_lookahead_tokens == lookahead
    assert slots == 0  # the engine models no drafting slots


def test_mtp_aliases_and_fields_are_vllms() -> None:
    from vllm.config.speculative import MTPModelTypes, SpeculativeConfig

    assert set(_MTP_ALIASES) | {"mtp"} == set(get_args(MTPModelTypes))
    assert list(VLLM_FIELDS) == [f.name for f in dataclasses.fields(SpeculativeConfig)]


@settings(max_examples=60)
@given(st.integers(1, 8), st.floats(1.0, 9.0))
def test_length_schedule_is_vllms(k: int, length: float) -> None:
    from vllm.config.speculative import SpeculativeConfig

    if length > k + 1:
        return
    assert list(length_rates(length, k)) == SpeculativeConfig._acceptance_length_to_rates(
        length, k)


@settings(max_examples=30)
@given(st.sampled_from(SCHEDULED_METHODS), st.integers(1, 6),
       st.sampled_from([None, 2, 5]), st.text(alphabet="ab '\"$", max_size=6))
def test_tune_line_carries_the_config_to_vllm(parser: Any, method: str, k: int,
                                              lookup: Any, name: str) -> None:
    """``kvcore tune``'s ``vllm serve`` line with a fixed ``--speculative-config``:
    vLLM's parser reads back the object kvcore simulated (shell quoting included)."""
    import shlex

    from kvcore.sim.tune import vllm_command

    cfg: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if method in ("eagle", "eagle3"):
        cfg["model"] = "head/" + name
    if lookup is not None:
        cfg["prompt_lookup_max"] = lookup
    line = vllm_command("llama-3.1-8b", {"tensor_parallel_size": 1,
                                         "max_num_batched_tokens": 2048,
                                         "max_num_seqs": 16, "kv_cache_dtype": "auto",
                                         "speculative": {"config": cfg, "rates": [0.5] * k,
                                                         "seed": 0}})
    argv = shlex.split(line)
    ns = parser.parse_args(["--model", argv[2], *argv[3:]])
    assert ns.speculative_config == cfg
    assert parse_speculative_config(ns.speculative_config).config == cfg


# ---- the dotted form (tester 4, finding 6): kvcore.cli._dotted_args = vLLM's ----------

_KEYS = st.sampled_from(["method", "num_speculative_tokens", "prompt_lookup_max",
                         "a.b", "a.c", "rates+"])
_VALUES = st.one_of(st.sampled_from(["ngram", "3", "0.5", "1k", "25.6k", "2K", "1.5K", "true",
                                     "null", "[1, 2]", '{"x": 1}', "a,b", "x.y"]),
                    st.integers(-5, 5).map(str))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_KEYS, _VALUES, st.booleans()), min_size=1, max_size=5),
       st.booleans())
def test_dotted_args_read_as_vllms_parser_reads_them(items: list[tuple[str, str, bool]],
                                                     with_json: bool) -> None:
    """Generated ``--speculative-config.KEY V`` / ``--speculative-config.KEY=V`` lists
    (nested keys, the ``+`` list form, JSON, human-readable ints, strings), with and
    without a JSON ``--speculative-config`` before them: kvcore's rewrite parses to the
    object vLLM's FlexibleArgumentParser gives."""
    import argparse

    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from kvcore.cli import _dotted_args

    argv: list[str] = ["--other", "1"]
    if with_json:
        argv += ["--speculative-config", '{"method": "eagle"}']
    for key, value, eq in items:
        flag = f"--speculative-config.{key}"
        argv += [f"{flag}={value}"] if eq else [flag, value]
    vp = FlexibleArgumentParser()
    vp.add_argument("--speculative-config", type=json.loads)
    vp.add_argument("--other")
    want = vp.parse_args(list(argv)).speculative_config
    kp = argparse.ArgumentParser()
    kp.add_argument("--speculative-config", type=json.loads)
    kp.add_argument("--other")
    got = kp.parse_args(_dotted_args(list(argv))).speculative_config
    assert got == want
