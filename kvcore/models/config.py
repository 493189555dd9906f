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

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvcore.errors import ConfigError

__all__ = ["ModelConfig", "CacheConfig", "ConfigView", "load_model_config",
           "parse_model_config", "REQUIRED", "field_int", "field_str", "field_bool",
           "field_dict", "field_list", "field_float", "ConfigTypoWarning", "resembles",
           "warn_typos", "edit_distance", "suggest_model_name"]


# ---- typed field readers -------------------------------------------------------------------
#
# Every field an adapter reads goes through one of these.  The rule: an absent field (not
# in the config, or JSON null) takes the default, or is an error naming it when it has
# none (``REQUIRED``); a present field of the wrong type or out of range is an error
# naming the field, the value (cut when long) and what is valid, never replaced by the
# default.  Integers are bounded by kvcore.units.bound (one table of plausibility bounds).


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: default meaning "the field must be present"
REQUIRED: Any = _Required()


#: when set, called as ``READ_HOOK(kind, name, minimum)`` by every typed read (the fuzz
#: suite records which fields each adapter reads; None in normal use)
READ_HOOK: Any = None


def _absent(raw: Any, key: str) -> bool:
    return not isinstance(raw, dict) or raw.get(key) is None


def _missing(key: str, where: str, path: str | None, model_type: str | None) -> ConfigError:
    why = f" (needed for model_type {model_type!r})" if model_type else ""
    return ConfigError(f"{where}: missing field {path or key!r}{why}", field=path or key)


def _wrong(key: str, value: Any, expected: str, where: str, path: str | None,
           **extra: Any) -> ConfigError:
    from kvcore.units import shorten

    name = path or key
    got = "" if expected.startswith("in ") else f", got {_json_type(value)}"
    return ConfigError(f"{where}: field {name!r} = {shorten(value)} must be {expected}{got}",
                       field=name, value=shorten(value), expected=expected, **extra)


def _json_type(value: Any) -> str:
    return {bool: "a boolean", int: "an int", float: "a number", str: "a string",
            list: "a list", dict: "an object", type(None): "null"}.get(
        type(value), type(value).__name__)


def _read(raw: Any, key: str, default: Any, kind: str, minimum: Any, where: str,
          path: str | None, model_type: str | None) -> tuple[bool, Any]:
    """The shared head of the ``field_*`` readers: reports the read to READ_HOOK, then
    ``(True, raw[key])`` when present, ``(False, default)`` when absent (missing or
    null); ConfigError (missing field) when absent and REQUIRED."""
    if READ_HOOK is not None:
        READ_HOOK(kind, path or key, minimum)
    if _absent(raw, key):
        if default is REQUIRED:
            raise _missing(key, where, path, model_type)
        return False, default
    return True, raw[key]


def field_int(raw: Any, key: str, default: Any = REQUIRED, *, minimum: int | None = 1,
              maximum: int | None = None, where: str = "config", path: str | None = None,
              model_type: str | None = None) -> Any:
    """``raw[key]`` as an int in ``[minimum, maximum]`` (``maximum`` None: the bound of
    ``key`` in :data:`kvcore.units.BOUNDS`); an integral float (JSON ``4096.0``, ``1e4``)
    counts as an int, a bool or string does not.  Absent (missing or null): ``default``
    (ConfigError when REQUIRED).  Raises ConfigError naming ``path`` (default ``key``)."""
    from kvcore.units import as_int, bound, shorten

    found, value = _read(raw, key, default, "int", minimum, where, path,
                         model_type)
    if not found:
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number: int | None = int(value)
    else:  # numpy integers too (a config dict built in Python), as a plain int
        number = as_int(value)
    low = "an int" if minimum is None else ("a positive int" if minimum == 1 else
                                           f"an int >= {minimum:,}")
    if number is None:
        raise _wrong(key, value, low, where, path)
    if minimum is not None and number < minimum:
        raise _wrong(key, value, low, where, path)
    limit = bound(path or key) if maximum is None else maximum
    if number > limit:
        name = path or key
        raise ConfigError(f"{where}: field {name!r} = {shorten(value)} is implausibly large "
                          f"(at most {limit:,})", field=name, value=shorten(value),
                          maximum=limit)
    return number


