"""Engine profiles: how each vLLM generation turns a GPU into a KV-cache budget.

``--engine vllm==X.Y[.Z]`` (Python: ``engine="vllm==0.10.1"``), one released vLLM version
kvcore knows (:data:`KNOWN_RELEASES`: 0.4.0 to 0.32.0, from PyPI; anything else is a
ConfigError naming ``--engine``), picks the generation whose memory accounting that
release used; :func:`engine_ledger` then writes the per-rank
ledger, one line per term, each with its rule and source::

    KV budget per rank = CUDA's device total x gpu_memory_utilization
                         - weights per rank (+ load-time padding)
                         - activation peak of the profile run (forward + sampler)
                         - non-torch memory (cuBLAS, NCCL, custom all-reduce)
                         - CUDA-graph memory (only where the profile counts it)

The generations (``PROFILES``; every rule cites a file@version, a PR or a log):

==========  ===========  ===========================================================
profile     releases     what changed
==========  ===========  ===========================================================
vllm==0.4   0.4.0-0.6.4  V0.  ``profile_run``: ``max_num_batched_tokens`` tokens split
                         over ``max_num_seqs`` sequences (default ``max(max_model_len,
                         2048)`` tokens without chunked prefill; 512 with it, turned
                         on by default past 32K tokens), then the sampler; the peak is
                         ``free-before - free-after`` (vllm/worker/worker.py@v0.5.4
                         ``determine_num_available_blocks``).  CUDA graphs captured
                         after the cache, outside the budget.
vllm==0.6.5 0.6.5-0.7.3  V0 with the profiling overhaul (vllm-project/vllm#10511):
                         weights, non-torch memory and the torch peak measured apart;
                         chunked-prefill token budget 2048 (vllm#10544).
vllm==0.8   0.8.0-0.8.5  V1 by default.  ``max_num_batched_tokens`` default by usage
                         context and device name: H100/H200 8192 (serve) / 16384
                         (offline), others 2048 / 8192 (vllm#12369); ``max_num_seqs``
                         256; the dummy sampler run on ``max_num_seqs`` rows is in the
                         profile; CUDA graphs outside it.
vllm==0.9   0.9.0-0.20.2 The same defaults keyed on device memory >= 70 GiB and not
                         A100 (vllm#17885); MXFP4 experts padded at load (Marlin:
                         intermediate to 128, hidden to 256; seen from 0.10.1).
vllm==0.21  0.21-0.31.0  CUDA-graph memory profiled and taken from the budget by
                         default (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, "default
                         since v0.21.0": vllm/v1/worker/gpu_worker.py@0.32); 1024
                         default ``max_num_seqs`` on >= 70 GiB GPUs (seen at 0.25 and
                         0.28 in vllm#49064 / kaito-project/kaito#2319 logs).
vllm==0.32  0.32.0       ``get_batch_defaults``@0.32: >= 160 GiB devices 16384 tokens
                         for both contexts (vllm#51726), >= 70 GiB non-A100
                         8192 / 16384; ``max_num_seqs`` 1024 on both tiers, else 256.
==========  ===========  ===========================================================

What kvcore cannot see and the ledger says so: other processes on the GPU, KV
connectors' buffers (LMCache), multimodal encoder caches beyond the text model.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from kvcore.errors import ConfigError

__all__ = ["EngineProfile", "PROFILES", "DEFAULT_ENGINE", "KNOWN_RELEASES", "get_engine",
           "LedgerLine",
           "EngineLedger",
           "PERFORMANCE_MODES", "check_performance_mode"]

_GIB = 1 << 30
_MIB = 1 << 20


@dataclass(frozen=True)
class EngineProfile:
    """One vLLM generation's memory accounting.

    Attributes
    ----------
    name:
        ``vllm==X.Y[.Z]``: the first release of the generation.
    first, last:
        The release range (inclusive), as (major, minor, patch) tuples.
    v1:
        The V1 engine (vLLM 0.8+ by default) rather than V0.
    cudagraphs_in_profile:
        The budget subtracts the CUDA-graph estimate (0.21+).
    summary:
        One line on what this generation does.
    """

    name: str
    first: tuple[int, int, int]
    last: tuple[int, int, int]
    v1: bool
    cudagraphs_in_profile: bool
    summary: str
    version: tuple[int, int, int] = field(default=(0, 0, 0))

    @property
    def releases(self) -> str:
        """The release range as text: the first and last of vLLM's releases it covers
        (``0.6.5-0.7.3``, :data:`KNOWN_RELEASES`)."""
        def three(r: str) -> tuple[int, int, int]:
            nums = [int(x) for x in r.partition(".post")[0].split(".")] + [0, 0]
            return nums[0], nums[1], nums[2]
        inside = [r for r in KNOWN_RELEASES if self.first <= three(r) <= self.last
                  and ".post" not in r and r.count(".") == 2]
        if not inside:
            return "-".join(".".join(map(str, v)) for v in (self.first, self.last))
        return inside[0] if len(inside) == 1 else f"{inside[0]}-{inside[-1]}"

    @property
    def release(self) -> str:
        """The release asked for (``0.10.1``), or the generation's first."""
        v = self.version if self.version != (0, 0, 0) else self.first
        return ".".join(map(str, v))

    def at(self, version: tuple[int, int, int]) -> EngineProfile:
        from dataclasses import replace

        return replace(self, version=version)


