"""HuggingFace ``config.json`` -> a normalized :class:`ModelConfig`, and the
:class:`CacheConfig` adapters receive.

Normalization (what every adapter can rely on):

* a multimodal wrapper's ``text_config`` is merged over the top level (the text model's
  keys win), ``model_type`` is the top-level one (e.g. ``qwen3_5_moe``) and
  ``text_model_type`` the inner one;
* non-strict JSON (``Infinity``, ``NaN``) is accepted;
* ``num_key_value_heads`` defaults to ``num_attention_heads``;
* ``head_dim`` defaults to ``hidden_size // num_attention_heads``;
* ``dtype`` is ``torch_dtype`` or ``dtype`` (default ``bfloat16``);
* ``quantization_config.kv_cache_scheme`` (a string such as ``"FP8"`` or an object
  ``{"num_bits": 8, "type": "float"}``), or a companion ``hf_quant_config.json`` with
  ``quantization.kv_cache_quant_algo``, gives the default ``kv_cache_dtype``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvcore.errors import ConfigError

__all__ = ["ModelConfig", "CacheConfig", "load_model_config", "parse_model_config"]


@dataclass(frozen=True, kw_only=True)
class CacheConfig:
    """The cache settings an adapter sees (frozen).

    Attributes
    ----------
    block_size:
        Tokens per block; None = the family's default (16; 64 for MLA).
    kv_cache_dtype:
        ``auto`` (the config's declared KV quantization, else the model dtype) or a
        scheme name.
    tensor_parallel_size, pipeline_parallel_size:
        KV heads are split over ``tensor_parallel_size`` ranks (a head count below it is
        replicated); layers over ``pipeline_parallel_size`` stages.
    mamba_cache_mode:
        ``none`` | ``align`` | ``all``.
    num_speculative_tokens:
        Draft tokens per step.
    include_mtp_layers:
        Plan the multi-token-prediction layers too.
    mamba_ssm_cache_dtype:
        Overrides the config's recurrent-state dtype (vLLM ``--mamba-ssm-cache-dtype``);
        None = the config's ``mamba_ssm_cache_dtype`` / ``mamba_ssm_dtype``.
    """

    block_size: int | None = None
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    mamba_cache_mode: str = "none"
    num_speculative_tokens: int = 0
    include_mtp_layers: bool = False
    mamba_ssm_cache_dtype: str | None = None

    def block_size_or(self, default: int) -> int:
        return default if self.block_size is None else self.block_size


@dataclass(frozen=True)
class ModelConfig:
    """A normalized model config.  ``raw`` is the merged (text) config dict, for the
    family-specific fields an adapter reads with :meth:`get` / :meth:`require`."""

    model_type: str
    raw: dict[str, Any] = field(repr=False)
    name: str = ""
    text_model_type: str | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_size: int | None = None
    dtype: str = "bfloat16"
    max_position_embeddings: int | None = None
    layer_types: tuple[str, ...] | None = None
    sliding_window: int | None = None
    kv_cache_dtype: str | None = None
    source: str = ""
    head_dim_derived: bool = False

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    def require(self, key: str, kind: type | tuple[type, ...] = int) -> Any:
        """``raw[key]``, checked (an int must be positive); raises ConfigError naming
        the field."""
        if key not in self.raw or self.raw[key] is None:
            raise ConfigError(
                f"{self._where()}: missing field {key!r} (needed for model_type "
                f"{self.model_type!r})", field=key)
        value = self.raw[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
            raise ConfigError(
                f"{self._where()}: field {key!r} = {value!r} is not "
                f"{getattr(kind, '__name__', kind)}", field=key, value=repr(value))
        if kind is int and isinstance(value, int) and value <= 0:
            raise ConfigError(f"{self._where()}: field {key!r} = {value!r} must be a "
                              f"positive int", field=key, value=value)
        return value

    def require_attention(self) -> tuple[int, int, int, int]:
        """(num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim),
        each checked; raises ConfigError naming the missing field."""
        for key in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                    "head_dim"):
            value = getattr(self, key)
            if value is None:
                if key == "head_dim":
                    raise ConfigError(
                        f"{self._where()}: missing field 'head_dim', and it cannot be "
                        f"derived as hidden_size / num_attention_heads "
                        f"({self.hidden_size!r} / {self.num_attention_heads!r})",
                        field="head_dim")
                raise ConfigError(f"{self._where()}: missing field {key!r}", field=key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(
                    f"{self._where()}: field {key!r} = {value!r} must be a positive int",
                    field=key, value=repr(value))
        return (self.num_hidden_layers, self.num_attention_heads,  # type: ignore[return-value]
                self.num_key_value_heads, self.head_dim)

    def _where(self) -> str:
        return self.source or self.name or "config"


def _reject_constant(value: str) -> float:
    return {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}[value]


#: the largest JSON file kvcore reads (real configs are a few KiB)
MAX_JSON_BYTES = 64 << 20
#: sanity bounds for config integers (the largest real models are far below)
MAX_LAYERS = 100_000
MAX_HEADS = 1 << 20


def read_json_file(path: Path | str, what: str = "config") -> Any:
    """Read a JSON file (non-strict: ``Infinity``, ``NaN``) with a size cap.

    Raises ConfigError (unreadable, too large, not UTF-8, not JSON, nested too deeply,
    an integer too long to convert) naming the file.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}",
                          path=str(path)) from exc
    if len(raw) > MAX_JSON_BYTES:
        raise ConfigError(f"{path}: the {what} file is larger than {MAX_JSON_BYTES >> 20} MiB;"
                          f" a config.json is a few KiB", path=str(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: the {what} file is not UTF-8 text (byte {exc.start}: "
                          f"{raw[exc.start:exc.start + 1]!r})", path=str(path)) from exc
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            path=str(path)) from exc
    except RecursionError as exc:
        raise ConfigError(f"{path}: JSON nested too deeply", path=str(path)) from exc
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise ConfigError(f"{path}: not valid JSON ({exc})", path=str(path)) from exc


def _read_json(path: Path) -> dict[str, Any]:
    data = read_json_file(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config.json must hold a JSON object, got "
                          f"{type(data).__name__}", path=str(path))
    return data


def _positive_int_or_none(raw: dict[str, Any], key: str, where: str,
                          maximum: int | None = None) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigError(f"{where}: field {key!r} = {value!r} must be an int",
                              field=key, value=repr(value))
    if value <= 0:
        raise ConfigError(f"{where}: field {key!r} = {value!r} must be a positive int",
                          field=key, value=value)
    if maximum is not None and value > maximum:
        raise ConfigError(f"{where}: field {key!r} = {value} is implausibly large "
                          f"(at most {maximum})", field=key, value=value)
    return value


_KV_SCHEME_STRINGS = {"fp8": "fp8", "fp8_e4m3": "fp8", "float8": "fp8", "fp8_e5m2": "fp8_e5m2",
                      "int8": "int8_per_token_head", "nvfp4": "nvfp4"}


def _kv_cache_dtype_from(raw: dict[str, Any], companion: dict[str, Any] | None,
                         where: str) -> str | None:
    q = raw.get("quantization_config")
    scheme: Any = q.get("kv_cache_scheme") if isinstance(q, dict) else None
    if scheme is None and isinstance(q, dict) and q.get("kv_cache_quant_algo"):
        scheme = q["kv_cache_quant_algo"]
    if scheme is None and companion:
        quant = companion.get("quantization", companion)
        if isinstance(quant, dict):
            scheme = quant.get("kv_cache_quant_algo")
    if scheme is None:
        return None
    if isinstance(scheme, str):
        key = scheme.strip().lower()
        if key in _KV_SCHEME_STRINGS:
            return _KV_SCHEME_STRINGS[key]
        raise ConfigError(
            f"{where}: quantization_config.kv_cache_scheme {scheme!r} is not supported; "
            f"valid: {', '.join(sorted(_KV_SCHEME_STRINGS))} or an object with num_bits "
            f"and type", field="quantization_config.kv_cache_scheme")
    if isinstance(scheme, dict):
        bits, typ = scheme.get("num_bits"), str(scheme.get("type", "float")).lower()
        if bits == 8 and typ == "float":
            return "fp8"
        if bits == 8 and typ == "int":
            return "int8_per_token_head"
        if bits == 4 and typ == "float":
            return "nvfp4"
        raise ConfigError(
            f"{where}: quantization_config.kv_cache_scheme {scheme!r} is not supported "
            f"(valid: num_bits 8 with type float or int, num_bits 4 with type float)",
            field="quantization_config.kv_cache_scheme")
    raise ConfigError(f"{where}: quantization_config.kv_cache_scheme must be a string or "
                      f"an object, got {scheme!r}", field="quantization_config.kv_cache_scheme")


def parse_model_config(data: dict[str, Any], *, name: str = "", source: str = "",
                       companion: dict[str, Any] | None = None) -> ModelConfig:
    """Normalize a loaded config dict (see the module docstring).

    Raises ConfigError naming the field for a malformed value.
    """
    where = source or name or "config"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a config must be a JSON object")
    top_type = data.get("model_type")
    text = data.get("text_config")
    raw = dict(data)
    text_type = None
    if isinstance(text, dict):
        raw.update(text)
        text_type = text.get("model_type")
    model_type = top_type or text_type
    if not model_type:
        ssm_cfg = data.get("ssm_cfg")
        if isinstance(ssm_cfg, dict) or ("d_model" in data and "n_layer" in data):
            layer = (ssm_cfg or {}).get("layer", "Mamba1")
            model_type = "mamba2" if str(layer).lower() == "mamba2" else "mamba"
        else:
            raise ConfigError(f"{where}: missing field 'model_type'", field="model_type")
    if not isinstance(model_type, str):
        raise ConfigError(f"{where}: field 'model_type' = {model_type!r} must be a string",
                          field="model_type")
    raw["model_type"] = model_type

    layers = _positive_int_or_none(raw, "num_hidden_layers", where, MAX_LAYERS)
    heads = _positive_int_or_none(raw, "num_attention_heads", where, MAX_HEADS)
    kv_heads = _positive_int_or_none(raw, "num_key_value_heads", where, MAX_HEADS)
    if kv_heads is None:
        kv_heads = heads
    if kv_heads is not None and heads is not None and kv_heads > heads:
        raise ConfigError(f"{where}: num_key_value_heads {kv_heads} exceeds "
                          f"num_attention_heads {heads} (each KV head serves one or more "
                          f"query heads)", field="num_key_value_heads", value=kv_heads)
    hidden = _positive_int_or_none(raw, "hidden_size", where, 1 << 24)
    head_dim = _positive_int_or_none(raw, "head_dim", where, 1 << 16)
    head_dim_derived = False
    if head_dim is None and hidden and heads and hidden % heads == 0:
        head_dim = hidden // heads  # HF's default; MLA configs do not use it
        head_dim_derived = True
    dtype = raw.get("torch_dtype") or raw.get("dtype") or "bfloat16"
    if not isinstance(dtype, str):
        raise ConfigError(f"{where}: field 'torch_dtype' = {dtype!r} must be a string",
                          field="torch_dtype")
    from kvcore.dtypes import normalize_dtype
    from kvcore.errors import UnknownDtypeError

    try:
        dtype = normalize_dtype(dtype)
    except UnknownDtypeError as exc:
        raise ConfigError(f"{where}: field 'torch_dtype': {exc}", field="torch_dtype") from exc
    layer_types = raw.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
            raise ConfigError(f"{where}: field 'layer_types' must be a list of strings",
                              field="layer_types")
        layer_types = tuple(layer_types)
    sliding = raw.get("sliding_window")
    if sliding is not None and (isinstance(sliding, bool) or not isinstance(sliding, int)
                                or sliding <= 0):
        raise ConfigError(f"{where}: field 'sliding_window' = {sliding!r} must be a positive "
                          f"int or null", field="sliding_window")
    return ModelConfig(
        model_type=model_type,
        raw=raw,
        name=name,
        text_model_type=text_type,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        dtype=dtype,
        max_position_embeddings=_positive_int_or_none(raw, "max_position_embeddings", where),
        layer_types=layer_types,
        sliding_window=sliding,
        kv_cache_dtype=_kv_cache_dtype_from(raw, companion, where),
        source=source,
        head_dim_derived=head_dim_derived,
    )


def load_model_config(model: str | Path) -> ModelConfig:
    """Load a config: a path to a config.json, a folder holding one, or an embedded name
    (``kvcore models``).

    A companion ``*.hf_quant_config.*`` / ``hf_quant_config.json`` beside the file is
    read too.  Raises ConfigError (unreadable, not JSON, malformed field, unknown name).
    """
    from kvcore.models.embedded import embedded_config_path, embedded_names

    text = str(model)
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
        if not path.exists():
            raise ConfigError(f"{model}: the folder holds no config.json", path=text)
        name = path.parent.name
    elif not path.exists():
        found = embedded_config_path(text)
        if found is None:
            raise ConfigError(
                f"{text!r} is neither a config.json path, a folder holding one, nor an "
                f"embedded model; embedded: {', '.join(embedded_names())}", model=text)
        path = found
        name = text
    else:
        name = path.stem if path.name != "config.json" else path.parent.name
    data = _read_json(path)
    companion = None
    for cand in (path.with_name(path.name.replace(".json", ".hf_quant_config.json")),
                 path.with_name(path.stem.split(".")[0] + ".hf_quant_config."
                                + ".".join(path.stem.split(".")[1:] + ["json"])),
                 path.with_name("hf_quant_config.json")):
        if cand != path and cand.exists():
            companion = _read_json(cand)
            break
    return parse_model_config(data, name=name, source=str(path), companion=companion)