def field_str(raw: Any, key: str, default: Any = REQUIRED, *,
              choices: Sequence[str] | None = None, where: str = "config",
              path: str | None = None, model_type: str | None = None) -> Any:
    """``raw[key]`` as a non-empty string (one of ``choices`` when given); absent:
    ``default``.  Raises ConfigError naming the field."""
    found, value = _read(raw, key, default, "str", None, where, path,
                         model_type)
    if not found:
        return value
    if not isinstance(value, str) or not value.strip():
        raise _wrong(key, value, "a non-empty string", where, path)
    if choices is not None and value not in choices:
        raise _wrong(key, value, "in " + ", ".join(map(str, choices)), where, path)
    return value


def field_bool(raw: Any, key: str, default: Any = REQUIRED, *, where: str = "config",
               path: str | None = None, model_type: str | None = None) -> Any:
    """``raw[key]`` as a JSON boolean (``true``/``false`` only; 0, 1, "no" are
    refused); absent: ``default``."""
    found, value = _read(raw, key, default, "bool", None, where, path,
                         model_type)
    if not found:
        return value
    if not isinstance(value, bool):
        raise _wrong(key, value, "true or false", where, path)
    return value


def field_dict(raw: Any, key: str, default: Any = REQUIRED, *, where: str = "config",
               path: str | None = None, model_type: str | None = None) -> Any:
    """``raw[key]`` as a JSON object (a dict); absent: ``default``."""
    found, value = _read(raw, key, default, "dict", None, where, path,
                         model_type)
    if not found:
        return value
    if not isinstance(value, dict):
        raise _wrong(key, value, "an object", where, path)
    return value


def field_list(raw: Any, key: str, default: Any = REQUIRED, *, item: str | None = None,
               minimum: int | None = 0, maximum: int | None = None,
               choices: Sequence[Any] | None = None, length: int | None = None,
               min_length: int | None = None, where: str = "config",
               path: str | None = None, model_type: str | None = None) -> Any:
    """``raw[key]`` as a list; ``item`` ``"int"`` (each in ``[minimum, maximum]``,
    maximum default 2^40) or ``"str"`` checks every entry, ``choices`` limits them,
    ``length`` / ``min_length`` its length.  Absent: ``default``.  Raises ConfigError
    naming the entry (``key[i]``)."""
    found, value = _read(raw, key, default, "list", None, where, path,
                         model_type)
    if not found:
        return value
    name = path or key
    if not isinstance(value, list):
        raise _wrong(key, value, "a list", where, path)
    if length is not None and len(value) != length:
        raise ConfigError(f"{where}: field {name!r} has {len(value):,} entries; it must "
                          f"have {length:,} (one per layer)", field=name,
                          value=len(value), expected=length)
    if min_length is not None and len(value) < min_length:
        raise ConfigError(f"{where}: field {name!r} has {len(value):,} entries; it needs "
                          f"at least {min_length:,} (one per layer)", field=name,
                          value=len(value), expected=min_length)
    for i, v in enumerate(value):
        sub = {"v": v}
        if item == "int":
            field_int(sub, "v", minimum=minimum, maximum=(1 << 40) if maximum is None
                      else maximum, where=where, path=f"{name}[{i}]")
        elif item == "str":
            field_str(sub, "v", where=where, path=f"{name}[{i}]")
        if choices is not None and (v not in choices or isinstance(v, bool)):
            raise _wrong("v", v, "in " + ", ".join(map(str, choices)), where, f"{name}[{i}]")
    return [int(v) if item == "int" else v for v in value]


