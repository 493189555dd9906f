"""Fuzz the GPU-fit path (issue #24 item 9): ``kvcore plan --gpu`` over mutated configs
(every field the typed readers read with --gpu, vision_config included), generated
``quantization_config`` variants, sweeps (comma lists, --csv, --plot), with the suite's
rule (tests/fuzz/fuzz_support.py): no traceback, no hang, no exit 0 on an input that is
invalid, one line on exit 2.  Plus a metamorphic part:

* more memory never gives fewer blocks (kv_cache_memory_bytes and --gpu-memory);
* a corrupted field (removed, null, junk) never yields a smaller model (whole-checkpoint
  weights) unless the field says so: its absence means "none of it" (a tower, MTP
  layers, shared experts: :data:`SHRINKS_WHEN_ABSENT`).

Counts: ``examples(default)`` per test (``KVCORE_FUZZ_EXAMPLES=N`` scales every test; the
long run is ``KVCORE_FUZZ_EXAMPLES=...``, see the module's report in the issue note).
The validity of a quantization variant is decided here, from vLLM 0.32's rules (cited
in :func:`quant_is_valid`), not by kvcore's code.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from fuzz_support import TALLY, check, examples, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kvcore_plugin_needs import served
from test_fuzz_configs import _JUNK, _WRONG, _file, _mutated, _write

from kvcore.models import config as config_module
from kvcore.models.embedded import embedded_names

WORK = Path(tempfile.mkdtemp(prefix="kvcore-fuzz-gpu-"))
#: a GPU every embedded config fits on (so that exit 0 is the baseline outcome)
GPU_ARGS = ["--json", "--gpu-memory", "4TiB", "--max-model-len", "auto"]
NAMES = served(embedded_names())
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))

# ---- --gpu over mutated configs ----------------------------------------------------------------

_READS: dict[str, dict[str, tuple[str, int | None]]] = {}


def gpu_reads(name: str) -> dict[str, tuple[str, int | None]]:
    """{field path: (kind, smallest minimum)} the typed readers read when planning the
    unmodified config with --gpu (weights and overhead included)."""
    if name not in _READS:
        seen: dict[str, tuple[str, int | None]] = {}

        def hook(kind: str, field: str, minimum: Any) -> None:
            if "[" in field or field.count(".") > 1:
                return
            old = seen.get(field)
            if old is None:
                seen[field] = (kind, minimum)
            elif old[0] == kind and minimum is not None and old[1] is not None:
                seen[field] = (kind, min(old[1], minimum))

        config_module.READ_HOOK = hook
        try:
            out = run_cli(["plan", str(_file(name)), *GPU_ARGS])
        finally:
            config_module.READ_HOOK = None
        assert out.code in (0, 2), (name, out.err[-500:])
        _READS[name] = seen
    return _READS[name]


def _baseline(name: str) -> dict[str, Any] | None:
    out = run_cli(["plan", str(_file(name)), *GPU_ARGS])
    return json.loads(out.out) if out.code == 0 else None


_BASE: dict[str, Any] = {}


def baseline(name: str) -> dict[str, Any] | None:
    if name not in _BASE:
        _BASE[name] = _baseline(name)
    return _BASE[name]


#: wrong values of the reads _WRONG does not cover (numbers; fields of two types)
_UNION_WRONG = {
    "float": [("x", "a string"), (True, "a boolean"), ([1], "a list"), ({}, "an object")],
    "int_or_list": [("x", "a string"), (True, "a boolean"), (2.5, "a fraction"),
                    ({"a": 1}, "an object"), (["x"], "a list of strings")],
    "int_or_str": [([1], "a list"), (True, "a boolean"), (2.5, "a fraction"),
                   ({}, "an object"), ("x", "a string not in its choices")],
}


def gpu_mutations(name: str) -> list[tuple[str, Any, bool, str]]:
    data = json.loads(_file(name).read_text())
    out: list[tuple[str, Any, bool, str]] = []
    for field, (kind, minimum) in sorted(gpu_reads(name).items()):
        if kind in _UNION_WRONG:
            values = list(_UNION_WRONG[kind])
        else:
            values = list(_WRONG[kind])
            if kind == "int" and minimum is not None and minimum > -7:
                values.append((-7, "negative"))
            if kind == "int" and minimum is not None and minimum > 0:
                values.append((0, "zero"))
        for value, what in values:
            out.append((field, value, True, f"{field} {what} ({kind} field, --gpu)"))
    keys = set(data) | set(data.get("text_config") or {})
    for sub in ("vision_config", "audio_config", "quantization_config"):
        if isinstance(data.get(sub), dict):
            keys |= {f"{sub}.{k}" for k in data[sub]}
    for key in sorted(keys):
        out.append((key, "<removed>", False, ""))
        for junk in _JUNK:
            out.append((key, junk, False, ""))
    return out


def _apply(raw: dict[str, Any], field: str, value: Any) -> dict[str, Any] | None:
    if value != "<removed>":
        return _mutated(raw, field, value)
    out = json.loads(json.dumps(raw))
    parts = field.split(".")
    for node in (out, out.get("text_config")):
        if not isinstance(node, dict):
            continue
        if len(parts) == 2 and isinstance(node.get(parts[0]), dict):
            node[parts[0]].pop(parts[1], None)
        elif len(parts) == 1:
            node.pop(field, None)
    return out


#: fields whose absence (or null) legitimately means "none of it": the model may get
#: smaller (a tower, MTP / next-n layers, shared experts, a latent or dense prefix, the
#: index of a checkpoint)
SHRINKS_WHEN_ABSENT = {
    "vision_config", "audio_config", "num_nextn_predict_layers", "mtp_num_hidden_layers",
    "n_shared_experts", "num_shared_experts", "shared_expert_intermediate_size",
    "moe_shared_expert_intermediate_size", "first_k_dense_replace", "moe_latent_size",
    "q_lora_rank", "index_n_heads", "index_head_dim", "attention_bias", "mlp_bias",
    "intermediate_size_mlp", "v_head_dim", "global_head_dim", "swa_head_dim",
    "attn_output_gate", "add_full_attention_sink_bias", "add_swa_attention_sink_bias",
    "num_global_key_value_heads", "swa_num_attention_heads", "swa_num_key_value_heads",
    "swa_v_head_dim", "enable_moe_block", "mlp_layer_types", "moe_layer_freq",
    "decoder_sparse_step", "interleave_moe_layer_step", "mlp_only_layers",
    "hybrid_layer_pattern", "indexer_types", "deepstack_visual_indexes",
    "tie_word_embeddings", "spatial_merge_size", "out_hidden_size", "head_dim",
    "num_position_embeddings", "image_size", "topk_method", "full_attention_interval",
    "layer_types", "linear_attn_config", "attention_k_eq_v", "torch_dtype", "dtype",
    "text_config", "pad_vocab_size_multiple",
    # absent, transformers' default applies (WhisperConfig: num_mel_bins 80)
    "num_mel_bins",
    # every quantization field sets stored sizes: without an ignore list more layers are
    # quantized, without a block size fewer scales are stored, without bits the method's
    # default width applies
    "quantization_config",
}


def _weights_total(doc: dict[str, Any]) -> int | None:
    v = doc.get("weights_bytes_total")
    return v if isinstance(v, int) else None


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=examples(10), **SETTINGS)  # type: ignore[arg-type]
@given(data=st.data())
def test_gpu_mutated_field(name: str, data: Any) -> None:
    cases = gpu_mutations(name)
    field, value, must_fail, why = data.draw(st.sampled_from(cases), label="mutation")
    mutated = _apply(json.loads(_file(name).read_text()), field, value)
    if mutated is None:
        return
    path = _write(name, mutated, "g")
    o = check("--gpu config fields", ["plan", str(path), *GPU_ARGS], invalid=must_fail,
              why=why)
    base = baseline(name)
    if o.code != 0 or base is None or not o.out.strip():
        return
    # metamorphic: a corrupted field never yields a smaller model unless it says so
    top = field.split(".")[0]
    if value in (None, "<removed>", "", {}, [], "junk", True) and \
            top not in SHRINKS_WHEN_ABSENT and field not in SHRINKS_WHEN_ABSENT:
        new, old = _weights_total(json.loads(o.out)), _weights_total(base)
        if new is not None and old is not None:
            TALLY["metamorphic: corrupted field"]["checked"] += 1
            assert new >= old, (f"{name}: {field} = {value!r} made the model smaller "
                                f"({new:,} < {old:,} bytes) with exit 0")


# ---- quantization_config variants ---------------------------------------------------------------

METHODS = ["awq", "gptq", "awq_marlin", "gptq_marlin", "fp8", "fbgemm_fp8",
           "compressed-tensors", "modelopt", "mxfp4", "bitsandbytes", "hqq", ""]
NUMBERS: list[Any] = [None, -128, -16, -4, -1, 0, 1, 2, 3, 4, 5, 8, 16, 32, 64, 128, 2.5,
                      4.0, True, False, "4", "x", [], [4], {}, 10 ** 400]
PAIRS: list[Any] = [None, [128, 128], [64, 32], [1, 1], [0, 0], [-128, -128], [128],
                    [128, 128, 128], 128, "128", [128.0, 128], [True, 1], ["a", "b"], {}]
IGNORES: list[Any] = [None, [], ["lm_head"], ["re:.*mlp.*"], True, "lm_head", [1], [None],
                      [""], {"a": 1}]
STRATEGIES: list[Any] = [None, "tensor", "channel", "group", "block", "token",
                         "tensor_group", "attn_head", "rows", "", 5]
TYPES: list[Any] = [None, "int", "float", "fp", 8, ""]


def _int(v: Any) -> int | None:
    """``v`` as an int when JSON gives one (an integral float counts, a bool does not)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _absent(v: Any) -> bool:
    return v is None


