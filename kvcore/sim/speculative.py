"""Speculative decoding in the clocked simulator: vLLM's ``--speculative-config`` and an
acceptance model.

:func:`parse_speculative_config` reads the JSON object ``vllm serve
--speculative-config`` takes (vLLM 0.32's ``SpeculativeConfig``,
``vllm/config/speculative.py``) into a :class:`SpeculativeSettings`: what the
scheduler sees of a drafter.

* **Methods.**  ``ngram`` and ``ngram_gpu`` (no lookahead slots, no block drop: the
  schedule :mod:`kvcore.sim.engine` reproduces step for step, checked against vLLM's
  Scheduler); ``eagle``, ``eagle3`` and ``mtp`` (vLLM's MTP aliases such as
  ``deepseek_mtp`` become ``mtp``, as vLLM maps them): as vLLM schedules them, the KV
  cache manager drops the last matched block of a prefix hit (``use_eagle``, unless
  ``disable_eagle_block_drop``) and every allocation reserves ``num_speculative_tokens``
  lookahead slots (``VllmConfig.num_lookahead_tokens``); ``mtp`` plans the model's MTP
  layers (``include_mtp_layers``).  Not modelled for them: vLLM's prefill lookahead
  (``num_prefill_lookahead_tokens``: a chunk never ends inside it) and the draft
  head's own KV-cache layers (EAGLE) in the plan.  Other methods (``draft_model``,
  ``medusa``, ``mlp_speculator``, ``suffix``, ``dflash``, ``dspark``, ...) are refused:
  their drafting slots, dynamic draft counts or proposers are not modelled.
* **Fields.**  Every field vLLM 0.32 knows is accepted; those that do not change the
  schedule (``model``, ``quantization``, ``prompt_lookup_max``, ...) are recorded in
  :attr:`SpeculativeSettings.ignored` (the run's note names them); a field vLLM does
  not know is refused, as vLLM's config refuses extra fields.  Fields whose scheduling
  kvcore does not model (``num_speculative_tokens_per_batch_size``,
  ``parallel_drafting``, ``enable_adaptive_verification``) are refused.  vLLM's
  checks: ``num_speculative_tokens`` an integer > 0 (required: kvcore reads no draft
  config for an ``n_predict``), ``tensor_parallel_size`` refused (vLLM's message),
  ``eagle`` / ``eagle3`` need ``model`` (vLLM: "num_speculative_tokens was provided
  but without speculative model"), ``prompt_lookup_min <= prompt_lookup_max``.
* **Acceptance.**  vLLM's synthetic rejection sampler (``rejection_sample_method:
  "synthetic"`` with ``synthetic_acceptance_rates``, per-position *unconditional*
  rates, non-increasing, or ``synthetic_acceptance_length``, resolved by vLLM's
  minimum-variance schedule) gives the acceptance model directly; otherwise kvcore's
  own ``--spec-acceptance-rate P`` (:func:`iid_rates`): each draft accepted with
  probability ``p`` independently, so the unconditional rate of position ``i`` is
  ``p^(i+1)`` and the expected tokens per verification ``(1 - p^(k+1)) / (1 - p)``
  (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
  Decoding", eq. 1).

:class:`SpecAcceptanceModel` is the ``spec_acceptance`` callable of
:func:`kvcore.sim.engine.run_engine`: one uniform draw per verification, a pure function
of ``(seed, request_id, verification index)`` (blake2b), so a run is the same for a seed
whatever the order of the steps, the process or the replica; the drafts accepted are the
leading positions whose rate exceeds the draw, which has vLLM's distribution (its kernel
draws one uniform per position against the conditional rates, ``rejection_sampler.py``
``rejection_greedy_sample_kernel``).  It counts what vLLM's ``SpecDecodingStats``
counts (``observe_draft``: one draft per verification with drafts, its draft tokens,
its accepted tokens before the stop check trims them, accepted per position), and
:meth:`SpecAcceptanceModel.figures` gives ``vllm bench serve``'s names for them
(``serve.py``: ``spec_decode_acceptance_rate`` in %, ``spec_decode_acceptance_length``
= 1 + accepted / drafts, ``spec_decode_num_drafts``, ``spec_decode_draft_tokens``,
``spec_decode_accepted_tokens``, ``spec_decode_per_position_acceptance_rates``).

The step-time model times a verification as any step: each decode computes 1 +
drafts tokens.  The drafter's own time (an EAGLE head's or MTP layer's forward passes,
the n-gram lookup) is not modelled by default: figures are those of a free drafter.
:class:`DraftCostTimeModel` (``--spec-draft-cost F``, default 0: unchanged figures) adds
a simple, documented term for drafters that run a model: k sequential drafting passes
after the step, each F times the wrapped model's time for one decode step (1 token) of
the step's decoding requests.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvcore.errors import ConfigError, shorten
from kvcore.units import as_int, check_int

__all__ = ["SpeculativeSettings", "SpecAcceptanceModel", "parse_speculative_config",
           "check_model_supports", "DraftCostTimeModel", "iid_rates", "length_rates", "expected_acceptance_length",
           "SCHEDULED_METHODS", "VLLM_FIELDS"]

#: the methods whose scheduling kvcore models (see the module docstring)
SCHEDULED_METHODS = ("ngram", "ngram_gpu", "eagle", "eagle3", "mtp")
#: vLLM 0.32's MTP method names it maps to ``mtp`` (config/speculative.py MTPModelTypes)
_MTP_ALIASES = frozenset((
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp",
    "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp",
    "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp",
    "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp",
    "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "hy_v4_mtp",
    "gemma4_mtp", "inkling_mtp", "glm5_next_mtp"))
#: vLLM 0.32 methods kvcore refuses, and why
_REFUSED_METHODS = {
    "draft_model": "its drafting slot (max_num_new_slots_for_drafting 1) and draft model",
    "medusa": "its proposer", "mlp_speculator": "its proposer",
    "suffix": "its dynamic draft count", "custom_class": "its proposer",
    "extract_hidden_states": "its proposer",
    "dflash": "its K drafting slots and K + 1 lookahead slots",
    "dspark": "its drafting slots and adaptive verification",
}
#: every field of vLLM 0.32's SpeculativeConfig (dataclasses.fields)
VLLM_FIELDS = (
    "enforce_eager", "num_speculative_tokens", "model", "method",
    "draft_tensor_parallel_size", "tensor_parallel_size", "quantization", "moe_backend",
    "attention_backend", "kv_cache_dtype", "max_model_len", "revision", "code_revision",
    "index_share_for_mtp_iteration", "disable_padded_drafter_batch",
    "disable_eagle_block_drop", "use_local_argmax_reduction", "use_heterogeneous_vocab",
    "prompt_lookup_max", "prompt_lookup_min", "parallel_drafting", "target_model_config",
    "target_parallel_config", "num_speculative_tokens_per_batch_size",
    "draft_model_config", "draft_parallel_config", "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob", "draft_load_config", "rejection_sample_method",
    "synthetic_acceptance_rates", "synthetic_acceptance_length",
    "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk")
#: fields whose scheduling kvcore does not model (refused when set)
_UNMODELLED = {
    "num_speculative_tokens_per_batch_size": "dynamic speculative decoding (a draft count "
                                             "per batch size)",
    "parallel_drafting": "parallel drafting's extra drafting slots",
    "enable_adaptive_verification": "adaptive verification (dspark only in vLLM)",
}
#: fields the engine fills in, never a user's (vLLM: SkipValidation, set post-init)
_INTERNAL = ("target_model_config", "target_parallel_config", "draft_model_config",
             "draft_parallel_config")
_FIELD = "speculative_config"


@dataclass(frozen=True)
class SpeculativeSettings:
    """What the scheduler sees of a ``--speculative-config`` (module docstring).

    method: vLLM's method name (MTP aliases as ``mtp``).  num_speculative_tokens: k,
    drafts per step, tokens.  use_eagle: the manager drops the last matched block of a
    prefix hit.  num_lookahead_tokens: KV slots reserved past the scheduled tokens.
    include_mtp_layers: plan the model's MTP layers.  synthetic_acceptance_rates: vLLM's
    per-position unconditional rates (None: no synthetic sampler).  ignored: the given
    fields that do not change the schedule.  config: the object as given (JSON types).
    """

    method: str
    num_speculative_tokens: int
    use_eagle: bool = False
    num_lookahead_tokens: int = 0
    include_mtp_layers: bool = False
    synthetic_acceptance_rates: tuple[float, ...] | None = None
    ignored: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The settings as the report's ``speculative_config`` object."""
        return {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens,
                "use_eagle": self.use_eagle,
                "num_lookahead_tokens": self.num_lookahead_tokens,
                "include_mtp_layers": self.include_mtp_layers,
                "synthetic_acceptance_rates": None
                if self.synthetic_acceptance_rates is None
                else list(self.synthetic_acceptance_rates),
                "ignored_fields": list(self.ignored)}