PROFILES: tuple[EngineProfile, ...] = (
    EngineProfile("vllm==0.4", (0, 4, 0), (0, 6, 4), False, False,
                  "V0: profile = max(max_model_len, 2048) tokens (512 with chunked "
                  "prefill) over max_num_seqs; peak = free before - free after"),
    EngineProfile("vllm==0.6.5", (0, 6, 5), (0, 7, 99), False, False,
                  "V0 after vllm#10511: weights, non-torch and torch peak apart; "
                  "chunked prefill 2048 tokens (vllm#10544)"),
    EngineProfile("vllm==0.8", (0, 8, 0), (0, 8, 99), True, False,
                  "V1: batch defaults by usage context and H100/H200 name (vllm#12369); "
                  "CUDA graphs outside the profile"),
    EngineProfile("vllm==0.9", (0, 9, 0), (0, 20, 99), True, False,
                  "V1: batch defaults by memory >= 70 GiB, not A100 (vllm#17885); "
                  "CUDA graphs outside the profile"),
    EngineProfile("vllm==0.21", (0, 21, 0), (0, 31, 99), True, True,
                  "V1: CUDA-graph memory profiled into the budget (default since "
                  "v0.21.0)"),
    EngineProfile("vllm==0.32", (0, 32, 0), (0, 32, 99), True, True,
                  "V1 0.32: get_batch_defaults with the >= 160 GiB tier; max_num_seqs "
                  "1024 on >= 70 GiB GPUs"),
)
DEFAULT_ENGINE = "vllm==0.32"

#: vLLM's releases that a profile covers, as PyPI lists them (``pip index versions vllm``,
#: 2026-12: 0.0.1 ... 0.34.0; the ones before 0.4.0 and after 0.32.0 have no profile).
#: ``--engine vllm==X.Y[.Z]`` must name one of these (``X.Y`` is ``X.Y.0``, as in pip);
#: post releases (``0.8.5.post1``, ``0.10.1.1``) count as theirs.
KNOWN_RELEASES: tuple[str, ...] = (
    "0.4.0", "0.4.0.post1", "0.4.1", "0.4.2", "0.4.3",
    "0.5.0", "0.5.0.post1", "0.5.1", "0.5.2", "0.5.3", "0.5.3.post1", "0.5.4", "0.5.5",
    "0.6.0", "0.6.1", "0.6.1.post1", "0.6.1.post2", "0.6.2", "0.6.3", "0.6.3.post1",
    "0.6.4", "0.6.4.post1", "0.6.5", "0.6.6", "0.6.6.post1",
    "0.7.0", "0.7.1", "0.7.2", "0.7.3",
    "0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.8.4", "0.8.5", "0.8.5.post1",
    "0.9.0", "0.9.0.1", "0.9.1", "0.9.2",
    "0.10.0", "0.10.1", "0.10.1.1", "0.10.2",
    "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.14.1",
    "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.18.1",
    "0.19.0", "0.19.1", "0.20.0", "0.20.1", "0.20.2",
    "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0",
    "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0",
)
#: released after 0.32.0 (PyPI, 2026-12), with no profile yet: named in the error
NEWER_RELEASES: tuple[str, ...] = ("0.33.0", "0.34.0")

# ``vllm==`` and a PEP 440 release (``v`` allowed, as in git tags), an optional post
# release (``.post1``) and an optional local label (``+cu126``, as wheels carry)
_SPEC = re.compile(r"^\s*vllm\s*==\s*v?(?P<release>\d+(?:\.\d+)*)"
                   r"(?:[.\-_]?(?P<pre>a|b|rc|c|alpha|beta|pre|preview)\d*)?"
                   r"(?:[.\-_]?post(?P<post>\d+))?(?:[.\-_]?(?P<dev>dev)\d*)?"
                   r"(?:\+[a-z0-9]+(?:[._][a-z0-9]+)*)?\s*$",
                   re.IGNORECASE | re.ASCII)  # ASCII: \d is 0-9 only (not "٣٢", "０")


def _release_key(text: str) -> tuple[tuple[int, ...], int]:
    """A release's comparison key: its numbers without trailing zeros (``0.10`` is
    ``0.10.0``, as PEP 440 compares them) and its post number (-1: none)."""
    rel, _, post = text.partition(".post")
    nums = [int(x) for x in rel.split(".")]
    while len(nums) > 1 and nums[-1] == 0:
        nums.pop()
    return tuple(nums), int(post) if post else -1


_KNOWN = {_release_key(r): r for r in KNOWN_RELEASES}