#: a group wider than any layer's input (2^24) is implausible
MAX_GROUP = 1 << 24


def _group_ok(v: Any) -> bool:
    """A group size: absent, a positive int (at most 2^24) or -1 (GPTQ's per channel)."""
    n = _int(v)
    return _absent(v) or (n is not None and (0 < n <= MAX_GROUP or n == -1))


def _pair_ok(v: Any) -> bool:
    """vLLM fp8.py: weight_block_size has two dimensions (positive ints)."""
    return _absent(v) or (isinstance(v, list) and len(v) == 2 and
                          all(_int(x) is not None and _int(x) > 0 for x in v))


def quant_is_valid(q: dict[str, Any]) -> bool:
    """vLLM 0.32's rules for the fields kvcore sizes weights from:

    * AWQ 4-bit only (``auto_awq.py`` TYPE_MAP); GPTQ 4 or 8 (``auto_gptq.py``);
      group sizes positive or -1;
    * fp8 ``weight_block_size``: two positive dimensions (``fp8.py``);
      ``activation_scheme`` static or dynamic;
    * compressed-tensors weights: ``num_bits`` 2-8 for int (``WNA16_SUPPORTED_BITS``),
      4 or 8 for float; ``type`` int or float; ``strategy`` a QuantizationStrategy; group
      size positive (required by the group strategy); ``block_structure`` two positive
      ints; ``symmetric`` a boolean; a config group and its weights are objects;
    * ignore lists (any method): lists of non-empty strings; bitsandbytes' load_in_4bit
      a boolean; modelopt's quant_algo a string.
    """
    method = q.get("quant_method")
    if not _absent(method) and (not isinstance(method, str) or not method.strip()):
        return False
    for key in ("ignore", "ignored_layers", "modules_to_not_convert", "exclude_modules"):
        v = q.get(key)
        if not _absent(v) and not (isinstance(v, list) and
                                   all(isinstance(x, str) and x.strip() for x in v)):
            return False
    method = (method or "").lower()
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin"):
        bits = q.get("bits")
        n = _int(bits)
        valid = (4,) if method.startswith("awq") else (4, 8)
        if not _absent(bits) and n not in valid:
            return False
        return _group_ok(q.get("group_size"))
    if method == "fp8":
        scheme = q.get("activation_scheme")
        return _pair_ok(q.get("weight_block_size")) and (
            _absent(scheme) or scheme in ("static", "dynamic"))
    if method == "compressed-tensors":
        groups = q.get("config_groups")
        if _absent(groups):
            return True
        if not isinstance(groups, dict):
            return False
        for g in groups.values():
            if not isinstance(g, dict):
                return False
            w = g.get("weights")
            if _absent(w):
                continue
            if not isinstance(w, dict):
                return False
            typ = w.get("type")
            if not _absent(typ) and typ not in ("int", "float"):
                return False
            typ = typ or "int"
            bits = w.get("num_bits")
            if not _absent(bits) and _int(bits) not in (
                    (2, 3, 4, 5, 6, 7, 8) if typ == "int" else (4, 8)):
                return False
            gs = w.get("group_size")
            if not _absent(gs) and not (_int(gs) is not None and 0 < _int(gs) <= MAX_GROUP):
                return False
            strategy = w.get("strategy")
            if not _absent(strategy) and strategy not in STRATEGIES[1:8]:
                return False
            if strategy == "group" and _absent(gs):
                return False
            if not _pair_ok(w.get("block_structure")):
                return False
            sym = w.get("symmetric")
            if not _absent(sym) and not isinstance(sym, bool):
                return False
        return True
    if method == "bitsandbytes":
        v = q.get("load_in_4bit")
        return _absent(v) or isinstance(v, bool)
    if method == "modelopt" or (not method and not _absent(q.get("quant_algo"))):
        algo = q.get("quant_algo")
        if _absent(algo):
            return True
        if not isinstance(algo, str) or not algo.strip():
            return False
        # W4A8_AWQ and the like: 4-bit groups of group_size inputs
        return not algo.upper().startswith("W4A") or _group_ok(q.get("group_size"))
    return True