def field_float(raw: Any, key: str, default: Any = REQUIRED, *, minimum: float | None = None,
                maximum: float | None = None, exclusive_minimum: bool = False,
                where: str = "config", path: str | None = None,
                model_type: str | None = None) -> Any:
    """``raw[key]`` as a finite number in ``[minimum, maximum]`` (``(minimum, maximum]``
    with ``exclusive_minimum``); an int counts, a bool or string does not.  Absent:
    ``default``.  Raises ConfigError naming the field."""
    found, value = _read(raw, key, default, "float", minimum, where, path,
                         model_type)
    if not found:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong(key, value, "a number", where, path)
    try:
        number = float(value)
    except OverflowError:  # an int of hundreds of digits
        number = math.inf
    if not math.isfinite(number):
        raise _wrong(key, value, "a finite number", where, path)
    if minimum is not None and (number < minimum or exclusive_minimum and number == minimum):
        op = ">" if exclusive_minimum else ">="
        raise _wrong(key, value, f"a number {op} {minimum:g}", where, path)
    if maximum is not None and number > maximum:
        raise _wrong(key, value, f"a number <= {maximum:g}", where, path)
    return number


class ConfigView:
    """Typed, bounded reads of one JSON object of a config (the whole config, or a nested
    section such as ``vision_config`` or ``quantization_config``).

    This is the only way kvcore code reads config fields (``tests/test_config_reader.py``
    walks the source to enforce it).  Every reader takes the rule of :func:`field_int`:
    absent (missing or JSON null) -> ``default`` (an error naming the field when
    ``REQUIRED``); present but of the wrong type or out of bounds -> ConfigError naming the
    field by its full path (``vision_config.depth``), the value and what is valid.

    Parameters
    ----------
    data:
        The JSON object (a dict; anything else reads as an empty section).
    prefix:
        The section's path in the config (``""`` for the top level).
    where:
        The file or model name the messages start with.
    """

    __slots__ = ("_data", "_prefix", "_where", "_model_type")

    def __init__(self, data: Any, *, prefix: str = "", where: str = "config",
                 model_type: str | None = None) -> None:
        self._data = data if isinstance(data, dict) else {}
        self._prefix = prefix
        self._where = where
        self._model_type = model_type

    def _path(self, key: str) -> str | None:
        return f"{self._prefix}.{key}" if self._prefix else None

    def _kw(self, key: str) -> dict[str, Any]:
        return {"where": self._where, "path": self._path(key),
                "model_type": self._model_type}

    @property
    def prefix(self) -> str:
        """The section's path in the config (``""`` at the top level)."""
        return self._prefix

    @property
    def where(self) -> str:
        """The file or model name messages start with."""
        return self._where

    def has(self, key: str) -> bool:
        """Whether ``key`` is present and not null."""
        return self._data.get(key) is not None

    def keys(self) -> list[str]:
        """The section's keys (for typo checks)."""
        return [str(k) for k in self._data]

    def is_empty(self) -> bool:
        return not self._data

    def get_int(self, key: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """An int in ``[minimum, maximum]`` (default ``minimum=1``, ``maximum`` the bound
        of ``key`` in :data:`kvcore.units.BOUNDS`); see :func:`field_int`."""
        return field_int(self._data, key, default, **kw, **self._kw(key))

    def get_first_int(self, *keys: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """The first present of ``keys`` as :meth:`get_int` (aliases such as
        ``hidden_size`` / ``d_model``); none present: ``default``."""
        for key in keys:
            if self.has(key):
                return self.get_int(key, **kw)
        if default is REQUIRED:
            return self.get_int(keys[0], **kw)
        return default

    def get_float(self, key: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """A finite number (see :func:`field_float`)."""
        return field_float(self._data, key, default, **kw, **self._kw(key))

    def get_bool(self, key: str, default: Any = REQUIRED) -> Any:
        """``true`` / ``false`` (see :func:`field_bool`)."""
        return field_bool(self._data, key, default, **self._kw(key))

    def get_str(self, key: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """A non-empty string, one of ``choices`` when given (see :func:`field_str`)."""
        return field_str(self._data, key, default, **kw, **self._kw(key))

    def get_list(self, key: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """A list, entries checked by ``item`` (see :func:`field_list`)."""
        return field_list(self._data, key, default, **kw, **self._kw(key))

    def get_list_of_int(self, key: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """A list of ints, each in ``[minimum, maximum]`` (default ``minimum=0``)."""
        return field_list(self._data, key, default, item="int", **kw, **self._kw(key))

    def get_list_of_str(self, key: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """A list of non-empty strings."""
        return field_list(self._data, key, default, item="str", **kw, **self._kw(key))

    def get_int_or_str(self, key: str, default: Any = REQUIRED, *,
                       choices: Sequence[str], **kw: Any) -> Any:
        """An int (as :meth:`get_int`) or one of the strings ``choices`` (e.g.
        ``time_step_rank``: an int or ``"auto"``)."""
        return self._union("int_or_str", key, lambda: self.get_str(
            key, default, choices=choices) if isinstance(self._data.get(key), str)
            else self.get_int(key, default, **kw))

    def get_int_or_list(self, key: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """An int (as :meth:`get_int`) or a list of ints (e.g. ``moe_layer_freq``)."""
        return self._union("int_or_list", key, lambda: self.get_list_of_int(key, default)
                           if isinstance(self._data.get(key), list)
                           else self.get_int(key, default, **kw))

    def _union(self, kind: str, key: str, read: Any) -> Any:
        """A read of a field of two types: the hook sees one read of ``kind``."""
        global READ_HOOK
        hook = READ_HOOK
        if hook is not None:
            hook(kind, self._path(key) or key, None)
        READ_HOOK = None
        try:
            return read()
        finally:
            READ_HOOK = hook

    def get_dict(self, key: str, default: Any = REQUIRED) -> Any:
        """A JSON object, returned as a plain dict (for passing on whole: prefer
        :meth:`section` to read its fields)."""
        return field_dict(self._data, key, default, **self._kw(key))

    def section(self, key: str, *, required: bool = False) -> ConfigView:
        """The nested object ``key`` as a view (absent: an empty view, or an error when
        ``required``); present but not an object: ConfigError naming it."""
        sub = field_dict(self._data, key, REQUIRED if required else None, **self._kw(key))
        return ConfigView(sub, prefix=self._path(key) or key, where=self._where,
                          model_type=self._model_type)

    def merged_with(self, key: str) -> ConfigView:
        """This section with the nested object ``key`` merged over it (a wrapper's
        ``language_config`` / ``text_config`` fields win); absent: this view."""
        sub = field_dict(self._data, key, None, **self._kw(key))
        if not sub:
            return self
        return ConfigView({**self._data, **sub}, prefix=self._prefix, where=self._where,
                          model_type=self._model_type)

    def sections(self, key: str) -> list[ConfigView]:
        """The values of the nested object ``key`` (e.g. compressed-tensors'
        ``config_groups``), each as a view; a value that is not an object is an error."""
        outer = self.section(key)
        return [outer.section(k, required=True) for k in outer.keys()]

    def items_list(self, key: str) -> list[ConfigView]:
        """The entries of the list ``key`` that must each be an object, as views."""
        values = self.get_list(key, [])
        out = []
        for i, v in enumerate(values):
            name = f"{self._path(key) or key}[{i}]"
            if not isinstance(v, dict):
                raise _wrong("v", v, "an object", self._where, name)
            out.append(ConfigView(v, prefix=name, where=self._where,
                                  model_type=self._model_type))
        return out


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

    def __post_init__(self) -> None:
        """Every field checked (ConfigError naming it): a present but invalid value is an
        error, e.g. an empty kv_cache_dtype is not ``auto``."""
        from kvcore.units import check_int, shorten

        if self.block_size is not None:
            check_int(self.block_size, "block_size")
        check_int(self.tensor_parallel_size, "tensor_parallel_size")
        check_int(self.pipeline_parallel_size, "pipeline_parallel_size")
        check_int(self.num_speculative_tokens, "num_speculative_tokens", minimum=0)
        for name in ("kv_cache_dtype", "mamba_ssm_cache_dtype"):
            value = getattr(self, name)
            if value is None and name == "mamba_ssm_cache_dtype":
                continue
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{name} = {shorten(value)} must be a non-empty string "
                                  f"(a dtype name, or auto)", field=name,
                                  value=shorten(value))
        ssm = self.mamba_ssm_cache_dtype
        if ssm is not None and ssm not in VLLM_MAMBA_SSM_CACHE_DTYPES:
            # vLLM's MambaDType (vllm/config/cache.py): `vllm serve` refuses any other,
            # on every model (a non-Mamba model too)
            raise ConfigError(f"--mamba-ssm-cache-dtype / mamba_ssm_cache_dtype = "
                              f"{shorten(ssm)} is not a vLLM 0.32 Mamba cache dtype; "
                              f"valid: {', '.join(VLLM_MAMBA_SSM_CACHE_DTYPES)}",
                              field="mamba_ssm_cache_dtype", value=shorten(ssm))
        if self.mamba_cache_mode not in ("none", "align", "all"):
            raise ConfigError(f"mamba_cache_mode = {shorten(self.mamba_cache_mode)} must be "
                              f"none, align or all", field="mamba_cache_mode",
                              value=shorten(self.mamba_cache_mode))
        if not isinstance(self.include_mtp_layers, bool):
            raise ConfigError(f"include_mtp_layers = {shorten(self.include_mtp_layers)} "
                              f"must be true or false", field="include_mtp_layers")

    def block_size_or(self, default: int) -> int:
        return default if self.block_size is None else self.block_size


#: vLLM 0.32's ``MambaDType`` (vllm/config/cache.py): the values of
#: ``--mamba-ssm-cache-dtype`` (and ``--mamba-cache-dtype``)
VLLM_MAMBA_SSM_CACHE_DTYPES = ("auto", "float32", "float16", "bfloat16")


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
        """``raw[key]`` unchecked, for callers outside kvcore; kvcore's own code reads
        through the typed readers below (enforced by tests/test_config_reader.py)."""
        return self.raw.get(key, default)

    @property
    def view(self) -> ConfigView:
        """The whole (merged text) config as a :class:`ConfigView`."""
        return ConfigView(self.raw, where=self._where(), model_type=self.model_type)

    def has(self, key: str) -> bool:
        """Whether the field is present and not null."""
        return self.view.has(key)

    def section(self, key: str, *, required: bool = False) -> ConfigView:
        """A nested object (``ssm_cfg``, ``quantization_config`` ...) as a view."""
        return self.view.section(key, required=required)

    def _scoped(self, within: str | None) -> ConfigView:
        return self.view if within is None else self.view.section(within)

    def get_int(self, key: str, default: Any = REQUIRED, *, within: str | None = None,
                **kw: Any) -> Any:
        """Typed read of an int field (see :func:`field_int`); ``within`` reads
        ``raw[within][key]`` (``within`` must then be an object when present)."""
        return self._scoped(within).get_int(key, default, **kw)

    def get_first_int(self, *keys: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """The first present of ``keys`` (see :meth:`ConfigView.get_first_int`)."""
        return self.view.get_first_int(*keys, default=default, **kw)

    def get_float(self, key: str, default: Any = REQUIRED, *, within: str | None = None,
                  **kw: Any) -> Any:
        """Typed read of a number field (see :func:`field_float`)."""
        return self._scoped(within).get_float(key, default, **kw)

    def get_str(self, key: str, default: Any = REQUIRED, *, within: str | None = None,
                **kw: Any) -> Any:
        """Typed read of a string field (see :func:`field_str`)."""
        return self._scoped(within).get_str(key, default, **kw)

    def get_bool(self, key: str, default: Any = REQUIRED, *, within: str | None = None
                 ) -> Any:
        """Typed read of a boolean field (see :func:`field_bool`)."""
        return self._scoped(within).get_bool(key, default)

    def get_dict(self, key: str, default: Any = REQUIRED) -> Any:
        """Typed read of an object field (see :func:`field_dict`), as a plain dict."""
        return self.view.get_dict(key, default)

    def get_list(self, key: str, default: Any = REQUIRED, *, within: str | None = None,
                 **kw: Any) -> Any:
        """Typed read of a list field (see :func:`field_list`)."""
        return self._scoped(within).get_list(key, default, **kw)

    def get_list_of_int(self, key: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """A list of ints (see :meth:`ConfigView.get_list_of_int`)."""
        return self.view.get_list_of_int(key, default, **kw)

    def get_list_of_str(self, key: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """A list of strings (see :meth:`ConfigView.get_list_of_str`)."""
        return self.view.get_list_of_str(key, default, **kw)

    def get_int_or_str(self, key: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """See :meth:`ConfigView.get_int_or_str`."""
        return self.view.get_int_or_str(key, default, **kw)

    def get_int_or_list(self, key: str, default: Any = REQUIRED, **kw: Any) -> Any:
        """See :meth:`ConfigView.get_int_or_list`."""
        return self.view.get_int_or_list(key, default, **kw)

    def with_fields(self, **updates: Any) -> ModelConfig:
        """A copy whose raw config has ``updates`` applied (a key set to None is removed),
        re-normalized: plugins that rewrite a config (rswa, kpool) build it this way."""
        raw = dict(self.raw)
        for k, v in updates.items():
            if v is None:
                raw.pop(k, None)
            else:
                raw[k] = v
        return parse_model_config(raw, name=self.name, source=self.source)

    def require(self, key: str, kind: type | tuple[type, ...] = int) -> Any:
        """``raw[key]``, checked (an int must be positive and plausible: see
        :meth:`get_int`); raises ConfigError naming the field."""
        if kind is int:
            return self.get_int(key)
        if kind is list:
            return self.get_list(key)
        if kind is dict:
            return self.get_dict(key)
        if kind is str:
            return self.get_str(key)
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


# ---- typos -----------------------------------------------------------------------------------

class ConfigTypoWarning(UserWarning):
    """An unknown config key close to a field kvcore reads (``num_key_value_head``): the
    field it resembles is absent, so its default was used (issue #23: a typo'd
    ``num_key_value_heads`` silently planned as MHA, 4x the KV)."""


#: other projects' names of fields kvcore reads (edit distance does not find them)
FIELD_ALIASES = {
    "num_kv_heads": "num_key_value_heads", "n_kv_heads": "num_key_value_heads",
    "num_kv_head": "num_key_value_heads", "n_kv_head": "num_key_value_heads",
    "kv_heads": "num_key_value_heads", "num_key_value_groups": "num_key_value_heads",
    "n_head_kv": "num_key_value_heads", "num_query_groups": "num_key_value_heads",
    "multi_query_group_num": "num_key_value_heads",
    "n_head": "num_attention_heads", "num_heads": "num_attention_heads",
    "n_layers": "num_hidden_layers", "num_layers": "num_hidden_layers",
    "n_embd": "hidden_size", "dim": "hidden_size", "head_size": "head_dim",
    "max_seq_length": "max_position_embeddings", "context_length":
        "max_position_embeddings", "window_size": "sliding_window",
    "n_experts": "num_experts", "num_experts_per_token": "num_experts_per_tok",
}


def edit_distance(a: str, b: str, limit: int = 3) -> int:
    """Optimal-string-alignment distance (insertions, deletions, substitutions and
    adjacent transpositions), capped at ``limit``."""
    if abs(len(a) - len(b)) >= limit:
        return limit
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) >= limit:
            return limit
        prev2, prev = prev, cur
    return min(prev[-1], limit)


def _max_typo_distance(target: str) -> int:
    """Edits a typo of ``target`` may have: 1 for names of 5-7 characters, 2 above
    (shorter names are too close to each other to guess)."""
    return 0 if len(target) < 5 else 1 if len(target) < 8 else 2


def resembles(key: str, present: set[str] | frozenset[str] = frozenset()) -> str | None:
    """The field kvcore reads that an unknown ``key`` most likely misspells, or None: a
    known alias (:data:`FIELD_ALIASES`), else the closest field within
    :func:`_max_typo_distance` that is not ``present``.  Keys kvcore reads or that real
    configs use (kvcore.models.fields) resemble nothing."""
    from kvcore.models.fields import READ_FIELDS, SEEN_FIELDS

    if key in READ_FIELDS or key in SEEN_FIELDS or key.startswith("_"):
        return None
    alias = FIELD_ALIASES.get(key)
    if alias is not None:
        return alias if alias not in present else None
    for target in _typo_candidates(key):
        if target not in present:
            return target
    return None


@functools.lru_cache(maxsize=4096)
def _typo_candidates(key: str) -> tuple[str, ...]:
    """Fields kvcore reads within their typo distance of ``key``, closest first (then
    by name)."""
    from kvcore.models.fields import READ_FIELDS

    found = []
    for target in READ_FIELDS:
        limit = _max_typo_distance(target)
        if not limit or abs(len(target) - len(key)) > limit:
            continue
        d = edit_distance(key, target, limit + 1)
        if d <= limit:
            found.append((d, target))
    return tuple(t for _, t in sorted(found))


def warn_typos(data: dict[str, Any], where: str, prefix: str = "") -> list[str]:
    """Warn (:class:`ConfigTypoWarning`) for each key of ``data`` that resembles an absent
    field kvcore reads; returns the messages."""
    import warnings

    present = set(data)
    out = []
    for key in data:
        if not isinstance(key, str):
            continue
        target = resembles(key, present)
        if target is not None:
            msg = (f"{where}: unknown field {prefix}{key!r} looks like {prefix}{target!r}, "
                   f"which is absent (its default is used); rename it if it is a typo")
            warnings.warn(msg, ConfigTypoWarning, stacklevel=3)
            out.append(msg)
    return out


def _reject_constant(value: str) -> float:
    return {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}[value]


#: the largest JSON file kvcore reads (real configs are a few KiB)
MAX_JSON_BYTES = 64 << 20


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
    from kvcore.userfiles import loads_json

    # the shared parser: bad syntax, nesting too deep, an integer of > 4,300 digits
    return loads_json(text, str(path), parse_constant=_reject_constant, path=str(path))


def _read_json(path: Path) -> dict[str, Any]:
    data = read_json_file(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config.json must hold a JSON object, got "
                          f"{type(data).__name__}", path=str(path))
    return data


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
    warn_typos(data, where)
    if isinstance(data.get("text_config"), dict):
        warn_typos(data["text_config"], where, "text_config.")
    top_type = field_str(data, "model_type", None, where=where)
    text = field_dict(data, "text_config", None, where=where)
    raw = dict(data)
    text_type = None
    if text is not None:
        raw.update(text)
        text_type = field_str(text, "model_type", None, where=where,
                              path="text_config.model_type")
    model_type = top_type or text_type
    if not model_type:
        ssm_cfg = field_dict(data, "ssm_cfg", None, where=where)
        if ssm_cfg is not None or ("d_model" in data and "n_layer" in data):
            layer = field_str(ssm_cfg or {}, "layer", "Mamba1", where=where,
                              path="ssm_cfg.layer")
            model_type = "mamba2" if layer.lower() == "mamba2" else "mamba"
        else:
            raise ConfigError(f"{where}: missing field 'model_type'", field="model_type")
    raw["model_type"] = model_type

    layers = field_int(raw, "num_hidden_layers", None, where=where)
    heads = field_int(raw, "num_attention_heads", None, where=where)
    kv_heads = field_int(raw, "num_key_value_heads", None, where=where)
    if kv_heads is None:
        kv_heads = heads
    if kv_heads is not None and heads is not None:
        if kv_heads > heads:
            raise ConfigError(f"{where}: num_key_value_heads {kv_heads} exceeds "
                              f"num_attention_heads {heads} (each KV head serves one or "
                              f"more query heads)", field="num_key_value_heads",
                              value=kv_heads)
        if heads % kv_heads:
            raise ConfigError(f"{where}: num_attention_heads {heads} is not a multiple of "
                              f"num_key_value_heads {kv_heads} (each KV head serves the "
                              f"same number of query heads)", field="num_key_value_heads",
                              value=kv_heads)
    hidden = field_int(raw, "hidden_size", None, where=where)
    head_dim = field_int(raw, "head_dim", None, where=where)
    head_dim_derived = False
    if head_dim is None and hidden and heads and hidden % heads == 0:
        head_dim = hidden // heads  # HF's default; MLA configs do not use it
        head_dim_derived = True
    # a present torch_dtype wins (even when invalid: that is an error, not a fallback)
    dtype_key = "torch_dtype" if raw.get("torch_dtype") is not None else "dtype"
    dtype = field_str(raw, dtype_key, "bfloat16", where=where)
    from kvcore.dtypes import normalize_dtype
    from kvcore.errors import UnknownDtypeError

    try:
        dtype = normalize_dtype(dtype)
    except UnknownDtypeError as exc:
        raise ConfigError(f"{where}: field {dtype_key!r}: {exc}", field=dtype_key) from exc
    layer_types = field_list(raw, "layer_types", None, item="str", where=where)
    if layer_types is not None:
        if layers is not None and len(layer_types) != layers:
            raise ConfigError(f"{where}: layer_types has {len(layer_types):,} entries for "
                              f"num_hidden_layers {layers:,} (one per layer)",
                              field="layer_types", value=len(layer_types))
        layer_types = tuple(layer_types)
    sliding = field_int(raw, "sliding_window", None, where=where)
    field_dict(raw, "quantization_config", None, where=where)
    max_pos = field_int(raw, "max_position_embeddings", None, where=where)
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
        max_position_embeddings=max_pos,
        layer_types=layer_types,
        sliding_window=sliding,
        kv_cache_dtype=_kv_cache_dtype_from(raw, companion, where),
        source=source,
        head_dim_derived=head_dim_derived,
    )


def _squash(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def suggest_model_name(text: str) -> str | None:
    """The embedded model name ``text`` most likely means (``llama3.1-8b`` ->
    ``llama-3.1-8b``): equal once punctuation and case are dropped, else the closest by
    difflib's similarity (at least 0.8); None when none is close."""
    import difflib

    from kvcore.models.embedded import embedded_names

    names = list(embedded_names())
    squashed = {_squash(n): n for n in names}
    if _squash(text) in squashed:
        return squashed[_squash(text)]
    close = difflib.get_close_matches(_squash(text), list(squashed), n=1, cutoff=0.8)
    return squashed[close[0]] if close else None


def load_model_config(model: str | Path) -> ModelConfig:
    """Load a config: a path to a config.json, a folder holding one, or an embedded name
    (``kvcore models``).

    A companion ``*.hf_quant_config.*`` / ``hf_quant_config.json`` beside the file is
    read too.  Raises ConfigError (unreadable, not JSON, malformed field, unknown name).
    """
    from kvcore.models.embedded import embedded_config_path, embedded_names
    from kvcore.units import shorten

    text = str(model)
    path = Path(text)
    try:
        path.is_dir() and path.exists()
    except (OSError, ValueError) as exc:  # a 5,000-character name, a NUL byte
        why = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"{shorten(text)} is not a usable path ({why}); give a "
                          f"config.json path, a folder holding one, or an embedded model "
                          f"name (kvcore models)", model=shorten(text)) from None
    if path.is_dir():
        path = path / "config.json"
        if not path.exists():
            raise ConfigError(f"{model}: the folder holds no config.json", path=text)
        name = path.parent.name
    elif not path.exists():
        found = embedded_config_path(text)
        if found is None:
            if text.endswith(".json") or "/" in text or text.startswith(("."), ) or \
                    "\\" in text:
                parent = path.parent
                where = "" if parent.is_dir() else f" (nor the folder {parent})"
                raise ConfigError(f"{text}: no such file{where}; give a config.json path, "
                                  f"a folder holding one, or an embedded model name "
                                  f"(kvcore models)", model=text, path=text)
            hint = suggest_model_name(text)
            raise ConfigError(
                f"{text!r} is neither a config.json path, a folder holding one, nor an "
                f"embedded model" + (f"; did you mean {hint!r}?" if hint else "")
                + f"; embedded: {', '.join(embedded_names())}", model=text)
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