def _nearest_releases(key: tuple[tuple[int, ...], int]) -> str:
    """The known releases just below and just above ``key``, as text."""
    ordered = sorted(_KNOWN)
    below = [k for k in ordered if k < key]
    above = [k for k in ordered if k > key]
    near = ([_KNOWN[below[-1]]] if below else []) + ([_KNOWN[above[0]]] if above else [])
    return " or ".join(near)


def _releases_text() -> str:
    return f"{KNOWN_RELEASES[0]} to {KNOWN_RELEASES[-1]} (vLLM's releases on PyPI)"


def get_engine(spec: str | EngineProfile | None = None) -> EngineProfile:
    """The profile for ``vllm==X.Y[.Z]`` (None: :data:`DEFAULT_ENGINE`).

    The release must be one vLLM published that a profile covers
    (:data:`KNOWN_RELEASES`, 0.4.0 to 0.32.0; ``X.Y`` is ``X.Y.0`` as in pip; a post
    release such as ``0.10.1.1`` or ``0.8.5.post1`` and a local label such as
    ``+cu126`` are taken).  A nightly or release candidate (``0.7.4.dev181+gf35f8e22``,
    ``0.8.0rc1``) within that range is planned as the release it precedes when vLLM
    published it, else as the last release before it (0.7.4 never was: 0.7.3).  It maps to its generation (``vllm==0.10.1`` ->
    ``vllm==0.9``), remembering the release asked for.  Raises ConfigError (field
    ``engine``; the message names ``--engine``, the value, the known releases and the
    nearest ones) for a malformed spec, another engine, or a version vLLM never released
    or kvcore has no profile for (``vllm==0.32.99``, ``vllm==0.33.0``).
    """
    if isinstance(spec, EngineProfile):
        return spec
    spec = DEFAULT_ENGINE if spec is None else spec
    known = ", ".join(f"{p.name} ({p.releases})" for p in PROFILES)
    valid = f"valid: vllm==X.Y[.Z] for a release {_releases_text()}; profiles: {known}"
    if not isinstance(spec, str):
        raise ConfigError(f"--engine {spec!r}: must be a string like 'vllm==0.10.1'; "
                          f"{valid}", field="engine", value=repr(spec))
    m = _SPEC.match(spec)
    if m is None:
        raise ConfigError(f"--engine {spec!r}: not 'vllm==X.Y[.Z]' (one released version; "
                          f"kvcore models vLLM only, no ranges such as >=); {valid}",
                          field="engine", value=repr(spec))
    release = m.group("release")
    post = m.group("post")
    key = _release_key(release + (f".post{int(post)}" if post is not None else ""))
    asked = release + (f".post{int(post)}" if post is not None else "")
    if (m.group("pre") or m.group("dev")) and post is None and \
            _release_key(KNOWN_RELEASES[0]) <= key <= _release_key(KNOWN_RELEASES[-1]):
        # a nightly / release candidate (0.7.4.dev181+gf35f8e22, 0.8.0rc1): the code line
        # of X.Y.Z before its release; a version that was never released (0.7.4) runs
        # the memory accounting of the last release before it (0.7.3)
        below = [r for r in KNOWN_RELEASES if _release_key(r) <= key]
        key = _release_key(below[-1])
        release = below[-1].partition(".post")[0]
    if key not in _KNOWN:
        newer = ""
        if key < _release_key(KNOWN_RELEASES[0]):
            newer = (f" (kvcore has no profile for releases before {KNOWN_RELEASES[0]})")
        elif key > _release_key(KNOWN_RELEASES[-1]):
            later = [r for r in NEWER_RELEASES if _release_key(r) <= key]
            newer = (f" (vLLM {later[-1]} is released, but kvcore has no profile for "
                     f"releases after {KNOWN_RELEASES[-1]} yet)" if later else "")
        raise ConfigError(f"--engine {spec!r}: vLLM {asked} is not a release kvcore knows"
                          f"{newer}; nearest known: {_nearest_releases(key)}; {valid}",
                          field="engine", value=repr(spec))
    nums = [int(x) for x in release.split(".")] + [0, 0]
    version = (nums[0], nums[1], nums[2])
    for p in PROFILES:
        if p.first <= version <= p.last:
            return p.at(version)
    raise ConfigError(f"--engine {spec!r}: no profile covers vLLM {asked}; {valid}",
                      field="engine", value=repr(spec))  # pragma: no cover - the table


# ---- the device total as CUDA reports it --------------------------------------------------

#: ``torch.cuda.mem_get_info()[1]`` (vLLM's ``total_gpu_memory``) as start-up logs print
#: it, GiB.  nvidia-smi's figure (the catalog's) is larger by the driver's reserve.
_CUDA_TOTAL_GIB = {
    # vllm#10511 (H100 80GB HBM3: "total_gpu_memory 79.22GiB"); 79.19 in later V1 logs
    "H100-SXM": 79.19, "H100-PCIe": 79.19,
    # vllm#15815 ("total_gpu_memory (44.42GiB)", L40S)
    "L40S": 44.42,
    # vllm#13061 / vllm#14447 (RTX 4090 23.65, RTX 3090 23.58 GiB)
    "RTX-4090": 23.65,
    # vllm#10909 (A100-SXM4-80GB: "total_gpu_memory=79.15GiB")
    "A100-80GB": 79.15,
}
#: The driver reserve where no log gives CUDA's total: the median of the logged
#: differences above (nvidia-smi - CUDA), 0.46 GiB.
_DRIVER_RESERVE = int(0.46 * _GIB)