@st.composite
def quant_configs(draw: Any) -> dict[str, Any]:
    q: dict[str, Any] = {"quant_method": draw(st.sampled_from(METHODS))}
    for key, pool in (("bits", NUMBERS), ("group_size", NUMBERS),
                      ("weight_block_size", PAIRS), ("ignore", IGNORES),
                      ("activation_scheme", [None, "static", "dynamic", "lazy", 1]),
                      ("load_in_4bit", [None, True, False, "yes", 1]),
                      ("quant_algo", [None, "FP8", "NVFP4", "W4A8_AWQ", "", 5])):
        if draw(st.booleans()):
            q[key] = draw(st.sampled_from(pool))
    if q["quant_method"] == "compressed-tensors" and draw(st.booleans()):
        w: Any = {}
        for key, pool in (("num_bits", NUMBERS), ("type", TYPES),
                          ("strategy", STRATEGIES), ("group_size", NUMBERS),
                          ("block_structure", PAIRS),
                          ("symmetric", [None, True, False, "yes", 1])):
            if draw(st.booleans()):
                w[key] = draw(st.sampled_from(pool))
        w = draw(st.sampled_from([w, w, w, [1], "x", None]))
        group: Any = draw(st.sampled_from([{"targets": ["Linear"], "weights": w}, 5,
                                           [w]]))
        q["config_groups"] = draw(st.sampled_from([{"group_0": group}, {}, [group], "x"]))
    return q


