"""A config typo is not a silent answer (issue #23 item 4).

* an unknown key within 1-2 edits of a field kvcore reads (or an alias other projects
  use: ``num_kv_heads``) warns naming the field it resembles, when that field is absent;
  keys far from every field do not warn, and no real config warns;
* model names and flags get "did you mean" (vLLM's ``--tensor-parallel-size`` is an alias
  of ``--tp``); a missing ``./path/config.json`` says the file is missing.

Near misses are generated from the field set by edit operations (deletion, insertion,
substitution, adjacent transposition), not only the issue's examples.
"""

from __future__ import annotations

import glob
import json
import string
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvcore.errors import ConfigError
from kvcore.models.config import (
    ConfigTypoWarning,
    _max_typo_distance,
    edit_distance,
    parse_model_config,
    resembles,
)
from kvcore.models.embedded import CONFIG_DIR
from kvcore.models.fields import READ_FIELDS, SEEN_FIELDS

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
KNOWN = READ_FIELDS | SEEN_FIELDS
TARGETS = sorted(t for t in READ_FIELDS if _max_typo_distance(t) > 0)
LETTERS = string.ascii_lowercase + "_"


def _llama() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIG_DIR / "llama-3.1-8b.json").read_text())
    return data


def _typos(cfg: dict[str, Any]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            parse_model_config(cfg, name="typo")
        except ConfigError:  # a required field renamed: the warning came first
            pass
    return [str(w.message) for w in caught if issubclass(w.category, ConfigTypoWarning)]


@st.composite
def near_miss(draw: Any) -> tuple[str, str]:
    """(target, a key 1 or 2 edits from it that is no known field)."""
    target = draw(st.sampled_from(TARGETS))
    key = target
    for _ in range(draw(st.integers(1, _max_typo_distance(target)))):
        op = draw(st.sampled_from(["delete", "insert", "substitute", "transpose"]))
        i = draw(st.integers(0, len(key) - 1))
        c = draw(st.sampled_from(LETTERS))
        if op == "delete" and len(key) > 1:
            key = key[:i] + key[i + 1:]
        elif op == "insert":
            key = key[:i] + c + key[i:]
        elif op == "substitute":
            key = key[:i] + c + key[i + 1:]
        elif i + 1 < len(key):
            key = key[:i] + key[i + 1] + key[i] + key[i + 2:]
    assume(key != target and key not in KNOWN and not key.startswith("_"))
    return target, key


def test_edit_distance_reference_cases() -> None:
    # Levenshtein's classic example, and a transposition counted once (OSA)
    assert edit_distance("kitten", "sitting", 5) == 3
    assert edit_distance("num_key_value_heads", "num_key_value_head") == 1
    assert edit_distance("hidden_size", "hidden_szie") == 1
    assert edit_distance("abc", "xyz", 3) == 3


def test_issue_examples_warn() -> None:
    """num_key_value_head / num_kv_heads: today a silent MHA plan (4x the KV)."""
    for typo in ("num_key_value_head", "num_kv_heads"):
        cfg = _llama()
        cfg[typo] = cfg.pop("num_key_value_heads")
        msgs = _typos(cfg)
        assert len(msgs) == 1 and typo in msgs[0] and "'num_key_value_heads'" in msgs[0]


@SETTINGS
@given(pair=near_miss())
def test_near_misses_warn_naming_the_field(pair: tuple[str, str]) -> None:
    target, key = pair
    guess = resembles(key)
    assert guess is not None
    # the guess is within the allowed distance (another field may be as close as target)
    assert edit_distance(key, guess, 3) <= max(_max_typo_distance(guess), 1)
    assert edit_distance(key, target, 3) <= _max_typo_distance(target)
    cfg = _llama()
    cfg.pop(guess, None)
    cfg[key] = 1
    msgs = _typos(cfg)
    assert any(repr(key) in m and repr(guess) in m for m in msgs)


@SETTINGS
@given(key=st.text(LETTERS, min_size=3, max_size=24))
def test_keys_far_from_every_field_do_not_warn(key: str) -> None:
    assume(key not in KNOWN and not key.startswith("_"))
    from kvcore.models.config import FIELD_ALIASES

    assume(key not in FIELD_ALIASES)
    assume(all(edit_distance(key, t, 3) > _max_typo_distance(t) for t in READ_FIELDS))
    cfg = _llama()
    cfg[key] = 1
    assert _typos(cfg) == []


def test_a_present_field_is_not_a_typo_target() -> None:
    """``num_key_value_head`` beside a present ``num_key_value_heads`` is noise, not a
    typo that changed the plan."""
    cfg = _llama()
    cfg["num_key_value_head"] = 3
    assert _typos(cfg) == []


def test_no_real_config_warns() -> None:
    files = sorted(CONFIG_DIR.glob("*.json"))
    files += sorted(Path(p) for p in glob.glob(str(ROOT / "tests" / "data" / "**" / "*.json"),
                                               recursive=True))
    checked = 0
    for f in files:
        data = json.loads(f.read_text())
        if not isinstance(data, dict) or not ("model_type" in data or "text_config" in data):
            continue
        checked += 1
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                parse_model_config(data, source=str(f))
            except Exception:  # noqa: BLE001 - some test configs are invalid on purpose
                pass
        assert [w for w in caught if issubclass(w.category, ConfigTypoWarning)] == [], f
    assert checked >= 30


def test_fields_module_is_current() -> None:
    """kvcore/models/fields.py lists every field the readers name (regenerate with
    scripts/gen_config_fields.py after adding a read)."""
    import importlib.util

    script = ROOT / "scripts" / "gen_config_fields.py"
    if not script.is_file() or not (ROOT / "kvcore").is_dir():
        pytest.skip("needs the checkout (scripts/ and kvcore/ sources)")
    spec = importlib.util.spec_from_file_location("gen", script)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.read_fields() <= READ_FIELDS


# ---- model names, flags, paths ---------------------------------------------------------------

@pytest.mark.parametrize("typo,name", [("llama3.1-8b", "llama-3.1-8b"),
                                       ("qwen3-30b-a3", "qwen3-30b-a3b"),
                                       ("deepseekv3", "deepseek-v3"),
                                       ("gpt-oss20b", "gpt-oss-20b")])
def test_model_names_did_you_mean(cli: Any, typo: str, name: str) -> None:
    code, out, err = cli("plan", typo)
    assert code == 2 and f"did you mean {name!r}" in err


@SETTINGS
@given(data=st.data())
def test_generated_model_name_typos(data: Any) -> None:
    from kvcore.models.config import suggest_model_name
    from kvcore.models.embedded import embedded_names

    name = data.draw(st.sampled_from(sorted(embedded_names())))
    i = data.draw(st.integers(0, len(name) - 1))
    typo = name[:i] + name[i + 1:]  # one character dropped
    assume(typo not in embedded_names())
    guess = suggest_model_name(typo)
    assert guess is not None
    assert edit_distance(typo, guess, 3) <= 2


@pytest.mark.parametrize("flag", ["--tensor-parallel-size", "-tp"])
def test_vllm_tp_flag_is_an_alias(cli: Any, flag: str) -> None:
    code, out, _ = cli("plan", "llama-3.1-8b", flag, "2", "--json")
    assert code == 0
    assert json.loads(out)["groups"][0]["spec"]["num_kv_heads"] == 4  # 8 KV heads / TP 2


@pytest.mark.parametrize("flag,hint", [("--gpu-memroy", "--gpu-memory"),
                                       ("--max-model-length", "--max-model-len"),
                                       ("--kv-cache-dtpye", "--kv-cache-dtype"),
                                       ("--block-szie", "--block-size")])
def test_flag_typos_did_you_mean(cli: Any, flag: str, hint: str) -> None:
    code, out, err = cli("plan", "llama-3.1-8b", flag, "16")
    assert code == 2 and f"did you mean {hint}" in err


def test_vllm_flag_kvcore_spells_otherwise(cli: Any) -> None:
    code, out, err = cli("plan", "llama-3.1-8b", "--kv-cache-memory-bytes", "8G")
    assert code == 2 and "vLLM's spelling of --kv-cache-memory" in err
    # simulate takes vLLM's --tensor-parallel-size as an alias (tester12 F11): the run
    # gets as far as the trace
    code, out, err = cli("simulate", "llama-3.1-8b", "--trace", "x.jsonl",
                         "--tensor-parallel-size", "2")
    assert code == 2 and "x.jsonl" in err and "unrecognized" not in err


@pytest.mark.parametrize("path", ["./nope/config.json", "nope/config.json", "x.json"])
def test_missing_config_file_says_missing(cli: Any, tmp_path: Path, path: str,
                                          monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("plan", path)
    assert code == 2 and "no such file" in err and path in err