def cuda_total_bytes(gpu: Any, memory_bytes: int) -> tuple[int, str]:
    """CUDA's device total for a catalog GPU (or an explicit ``--gpu-memory``, taken as
    given: the user's own figure), bytes, and the source of the figure."""
    name = getattr(gpu, "name", None)
    if name in _CUDA_TOTAL_GIB:
        return int(_CUDA_TOTAL_GIB[name] * _GIB), "CUDA total as vLLM logs print it"
    if gpu is None:
        return memory_bytes, "--gpu-memory as given"
    if getattr(gpu, "vendor", "nvidia") != "nvidia":
        return memory_bytes, "device total (ROCm reports no driver reserve)"
    return memory_bytes - _DRIVER_RESERVE, "nvidia-smi total - 0.46 GiB driver reserve"


# ---- batch defaults ------------------------------------------------------------------------

def batch_defaults(profile: EngineProfile, *, gpu: Any, memory_bytes: int,
                   usage: str = "serve", max_model_len: int | None = None,
                   enable_chunked_prefill: bool | None = None,
                   performance_mode: str = "balanced"
                   ) -> tuple[int, int, str]:
    """vLLM's default ``(max_num_batched_tokens, max_num_seqs)`` for this generation, GPU
    and usage context (``serve``: OPENAI_API_SERVER, ``offline``: LLM_CLASS), and the
    rule applied (with its source).  ``performance_mode`` (vLLM's ``--performance-mode``,
    :data:`PERFORMANCE_MODES`): ``throughput`` doubles both defaults
    (``_set_default_max_num_seqs_and_batched_tokens_args``, arg_utils.py@0.32;
    vllm#34936); modelled for the 0.32 profile only (ConfigError on older ones)."""
    if usage not in ("serve", "offline"):
        raise ConfigError(f"usage must be 'serve' (vllm serve) or 'offline' (the LLM "
                          f"class), got {usage!r}", field="usage", value=repr(usage))
    check_performance_mode(performance_mode, profile)
    t, s, rule = _batch_defaults(profile, gpu=gpu, memory_bytes=memory_bytes, usage=usage,
                                 max_model_len=max_model_len,
                                 enable_chunked_prefill=enable_chunked_prefill)
    if performance_mode == "throughput":
        return 2 * t, 2 * s, (f"{rule}; --performance-mode throughput doubles both "
                              "(arg_utils.py@0.32, vllm#34936)")
    return t, s, rule


#: vLLM's ``--performance-mode`` values (vllm/config/vllm.py@0.32 PerformanceMode)
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")


def check_performance_mode(mode: Any, profile: EngineProfile | None = None) -> str:
    """``mode`` if it is one of :data:`PERFORMANCE_MODES` and the profile models it (0.32:
    the code kvcore read; vLLM added the flag in vllm#34936).  Raises ConfigError naming
    ``performance_mode`` otherwise.  ``interactivity`` (CUDA graphs at every batch size
    1 - 32) is accepted and its few extra small graphs are not counted."""
    if not isinstance(mode, str) or mode not in PERFORMANCE_MODES:
        raise ConfigError(f"--performance-mode {mode!r}: valid: "
                          f"{', '.join(PERFORMANCE_MODES)}", field="performance_mode",
                          value=repr(mode)[:40])
    if mode != "balanced" and profile is not None and profile.first < (0, 32, 0):
        raise ConfigError(f"--performance-mode {mode}: kvcore models it from vLLM 0.32's "
                          f"code (vllm#34936), and the engine profile {profile.name} covers "
                          "releases before 0.32: give --engine vllm==0.32 or drop it",
                          field="performance_mode", value=mode)
    return mode