QUANT_MODELS = [n for n in ("llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3") if n in NAMES]


@pytest.mark.parametrize("name", QUANT_MODELS)
@settings(max_examples=examples(40), **SETTINGS)  # type: ignore[arg-type]
@given(q=quant_configs())
def test_quantization_variants(name: str, q: dict[str, Any]) -> None:
    raw = json.loads(_file(name).read_text())
    raw["quantization_config"] = q
    path = _write(name, raw, "q")
    valid = quant_is_valid(q)
    args = ["plan", str(path), "--json", "--gpu-memory", "10TiB", "--max-model-len", "4096"]
    o = check("--gpu quantization_config", args, invalid=not valid,
              why=f"quantization_config {json.dumps(q)[:200]}")
    if valid:
        assert o.code == 0, f"a valid quantization_config refused: {q}: {o.out[-400:]}"


# ---- sweeps ----------------------------------------------------------------------------------

SWEEP_VALUES = {
    "--gpu": (["H100-SXM", "H200", "L40S", "A100-80GB"], ["H9000", "", "A100-81GB"]),
    "--tp": (["1", "2", "4", "8"], ["0", "-1", "1.5", "x", "10000000"]),
    "--kv-cache-dtype": (["auto", "fp8", "bfloat16"], ["fp9", "int3", "", "FP8x"]),
    "--max-model-len": (["4096", "8k", "32K", "auto"], ["0", "-5", "1e400", "4096.5"]),
    "--gpu-memory-utilization": (["0.9", "0.5", "1"], ["0", "1.5", "x", "-0.1"]),
}


@st.composite
def sweep_argv(draw: Any) -> tuple[list[str], bool, str]:
    argv = ["plan", draw(st.sampled_from([n for n in ("llama-3.1-8b", "qwen3-30b-a3b",
                                                       "gpt-oss-20b") if n in NAMES]))]
    invalid, why = False, ""
    flags = draw(st.lists(st.sampled_from(sorted(SWEEP_VALUES)), min_size=1, max_size=3,
                          unique=True))
    if "--gpu" not in flags:
        flags.append("--gpu")
    for flag in flags:
        good, bad = SWEEP_VALUES[flag]
        values = draw(st.lists(st.sampled_from(good), min_size=1, max_size=3))
        if draw(st.integers(0, 3)) == 0:
            b = draw(st.sampled_from(bad))
            values.insert(draw(st.integers(0, len(values))), b)
            invalid, why = True, f"{flag} {b!r} in a comma list"
        argv += [flag, ",".join(values)]
    out = draw(st.sampled_from(["json", "table", "csv", "csv+json"]))
    if out in ("json", "csv+json"):
        argv.append("--json")
    if out.startswith("csv"):
        argv += ["--csv", str(WORK / "sweep.csv")]
    return argv, invalid, why