def _bad(message: str, name: str, value: Any) -> ConfigError:
    return ConfigError(f"--speculative-config {message}", field=f"{_FIELD}.{name}",
                       value=shorten(value))


def _int_field(d: dict[str, Any], name: str, minimum: int) -> int | None:
    """An int field as vLLM's pydantic config reads it (lax mode: ``"3"`` and ``3.0``
    are 3; ``3.5``, ``"x"`` and booleans are refused)."""
    v = d.get(name)
    if v is None:
        return None
    n = v
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        n = int(v)
    elif isinstance(v, str) and v.strip().lstrip("+-").isdigit():
        n = int(v.strip())
    number = as_int(n)  # numpy integers too, as a plain int; bool refused
    if number is None or number < minimum:
        raise _bad(f"{name} {shorten(v)}: must be an integer >= {minimum}", name, v)
    return number


def _rate(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise _bad(f"{name} {shorten(v)}: each entry must be a number in [0, 1]", name, v)
    return float(v)


def iid_rates(p: float, k: int) -> tuple[float, ...]:
    """Per-position unconditional acceptance rates of i.i.d. drafts accepted with
    probability ``p`` each: ``(p, p^2, ..., p^k)`` (position i needs all i + 1 drafts
    up to it).  Raises ConfigError (field ``spec_acceptance_rate``) unless ``0 <= p <=
    1`` and ``k >= 1``."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ConfigError(f"--spec-acceptance-rate {shorten(p)}: must be a probability in "
                          f"[0, 1] (each draft token accepted with it, independently)",
                          field="spec_acceptance_rate", value=shorten(p))
    k = _check_k(k)
    return tuple(float(p) ** (i + 1) for i in range(k))


def length_rates(length: float, k: int) -> tuple[float, ...]:
    """vLLM's ``SpeculativeConfig._acceptance_length_to_rates``: the minimum-variance
    rates of a mean acceptance length (bonus token included) ``1 <= length <= k + 1``:
    ``[1] * floor(length - 1) + [frac] + [0, ...]``, k entries.  Raises ConfigError
    (field ``speculative_config.synthetic_acceptance_length``) outside that range."""
    k = _check_k(k)
    name = "synthetic_acceptance_length"
    if isinstance(length, bool) or not isinstance(length, (int, float)) or \
            not 1.0 <= length <= float(k + 1):
        raise _bad(f"{name} {shorten(length)}: must be in [1, {k + 1}] (1 + "
                   f"num_speculative_tokens), as vLLM checks", name, length)
    drafts = float(length) - 1.0
    full = int(drafts)
    return tuple(([1.0] * full + [drafts - full] + [0.0] * (k - full - 1))[:k])


#: the most draft tokens per step taken (vLLM sets no cap; past this a rate list is
#: memory, not a model of any drafter)
MAX_SPECULATIVE_TOKENS = 1024


def _check_k(k: Any) -> int:
    """``k`` (num_speculative_tokens) as an int in [1, MAX_SPECULATIVE_TOKENS]; numpy
    ints taken."""
    number = as_int(k)  # numpy integers too, as a plain int; bool refused
    if number is None or not 1 <= number <= MAX_SPECULATIVE_TOKENS:
        raise _bad(f"num_speculative_tokens {shorten(k)}: must be an integer in [1, "
                   f"{MAX_SPECULATIVE_TOKENS}]", "num_speculative_tokens", k)
    return number


def expected_acceptance_length(rates: Sequence[float]) -> float:
    """The expected tokens a verification yields, bonus token included: ``1 + sum(rates)``
    (``E[accepted] = sum_i P(accepted > i)``); for :func:`iid_rates` that is ``(1 -
    p^(k+1)) / (1 - p)`` (Leviathan et al. 2023, eq. 1).  Raises ConfigError (field
    ``spec_acceptance``) unless ``rates`` is a sequence of numbers in [0, 1]."""
    r = _rates(rates)
    return 1.0 + math.fsum(r)


def _rates(rates: Any) -> tuple[float, ...]:
    from collections.abc import Iterable, Mapping

    if isinstance(rates, (str, bytes, bytearray, Mapping)) or not isinstance(rates,
                                                                             Iterable):
        raise ConfigError(f"spec_acceptance rates {shorten(rates)}: must be a sequence "
                          f"of rates in [0, 1], one per draft position",
                          field="spec_acceptance", value=shorten(rates))
    r = tuple(rates)
    if any(isinstance(x, bool) or not isinstance(x, (int, float))
           or not 0.0 <= x <= 1.0 for x in r):
        raise ConfigError(f"spec_acceptance rates {shorten(list(r))}: each must be a "
                          f"number in [0, 1]", field="spec_acceptance",
                          value=shorten(list(r)))
    return tuple(float(x) for x in r)


def parse_speculative_config(text: str | dict[str, Any]) -> SpeculativeSettings:
    """``--speculative-config``'s JSON object (or the dict) as :class:`SpeculativeSettings`.

    Raises ConfigError naming ``speculative_config.<field>``, the value and what is
    valid, for JSON that does not parse or is not an object, an unknown field, a method
    kvcore does not schedule, or a value vLLM refuses (module docstring)."""
    if isinstance(text, dict):
        from kvcore.units import plain_ints

        d = plain_ints(dict(text))  # numpy integers as the equal plain int (JSON types)
    else:
        try:
            d = json.loads(text)
        except RecursionError:
            raise ConfigError(f"--speculative-config {shorten(text)}: not JSON (nested too "
                              f"deeply); give an object such as '{{\"method\": \"ngram\", "
                              f"\"num_speculative_tokens\": 3}}'", field=_FIELD,
                              value=shorten(text)) from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"--speculative-config {shorten(text)}: not JSON ({exc}); "
                              f"give an object such as '{{\"method\": \"ngram\", "
                              f"\"num_speculative_tokens\": 3}}'", field=_FIELD,
                              value=shorten(text)) from None
        if not isinstance(d, dict):
            raise ConfigError(f"--speculative-config {shorten(text)}: must be a JSON object "
                              f"such as '{{\"method\": \"ngram\", \"num_speculative_tokens\""
                              f": 3}}'", field=_FIELD, value=shorten(text))
    unknown = [k for k in d if k not in VLLM_FIELDS]
    if unknown:
        raise _bad(f"field {unknown[0]!r}: not a field of vLLM 0.32's SpeculativeConfig "
                   f"(it refuses extra fields); known: {', '.join(VLLM_FIELDS)}",
                   str(unknown[0]), d[unknown[0]])
    for name in _INTERNAL:
        if d.get(name) is not None:
            raise _bad(f"{name}: set by the engine, not by the user", name, d[name])
    if d.get("tensor_parallel_size") is not None:  # vLLM's _verify_args message
        raise _bad("tensor_parallel_size: 'tensor_parallel_size' is not a valid argument "
                   "in the speculative_config; pass 'draft_tensor_parallel_size' instead",
                   "tensor_parallel_size", d["tensor_parallel_size"])
    for name, what in _UNMODELLED.items():
        v = d.get(name)
        if v not in (None, False, [], ()):
            raise _bad(f"{name} {shorten(v)}: kvcore does not model {what}; drop it",
                       name, v)
    model = d.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad(f"model {shorten(model)}: must be a string (a draft model, EAGLE head "
                   f"or 'ngram')", "model", model)
    method = d.get("method")
    if method is None:  # vLLM's inference from the model
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if not isinstance(method, str):
        raise _bad(f"method {shorten(method)}: must be a string, one of "
                   f"{', '.join(SCHEDULED_METHODS)}", "method", method)
    if method == "[ngram]":
        method = "ngram"
    if method in _MTP_ALIASES:
        method = "mtp"
    if method not in SCHEDULED_METHODS:
        why = _REFUSED_METHODS.get(method)
        what = (f"kvcore does not model {why}" if why else
                "not a method of vLLM 0.32's SpeculativeConfig")
        implied = " (vLLM's default when neither method nor model 'ngram' is given)" \
            if d.get("method") is None else ""
        raise _bad(f"method {method!r}{implied}: {what}; kvcore simulates "
                   f"{', '.join(SCHEDULED_METHODS)}", "method", method)
    k = _int_field(d, "num_speculative_tokens", 1)
    if k is None:
        raise _bad("num_speculative_tokens: required, an integer > 0 (kvcore reads no "
                   "draft model config for an n_predict default)", "num_speculative_tokens",
                   None)
    if method in ("eagle", "eagle3") and not model:
        raise _bad(f"model: method {method!r} needs the EAGLE head's name in 'model' (vLLM: "
                   f"num_speculative_tokens was provided but without speculative model)",
                   "model", model)
    lo = _int_field(d, "prompt_lookup_min", 1)
    hi = _int_field(d, "prompt_lookup_max", 1)
    if lo is not None and hi is not None and lo > hi:
        raise _bad(f"prompt_lookup_min {lo}: must be <= prompt_lookup_max {hi}",
                   "prompt_lookup_min", lo)
    for name in ("draft_tensor_parallel_size", "max_model_len", "dspark_draft_topk"):
        _int_field(d, name, 1)
    for name in ("disable_eagle_block_drop", "enforce_eager", "disable_padded_drafter_batch",
                 "use_local_argmax_reduction", "use_heterogeneous_vocab"):
        v = d.get(name)
        if v is not None and not isinstance(v, bool):
            raise _bad(f"{name} {shorten(v)}: must be true or false", name, v)
    rsm = d.get("rejection_sample_method", "standard")
    if rsm not in ("standard", "synthetic", "block"):
        raise _bad(f"rejection_sample_method {shorten(rsm)}: must be standard, synthetic or "
                   f"block", "rejection_sample_method", rsm)
    rates_in = d.get("synthetic_acceptance_rates")
    length = d.get("synthetic_acceptance_length")
    rates: tuple[float, ...] | None = None
    if rsm == "synthetic":
        if (rates_in is None) == (length is None):
            raise _bad("rejection_sample_method 'synthetic': give exactly one of "
                       "synthetic_acceptance_rates or synthetic_acceptance_length (vLLM's "
                       "rule)", "rejection_sample_method", rsm)
        if rates_in is not None:
            name = "synthetic_acceptance_rates"
            if not isinstance(rates_in, list) or len(rates_in) != k:
                raise _bad(f"{name} {shorten(rates_in)}: must be a list of {k} rates (one "
                           f"per draft position)", name, rates_in)
            rates = tuple(_rate(name, v) for v in rates_in)
            if any(rates[i] > rates[i - 1] for i in range(1, k)):
                raise _bad(f"{name} {shorten(rates_in)}: must be non-increasing (position i "
                           f"is the probability that drafts 0..i are all accepted)", name,
                           rates_in)
        else:
            rates = length_rates(length, k)  # type: ignore[arg-type]
    elif rates_in is not None or length is not None:
        name = "synthetic_acceptance_rates" if rates_in is not None \
            else "synthetic_acceptance_length"
        raise _bad(f"{name}: only valid with rejection_sample_method 'synthetic' (vLLM's "
                   f"rule)", name, rates_in if rates_in is not None else length)
    eagle = method in ("eagle", "eagle3", "mtp")
    modelled = {"method", "num_speculative_tokens", "rejection_sample_method",
                "synthetic_acceptance_rates", "synthetic_acceptance_length",
                "disable_eagle_block_drop"}
    ignored = tuple(k_ for k_ in d if k_ not in modelled and d[k_] is not None)
    return SpeculativeSettings(
        method=method, num_speculative_tokens=k,
        use_eagle=eagle and not d.get("disable_eagle_block_drop", False),
        num_lookahead_tokens=k if eagle else 0, include_mtp_layers=method == "mtp",
        synthetic_acceptance_rates=rates, ignored=ignored, config=d)


def check_model_supports(spec: SpeculativeSettings, model_config: Any, model: str) -> None:
    """Refuse ``method: mtp`` on a model without MTP layers (vLLM loads the draft from
    the target checkpoint's ``num_nextn_predict_layers`` / ``mtp_num_hidden_layers``
    layers, Qwen3-Next's ``mtp.*``, and fails without them).  ``model_config``: a
    :class:`kvcore.models.config.ModelConfig`.  Raises ConfigError naming
    ``speculative_config.method`` (``spec`` when it is not a SpeculativeSettings)."""
    if not isinstance(spec, SpeculativeSettings):
        raise ConfigError(f"spec must be a SpeculativeSettings (parse_speculative_config"
                          f"'s), got {type(spec).__name__} {shorten(spec)}", field="spec",
                          value=shorten(spec))
    if spec.method != "mtp":
        return
    raw = getattr(model_config, "raw", {}) or {}
    n = 0
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        v = raw.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            n = v
    if n or getattr(model_config, "model_type", None) == "qwen3_next":
        return
    raise _bad(f"method 'mtp': {model} has no MTP layers (num_nextn_predict_layers / "
               f"mtp_num_hidden_layers 0 in its config), which vLLM's mtp method drafts "
               f"with; use ngram, eagle or eagle3", "method", "mtp")


class SpecAcceptanceModel:
    """The ``spec_acceptance(request_id, verification, num_drafts) -> accepted`` callable
    of :func:`kvcore.sim.engine.run_engine` (module docstring), with vLLM's counters.

    rates: per-position unconditional acceptance rates (k entries in [0, 1],
    non-increasing; :func:`iid_rates`, :func:`length_rates` or vLLM's
    ``synthetic_acceptance_rates``).  seed: the run's ``--seed``.

    Raises ConfigError (field ``spec_acceptance``) for rates that are empty, out of
    [0, 1] or increasing, and (in a call) for a draft count outside 1..k.
    """

    def __init__(self, rates: Sequence[float], seed: int = 0) -> None:
        r = _rates(rates)
        check_int(seed, "seed", minimum=None, maximum=1 << 64)
        if not r or any(isinstance(x, bool) or not isinstance(x, (int, float))
                        or not 0.0 <= x <= 1.0 for x in r) \
                or any(r[i] > r[i - 1] for i in range(1, len(r))):
            raise ConfigError(f"spec_acceptance rates {shorten(list(r))}: must be one "
                              f"non-increasing rate in [0, 1] per draft position",
                              field="spec_acceptance", value=shorten(list(r)))
        self.rates = tuple(float(x) for x in r)
        self.seed = seed
        self._salt = f"{seed}\x1f".encode()
        #: vLLM's SpecDecodingStats counters
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_per_pos = [0] * len(r)

    @property
    def num_speculative_tokens(self) -> int:
        return len(self.rates)

    def uniform(self, request_id: str, verification: int) -> float:
        """The draw of a verification, in [0, 1): blake2b of (seed, request id, index)."""
        h = hashlib.blake2b(self._salt + f"{request_id}\x1f{verification}".encode(),
                            digest_size=8).digest()
        return int.from_bytes(h, "little") / 18446744073709551616.0

    def accepted(self, request_id: str, verification: int, num_drafts: int) -> int:
        """Drafts accepted (no counting): the leading positions ``i < num_drafts`` with
        ``draw < rates[i]``.  Raises ConfigError for a ``request_id`` that is not a
        str, a ``verification`` that is not an int >= 0, a ``num_drafts`` that is not
        an int in [0, k]."""
        if not isinstance(request_id, str):
            raise ConfigError(f"spec_acceptance: request_id must be a str, got "
                              f"{shorten(request_id)}", field="request_id",
                              value=shorten(request_id))
        check_int(verification, "verification", minimum=0, maximum=1 << 62)
        check_int(num_drafts, "num_drafts", minimum=0, maximum=len(self.rates))
        u = self.uniform(request_id, verification)
        rates = self.rates
        n = 0
        while n < num_drafts and u < rates[n]:
            n += 1
        return n

    def __call__(self, request_id: str, verification: int, num_drafts: int) -> int:
        if isinstance(num_drafts, bool) or not isinstance(num_drafts, int) or \
                not 1 <= num_drafts <= len(self.rates):
            raise ConfigError(f"spec_acceptance: {shorten(num_drafts)} drafts verified; "
                              f"must be 1 to {len(self.rates)} (num_speculative_tokens)",
                              field="spec_acceptance", value=shorten(num_drafts))
        n = self.accepted(request_id, verification, num_drafts)
        self.num_drafts += 1
        self.num_draft_tokens += num_drafts
        self.num_accepted_tokens += n
        per = self.accepted_per_pos
        for i in range(n):
            per[i] += 1
        return n

    @property
    def expected_acceptance_length(self) -> float:
        """1 + sum of the rates: the mean tokens per verification of k drafts."""
        return expected_acceptance_length(self.rates)

    def figures(self) -> dict[str, Any]:
        """``vllm bench serve``'s spec-decode figures of what was counted (serve.py:
        ``spec_decode_acceptance_rate`` accepted / draft tokens x 100,
        ``spec_decode_acceptance_length`` 1 + accepted / drafts, the counts, and the
        per-position accepted / drafts); the rates are None before any draft."""
        nd, nt, na = self.num_drafts, self.num_draft_tokens, self.num_accepted_tokens
        return {
            "spec_decode_acceptance_rate": 100.0 * na / nt if nt else None,
            "spec_decode_acceptance_length": 1.0 + na / nd if nd else None,
            "spec_decode_num_drafts": nd,
            "spec_decode_draft_tokens": nt,
            "spec_decode_accepted_tokens": na,
            "spec_decode_per_position_acceptance_rates":
                [a / nd for a in self.accepted_per_pos] if nd else [],
        }


#: the largest ``--spec-draft-cost`` (a drafting pass at most this many target decode
#: steps; beyond it the step times overflow long before they mean anything)
MAX_DRAFT_COST = 100.0


class DraftCostTimeModel:
    """A step-time model plus the drafter's passes (kvcore's own term, not vLLM's).

    ``step_time(batch) = base.step_time(batch) + k x draft_cost x
    base.step_time(decode batch)``, where the decode batch holds one 1-token decode per
    request of ``batch`` that is not a prefill, at its context after the step
    (``num_computed_tokens + num_new_tokens - 1``): an autoregressive drafter (EAGLE,
    MTP) runs k passes of one token per decoding request after the target's forward,
    each ``draft_cost`` times a target decode step of the same requests.  A guide for
    ``draft_cost``: the drafter's layers over the target's (an EAGLE-3 head, one
    decoder layer and the LM head, on a 32-layer target: ~0.03 to 0.1); ngram's CPU
    lookup is ~0.  Steps without decodes (prefill only) add nothing; the drafter's pass
    over a prompt after its prefill is not counted.

    base: any step-time model (its other attributes, e.g. ``request_overhead_s``,
    ``batches_in_flight``, are passed through).  kv_cache_config: the plan
    (:func:`kvcore.sim.timing.describe_batch`).  Raises ConfigError (field
    ``spec_draft_cost``) unless ``draft_cost`` is a finite number >= 0 and k >= 1.
    """

    def __init__(self, base: Any, kv_cache_config: Any, num_speculative_tokens: int,
                 draft_cost: float) -> None:
        if isinstance(draft_cost, bool) or not isinstance(draft_cost, (int, float)) or \
                not 0.0 <= draft_cost <= MAX_DRAFT_COST:
            raise ConfigError(f"--spec-draft-cost {shorten(draft_cost)}: must be a number "
                              f"from 0 to {MAX_DRAFT_COST:g} (a drafting pass's time over a "
                              f"target decode step's; a drafter slower than the target "
                              f"{MAX_DRAFT_COST:g} times over is no drafter)",
                              field="spec_draft_cost", value=shorten(draft_cost))
        _check_k(num_speculative_tokens)
        self.base = base
        self.kv_cache_config = kv_cache_config
        self.num_speculative_tokens = num_speculative_tokens
        self.draft_cost = float(draft_cost)

    def __getattr__(self, name: str) -> Any:
        if name == "base":  # (not set yet: during unpickling)
            raise AttributeError(name)
        return getattr(self.base, name)

    def step_time(self, batch: Any) -> float:
        """Seconds of one step, the drafting passes included (class docstring)."""
        from kvcore.sim.timing import ScheduledRequest, describe_batch

        t = float(self.base.step_time(batch))
        if not self.draft_cost:
            return t
        dec = [ScheduledRequest(1, r.num_computed_tokens + r.num_new_tokens - 1, False,
                                r.num_encoder_tokens)
               for r in batch.requests if not r.is_prefill]
        if not dec:
            return t
        one = float(self.base.step_time(describe_batch(self.kv_cache_config, dec)))
        return t + self.num_speculative_tokens * self.draft_cost * one

    @property
    def description(self) -> str:
        """The wrapped model's line plus the drafting term."""
        inner = getattr(self.base, "description", None) or getattr(self.base, "name", "") \
            or type(self.base).__name__
        return (f"{inner} + {self.num_speculative_tokens} drafting passes x "
                f"{self.draft_cost:g} of a decode step")