def _batch_defaults(profile: EngineProfile, *, gpu: Any, memory_bytes: int,
                    usage: str, max_model_len: int | None,
                    enable_chunked_prefill: bool | None) -> tuple[int, int, str]:
    serve = usage == "serve"
    name = (getattr(gpu, "device_name", "") or getattr(gpu, "name", "") or "").lower()
    if not profile.v1:
        long_ctx = (max_model_len or 0) > 32768
        chunked = long_ctx if enable_chunked_prefill is None else enable_chunked_prefill
        if chunked:
            t = 2048 if profile.first >= (0, 6, 5) else 512
            return t, 256, (f"V0 chunked prefill: {t} tokens "
                            f"({'vllm#10544' if t == 2048 else 'vllm/config.py@v0.5.4'}"
                            f"; on by default past 32K tokens), 256 seqs")
        t = max(max_model_len or 2048, 2048)
        return t, 256, ("V0: max(max_model_len, 2048) tokens, 256 seqs "
                        "(SchedulerConfig, vllm/config.py@v0.6.4)")
    if profile.first >= (0, 32, 0):
        if memory_bytes >= 160 * _GIB:
            return 16384, 1024, ("get_batch_defaults@0.32: >= 160 GiB: 16384 tokens, 1024 "
                                 "seqs (vllm#51726)")
        if memory_bytes >= 70 * _GIB and "a100" not in name:
            return (8192 if serve else 16384), 1024, (
                "get_batch_defaults@0.32: >= 70 GiB, not A100: 8192 (serve) / 16384 "
                "(offline) tokens, 1024 seqs")
        return (2048 if serve else 8192), 256, ("get_batch_defaults@0.32: other GPUs: "
                                                "2048 (serve) / 8192 (offline), 256 seqs")
    if profile.first >= (0, 9, 0):
        big = memory_bytes >= 70 * _GIB and "a100" not in name
        rule = "vllm#17885: >= 70 GiB and not A100"
    else:
        big = "h100" in name or "h200" in name
        rule = "vllm#12369: H100/H200 by device name"
    if big:
        # 1024 default seqs on these GPUs by 0.25 at the latest: "max_num_seqs (1024)
        # exceeds available Mamba cache blocks" with default flags on H100 at 0.25.1
        # (kaito-project/kaito#2319) and 0.28.0 (vllm#49064); kvcore applies it from 0.21
        seqs = 1024 if profile.first >= (0, 21, 0) else 256
        return (8192 if serve else 16384), seqs, (
            f"{rule}: 8192 (serve) / 16384 (offline), {seqs} seqs"
            + (" (1024: vllm#49064 logs at 0.25/0.28)" if seqs == 1024 else ""))
    return (2048 if serve else 8192), 256, f"{rule} otherwise: 2048 (serve) / 8192 (offline), 256 seqs"


# ---- the ledger ----------------------------------------------------------------------------

@dataclass(frozen=True)
class LedgerLine:
    """One term of the per-rank memory ledger: ``bytes`` (positive = taken from the
    budget, except the first line, the usable memory), the rule and its source."""

    name: str
    bytes: int
    rule: str
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "rule": self.rule,
                "source": self.source}


@dataclass(frozen=True)
class EngineLedger:
    """The per-rank ledger of one engine profile (see the module docstring).

    ``usable_bytes`` = CUDA total x utilization; ``kv_cache_memory_bytes`` = usable minus
    every other line (may be negative: vLLM then refuses to start); ``overhead_bytes`` =
    the sum of the itemised lines between the weights and the KV budget (padding,
    activations, sampler, non-torch, transients, CUDA graphs in the budget), i.e.
    ``usable - weights - KV``: the figure --explain prints, and the one
    :func:`kvcore.deploy.budget.compute_budget` reports with ``usable_bytes`` as the cap
    (one source of truth; the catalog's nvidia-smi total plays no part past the CUDA
    total).
    """

    engine: EngineProfile
    lines: tuple[LedgerLine, ...]
    usable_bytes: int
    weights_bytes: int
    padding_bytes: int
    activation_bytes: int
    sampler_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    cuda_graphs_in_budget: bool
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_cache_memory_bytes: int
    overhead_bytes: int
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine.name, "release": self.engine.release,
                "lines": [x.to_dict() for x in self.lines],
                "max_num_batched_tokens": self.max_num_batched_tokens,
                "max_num_seqs": self.max_num_seqs,
                "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
                "cuda_graph_bytes": self.cuda_graph_bytes,
                "cuda_graphs_in_budget": self.cuda_graphs_in_budget,
                "warnings": list(self.warnings)}


def _raw_int(cfg: Any, *keys: str) -> int:
    """The first of ``keys`` the config gives as a positive int (0: none), read through
    the typed reader (kvcore.models.config: an invalid value is a ConfigError naming
    it; a multimodal wrapper's text_config is already merged over the top level)."""
    v = cfg.get_first_int(*keys, default=0, minimum=0)
    return int(v or 0)