@settings(max_examples=examples(20), **SETTINGS)  # type: ignore[arg-type]
@given(case=sweep_argv())
def test_sweeps(case: tuple[list[str], bool, str]) -> None:
    argv, invalid, why = case
    check("--gpu sweeps", argv, invalid=invalid, why=why)


@pytest.mark.parametrize("bad", ["fp9", "0", "H9000"])
def test_sweep_with_plot_refuses_bad_entries(bad: str) -> None:
    pytest.importorskip("matplotlib")
    flag = {"fp9": "--kv-cache-dtype", "0": "--tp", "H9000": "--gpu"}[bad]
    argv = ["plan", "llama-3.1-8b", "--gpu", "H100-SXM", flag, f"{bad}" if flag == "--gpu"
            else f"auto,{bad}" if flag == "--kv-cache-dtype" else f"1,{bad}",
            "--plot", str(WORK / "p.png")]
    if flag == "--gpu":
        argv[3] = f"H100-SXM,{bad}"
        argv = argv[:4] + argv[6:]
    check("--gpu sweeps (--plot)", argv, invalid=True, why=f"{flag} {bad}")
    assert not (WORK / "p.png").exists()


# ---- metamorphic: more memory never gives fewer blocks ----------------------------------------

@settings(max_examples=examples(15), **SETTINGS)  # type: ignore[arg-type]
@given(name=st.sampled_from([n for n in ("llama-3.1-8b", "qwen3-next-80b-a3b-thinking",
                                         "gpt-oss-20b", "gemma-3-27b-it", "deepseek-v3",
                                         "whisper-tiny") if n in NAMES]),
       gib=st.lists(st.integers(1, 200), min_size=2, max_size=4, unique=True))
def test_more_memory_never_fewer_blocks(name: str, gib: list[int]) -> None:
    from kvcore import plan_model
    from kvcore.errors import KVCoreError

    blocks = []
    for g in sorted(gib):
        try:
            cfg = plan_model(name, kv_cache_memory_bytes=g << 30, max_model_len=4096)
        except KVCoreError:
            blocks.append(0)  # too small to plan: no blocks
            continue
        blocks.append(cfg.num_blocks or 0)
    TALLY["metamorphic: memory vs blocks"]["checked"] += 1
    assert blocks == sorted(blocks), (name, sorted(gib), blocks)


@settings(max_examples=examples(10), **SETTINGS)  # type: ignore[arg-type]
@given(gib=st.lists(st.sampled_from([24, 40, 48, 80, 96, 141, 192]), min_size=2,
                    max_size=3, unique=True),
       name=st.sampled_from([n for n in ("llama-3.1-8b", "qwen3-30b-a3b") if n in NAMES]))
def test_more_gpu_memory_never_fewer_blocks(gib: list[int], name: str) -> None:
    from kvcore import plan_on_gpu

    blocks = []
    for g in sorted(gib):
        cfg = plan_on_gpu(name, gpu_memory_bytes=g << 30, max_model_len=4096,
                          raise_if_not_fits=False)
        blocks.append(cfg.num_blocks or 0)
    TALLY["metamorphic: GPU memory vs blocks"]["checked"] += 1
    assert blocks == sorted(blocks), (name, sorted(gib), blocks)


# ---- simulate over mutated configs -------------------------------------------------------------

TRACE = Path(__file__).resolve().parents[1] / "sim" / "data" / "azure_code_head200.csv"
SIM_MODELS = [n for n in ("llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-20b",
                          "qwen3-next-80b-a3b-thinking", "gemma-3-27b-it") if n in NAMES]


@pytest.mark.parametrize("name", SIM_MODELS)
@settings(max_examples=examples(5), **SETTINGS)  # type: ignore[arg-type]
@given(data=st.data())
def test_simulate_mutated_field(name: str, data: Any) -> None:
    """``kvcore simulate`` reads the config through the same readers: a typed field set
    to a wrong value is refused there too."""
    from test_fuzz_configs import mutations

    cases = [c for c in mutations(name) if c[2]]
    field, value, must_fail, why = data.draw(st.sampled_from(cases), label="mutation")
    mutated = _mutated(json.loads(_file(name).read_text()), field, value)
    if mutated is None:
        return
    path = _write(name, mutated, "s")
    check("simulate config fields", ["simulate", str(path), "--trace", str(TRACE),
                                     "--limit", "3", "--kv-cache-memory", "64GiB",
                                     "--max-model-len", "16384", "--json"],
          invalid=must_fail, why=why)