def _mxfp4_padding(cfg: Any, weights: Any, profile: EngineProfile, gpu: Any
                   ) -> tuple[int, str]:
    """Extra bytes vLLM's MXFP4 MoE kernels allocate when they pad expert weights.

    Marlin / TRT-LLM: intermediate to a multiple of 128, hidden to 256
    (``mxfp4_round_up_hidden_size_and_intermediate_size``,
    vllm/model_executor/layers/fused_moe/oracle/mxfp4.py@0.32); Hopper's Triton kernel
    (0.11-0.31) pads hidden to 256 only.  Logged: gpt-oss-120b 65.97 GiB on H100 at
    0.10.1 (Marlin, vllm#23278), 64.38 GiB at 0.14.1 (Triton, vllm#33155) against 60.77
    GiB of checkpoint.  Before 0.10.1 no padding (gpt-oss-20b 12.88 GiB on an RTX 3090,
    vllm#22331).
    """
    eff = profile.version if profile.version != (0, 0, 0) else profile.first
    if (weights.quantization or "") != "mxfp4" or eff < (0, 10, 1):
        return 0, ""
    name = (getattr(gpu, "name", "") or "").upper()
    if not (name.startswith(("H100", "H200", "H20", "B200", "GB200"))):
        # Ampere / Ada: no padding seen (gpt-oss-20b loads 12.88 GiB on an RTX 3090,
        # vllm#22331)
        return 0, ""
    h = _raw_int(cfg, "hidden_size")
    i = _raw_int(cfg, "intermediate_size", "moe_intermediate_size")
    if not h or not i:
        return 0, ""

    def up(x: int, m: int) -> int:
        return -(-x // m) * m

    hopper = name.startswith("H100") or name.startswith("H200") or name == "H20"
    if hopper and (0, 11, 0) <= eff < (0, 32, 0):
        hp, ip, kernel = up(h, 256), i, "Triton (Hopper): hidden to 256"
        if hp == h:
            ip = up(i, 256)
    else:
        hp, ip, kernel = up(h, 256), up(i, 128), "Marlin / TRT-LLM: hidden to 256, " \
            "intermediate to 128"
    ratio = (hp * ip) / (h * i)
    expert_bytes = sum(v for k, v in weights.by_class.items() if "expert" in k)
    share = weights.per_rank_bytes / weights.total_bytes if weights.total_bytes else 1.0
    extra = int(expert_bytes * share * (ratio - 1))
    return extra, f"MXFP4 experts padded at load ({kernel}): x{ratio:.4f}"


#: GPUs whose multi-GPU boards link by NVLink / xGMI (vLLM's custom all-reduce on)
_NVLINK = frozenset({"H100-SXM", "H200", "B200", "GB200", "A100-80GB", "A100-40GB",
                     "MI300X", "MI325X", "MI355X"})


def _mxfp4_transient(weights: Any, profile: EngineProfile, gpu: Any) -> tuple[int, str]:
    """Memory the profile counts besides activations for MXFP4 MoE checkpoints on V1
    (0.10.1+): 11.2 % of the expert bytes per rank.  Fitted on one calibration log
    (vllm#23278: 7.44 GiB between the 65.97 GiB of weights and what the budget kept,
    against 1.07 GiB of activations, sampler and non-torch memory); what vLLM holds
    there (kernel repacking buffers, MoE workspaces) is not itemised in the log."""
    eff = profile.version if profile.version != (0, 0, 0) else profile.first
    if (weights.quantization or "") != "mxfp4" or not profile.v1 or eff < (0, 10, 1):
        return 0, ""
    expert = sum(v for k, v in weights.by_class.items() if "expert" in k)
    share = weights.per_rank_bytes / weights.total_bytes if weights.total_bytes else 1.0
    return int(0.112 * expert * share), "0.112 x MXFP4 expert bytes per rank"


def _cuda_graph_estimate(cfg: Any, max_num_seqs: int, tp: int) -> tuple[int, str]:
    """CUDA-graph pool estimate per rank, bytes.

    vLLM 0.21+ measures it (``profile_cudagraph_memory``); kvcore estimates it from
    public logs: 0.32's line "The current --gpu-memory-utilization=U is equivalent to
    --gpu-memory-utilization=U' without CUDA graph memory profiling" gives
    ``(U - U') x total``, typically 0.3-1.5 GiB.  The rule: 0.25 GiB + 12 MiB per
    decoder layer, x2 for the 1024-row capture list of 0.32's big-GPU defaults.
    """
    layers = int(cfg.num_hidden_layers or 32)
    base = int(0.25 * _GIB + layers * 12 * _MIB)
    if max_num_seqs > 512:
        base *= 2
    return base, "0.25 GiB + 12 MiB per decoder layer (x2 for 1024 capture sizes)"


def engine_ledger(cfg: Any, weights: Any, *, engine: str | EngineProfile | None = None,
                  gpu: Any = None, gpu_memory_bytes: int,
                  gpu_memory_utilization: float = 0.9, tensor_parallel_size: int = 1,
                  pipeline_parallel_size: int = 1, data_parallel_size: int = 1,
                  enable_expert_parallel: bool = False,
                  max_num_batched_tokens: int | None = None,
                  max_num_seqs: int | None = None, max_model_len: int | None = None,
                  enforce_eager: bool = False, usage: str = "serve",
                  enable_chunked_prefill: bool | None = None,
                  disable_custom_all_reduce: bool = False,
                  flashinfer_sampler: bool = True,
                  performance_mode: str = "balanced") -> EngineLedger:
    """The per-rank memory ledger of ``cfg`` on a GPU under one engine profile.

    ``weights`` is a :class:`~kvcore.deploy.weights.WeightsEstimate` (fullest stage per
    rank); ``gpu_memory_bytes`` the catalog (nvidia-smi) total.  Explicit
    ``max_num_batched_tokens`` / ``max_num_seqs`` win over the engine's defaults.
    Returns an :class:`EngineLedger`; raises ConfigError for an unknown engine or usage.
    """
    from kvcore.units import check_int

    # numpy integers as the equal plain int; bool, floats and text refused naming the field
    tensor_parallel_size = check_int(tensor_parallel_size, "tensor_parallel_size")
    pipeline_parallel_size = check_int(pipeline_parallel_size, "pipeline_parallel_size")
    data_parallel_size = check_int(data_parallel_size, "data_parallel_size",
                                   maximum=1 << 16)
    gpu_memory_bytes = check_int(gpu_memory_bytes, "gpu_memory_bytes")
    if max_num_batched_tokens is not None:
        max_num_batched_tokens = check_int(max_num_batched_tokens, "max_num_batched_tokens")
    if max_num_seqs is not None:
        max_num_seqs = check_int(max_num_seqs, "max_num_seqs")
    if max_model_len is not None:
        max_model_len = check_int(max_model_len, "max_model_len", minimum=-1)
    p = get_engine(engine)
    tp, pp, dp = tensor_parallel_size, pipeline_parallel_size, data_parallel_size
    t_def, s_def, batch_rule = batch_defaults(p, gpu=gpu, memory_bytes=gpu_memory_bytes,
                                              usage=usage, max_model_len=max_model_len,
                                              enable_chunked_prefill=enable_chunked_prefill,
                                              performance_mode=performance_mode)
    tokens = max_num_batched_tokens or t_def
    seqs = max_num_seqs or s_def
    if max_num_batched_tokens or max_num_seqs:  # vLLM refuses tokens < seqs to start
        from kvcore.serving import check_scheduler_limits

        mml = max_model_len if max_model_len is not None and max_model_len > 0 \
            else tokens  # -1: vLLM's auto, resolved later
        check_scheduler_limits(seqs, tokens, mml)
    if max_num_batched_tokens or max_num_seqs:
        batch_rule = "given" + ("" if max_num_batched_tokens and max_num_seqs
                                else f"; default for the rest: {batch_rule}")
    total, total_src = cuda_total_bytes(gpu, gpu_memory_bytes)
    usable = math.ceil(total * gpu_memory_utilization)
    lines = [LedgerLine("usable memory", usable,
                        f"{total / _GIB:.2f} GiB x {gpu_memory_utilization:g}",
                        f"{total_src}; requested_memory = total x gpu_memory_utilization "
                        f"(vllm/v1/worker/gpu_worker.py@0.32)")]
    w = weights.per_rank_bytes
    mtp = "; MTP layers included" if weights.include_mtp_layers and weights.mtp_bytes \
        else "; MTP layers not loaded" if weights.mtp_bytes else ""
    lines.append(LedgerLine("weights per rank", w,
                            ", ".join(f"{k} {v / _GIB:.2f} GiB" for k, v in sorted(
                                weights.by_class.items(), key=lambda kv: -kv[1])[:6])
                            + " (whole model; per rank after TP/PP/EP split)" + mtp,
                            f"kvcore.deploy.weights ({weights.source})"))
    pad, pad_rule = _mxfp4_padding(cfg, weights, p, gpu)
    if pad:
        lines.append(LedgerLine("load-time padding", pad, pad_rule,
                                "mxfp4.py@0.32; vllm#23278, vllm#33155 logs"))
    # activation peak of the profile run: the calibrated rule of kvcore.deploy.budget
    from kvcore.dtypes import dtype_size

    dt = dtype_size(cfg.dtype) if cfg.dtype else 2
    hidden = _raw_int(cfg, "hidden_size", "d_model")
    inter = _raw_int(cfg, "intermediate_size", "encoder_ffn_dim")
    experts_inter = _raw_int(cfg, "moe_intermediate_size")
    top_k = _raw_int(cfg, "num_experts_per_tok", "experts_per_token", "top_k_experts")
    if experts_inter and top_k:
        inter = max(inter if cfg.get_int("first_k_dense_replace", 0, minimum=0) else 0,
                    top_k * experts_inter)
    vocab = _raw_int(cfg, "vocab_size")
    # V0's peak runs 0.9x the rule (calibrated: vllm#10517 at 20000 tokens logs a
    # 2.07 GiB torch peak over the weights for Llama-3.1-8B)
    coef = 1.0 if p.v1 else 0.9
    act = int(coef * tokens * dt * (8 * hidden + 2 * inter // tp))
    lines.append(LedgerLine("activations", act,
                            f"{coef:g} x {tokens} tokens x {dt} B x (8 x hidden {hidden} + "
                            f"2 x MLP width {inter} / TP {tp}); batch: {batch_rule}",
                            "profile_run (gpu_model_runner.py@0.32 / worker.py@v0.6.4); "
                            "calibrated on tests/data/vllm_logs calibration set"))
    rows = min(seqs, tokens)
    per_row = 8 if p.v1 else 4
    native = p.v1 and not flashinfer_sampler
    if native:
        # apply_top_k_top_p (v1/sample/ops/topk_topp_sampler.py@0.32): logits.sort ->
        # float32 values (4 B) + int64 indices (8 B), the top-k bool mask (1 B), softmax
        # probabilities with cumsum in place (4 B), the top-p bool mask (1 B)
        per_row += 18
    sampler = rows * vocab * per_row
    lines.append(LedgerLine("sampler", sampler,
                            f"{rows} rows x vocab {vocab} x {per_row} B ("
                            + ("float32 logits + probabilities" if p.v1 else
                               "float32 logits")
                            + ("; + 18 B: PyTorch-native top-k/top-p sort buffers, no "
                               "FlashInfer sampler" if native else "") + ")",
                            "_dummy_sampler_run (gpu_model_runner.py@0.32); V0 "
                            "profile_run samples max_num_seqs rows (worker.py@v0.6.4)"))
    non_torch = int(0.25 * _GIB)
    nt_rule = "0.25 GiB (CUDA/cuBLAS workspaces after the baseline)"
    nvlink = getattr(gpu, "name", "") in _NVLINK
    if tp * pp > 1:
        # The 3.3 GiB is custom all-reduce's IPC buffers + NCCL with P2P (vllm#10511,
        # H100 TP2); without custom all-reduce (a PCIe board, --disable-custom-all-reduce,
        # TP across nodes or no P2P) the non-torch increase is NCCL's alone: 0.05 GiB
        # (vllm#13061, 2x RTX 4090; dennislee22/vLLM-benchmarking A100 TP2 logs with
        # "Custom allreduce is disabled")
        custom_ar = nvlink and not disable_custom_all_reduce
        extra = int(3.3 * _GIB) if custom_ar else int(0.05 * _GIB)
        non_torch += extra
        link = "NVLink: custom all-reduce on" if custom_ar else \
            ("custom all-reduce disabled" if nvlink else "PCIe: no P2P custom all-reduce")
        nt_rule += (f" + {extra / _GIB:.2f} GiB NCCL / custom all-reduce buffers (TP x PP "
                    f"> 1, {link})")
    if dp > 1 and enable_expert_parallel:
        non_torch += int(1.0 * _GIB)
        nt_rule += " + 1 GiB all-to-all buffers (DP x EP; no log seen: a placeholder)"
    lines.append(LedgerLine("non-torch", non_torch, nt_rule,
                            "V0 logs: vllm#13061 (0.25 GiB, 2x RTX 4090 TP2), vllm#10511 "
                            "(3.58 GiB, 2x H100 TP2); utils/mem_utils.py@0.32 "
                            "non_torch_increase"))
    transient, t_rule = _mxfp4_transient(weights, p, gpu)
    if transient:
        lines.append(LedgerLine("load/repack transient", transient, t_rule,
                                "calibrated on vllm#23278 (gpt-oss-120b, H100, 0.10.1: "
                                "-2.14 GiB left)"))
    graphs, g_rule = (0, "--enforce-eager: none") if enforce_eager else \
        _cuda_graph_estimate(cfg, seqs, tp)
    in_budget = p.cudagraphs_in_profile and not enforce_eager
    lines.append(LedgerLine(
        "CUDA graphs", graphs if in_budget else 0,
        g_rule + ("" if in_budget or enforce_eager else
                  f"; {graphs / _GIB:.2f} GiB captured after the cache, outside the "
                  f"budget (must fit in the {(1 - gpu_memory_utilization):.0%} left over)"),
        "gpu_worker.py@0.32 (profiled since v0.21.0)" if p.cudagraphs_in_profile else
        "capture_model after initialize_kv_cache (gpu_model_runner.py@0.20)"))
    kv = usable - w - pad - act - sampler - non_torch - transient - \
        (graphs if in_budget else 0)
    lines.append(LedgerLine("KV budget", kv, "usable - every line above",
                            "available_kv_cache_memory (gpu_worker.py@0.32)"))
    warnings: list[str] = []
    if not in_budget and graphs and not enforce_eager:
        slack = total - usable
        if slack < graphs:
            warnings.append(
                f"CUDA graphs ({graphs / _GIB:.2f} GiB) are captured after the KV cache "
                f"in {p.name} and must fit in the {slack / _GIB:.2f} GiB that "
                f"gpu_memory_utilization {gpu_memory_utilization:g} leaves: the start may "
                f"fail with an OOM during capture; lower --gpu-memory-utilization or use "
                f"--enforce-eager")
    overhead = usable - w - kv  # the itemised lines above, summed
    return EngineLedger(engine=p, lines=tuple(lines), usable_bytes=usable, weights_bytes=w,
                        padding_bytes=pad, activation_bytes=act, sampler_bytes=sampler,
                        non_torch_bytes=non_torch, cuda_graph_bytes=graphs,
                        cuda_graphs_in_budget=in_budget, max_num_batched_tokens=tokens,
                        max_num_seqs=seqs, kv_cache_memory_bytes=kv,
                        overhead_bytes=overhead, warnings=tuple(warnings))
