"""The spec registry: kind name <-> spec class, manager class and grouping base; and the
``kv_cache_dtype`` schemes.  Built from every loaded plugin's hooks (kvcore's own
built-ins included) by :func:`get_registry`.
"""

from __future__ import annotations

import fnmatch
import importlib
import threading
from dataclasses import dataclass, field
from typing import Any

from kvcore.errors import (
    MissingPluginError,
    PluginConflictError,
    PluginError,
    SpecError,
    UnknownKVCacheDtypeError,
)
from kvcore.quant import PLUGIN_KV_CACHE_DTYPES, QuantScheme

__all__ = [
    "SpecType",
    "Registry",
    "get_registry",
    "reset_registry",
    "KNOWN_PLUGIN_KINDS",
    "KNOWN_PLUGIN_MODEL_TYPES",
]

#: kinds that known plugin distributions provide (for "install X" messages)
KNOWN_PLUGIN_KINDS: dict[str, str] = {
    "mla_attention": "kvcore-mla",
    "sliding_window_mla": "kvcore-mla",
    "mla_indexer": "kvcore-mla",
    "hidden_state_cache": "kvcore-mla",
    "mamba": "kvcore-mamba",
    "turboquant_full_attention": "kvcore-turboquant",
    "rswa": "kvcore-rswa",
    "kpool_tail": "kvcore-kpool",
}

#: HF model_type values that known plugin distributions serve
KNOWN_PLUGIN_MODEL_TYPES: dict[str, tuple[str, ...]] = {
    "deepseek_v2": ("kvcore-mla",),
    "deepseek_v3": ("kvcore-mla",),
    "deepseek_v32": ("kvcore-mla",),
    "deepseek_v4": ("kvcore-mla",),
    "glm_moe_dsa": ("kvcore-mla",),
    "kimi_k2": ("kvcore-mla",),
    "kimi_k3": ("kvcore-mla", "kvcore-mamba"),
    "kimi_linear": ("kvcore-mla", "kvcore-mamba"),
    "mamba": ("kvcore-mamba",),
    "mamba2": ("kvcore-mamba",),
    "jamba": ("kvcore-mamba",),
    "nemotron_h": ("kvcore-mamba",),
    "qwen3_next": ("kvcore-mamba",),
    "qwen3_5": ("kvcore-mamba",),
    "qwen3_5_moe": ("kvcore-mamba",),
    "qwen3_5_moe_text": ("kvcore-mamba",),
    "qwen3_5_text": ("kvcore-mamba",),
}


@dataclass(frozen=True)
class SpecType:
    """A registered spec class.

    Attributes
    ----------
    cls:
        The spec class (a :class:`kvcore.specs.KVCacheSpec` subclass).
    kind:
        Its registry name (``"type"`` in specs files), usually ``cls.kind``.
    manager_cls:
        The runtime manager: a class, a ``"module:Class"`` path imported on first use,
        or None when the layer has no KV cache.
    grouping_base:
        The kind whose layers this kind may share one group with when every layer of a
        model is of one grouping type (None: its own kind).
    """

    cls: type
    kind: str
    manager_cls: Any = None
    grouping_base: str | None = None
    distribution: str = field(default="kvcore", compare=False)
    plugin: str = field(default="core", compare=False)


class Registry:
    """Spec types and kv_cache_dtype schemes of the loaded plugins (read-only after
    construction)."""

    def __init__(self) -> None:
        self._by_kind: dict[str, SpecType] = {}
        self._by_cls: dict[type, SpecType] = {}
        self._schemes: dict[str, QuantScheme] = {}
        self._scheme_owner: dict[str, str] = {}
        self._managers: dict[str, Any] = {}
        #: distributions whose plugins loaded (for "not installed" vs "not provided")
        self.distributions: set[str] = {"kvcore"}
        #: ``f(name) -> str | None`` explaining an invalid kv_cache_dtype (a hook)
        self.explain_kv_cache_dtype: Any = None

    # ---- building ----------------------------------------------------------------
    def add_spec_type(self, st: SpecType) -> None:
        """Register one spec type; raises PluginConflictError on a duplicate."""
        old = self._by_kind.get(st.kind) or self._by_cls.get(st.cls)
        if old is not None:
            what = f"kind {st.kind!r}" if old.kind == st.kind else f"class {st.cls.__name__}"
            raise PluginConflictError(
                f"{what} is claimed by two plugins: {old.distribution} (plugin "
                f"{old.plugin!r}) and {st.distribution} (plugin {st.plugin!r}); "
                f"uninstall one or select plugins with KVCORE_PLUGINS",
                kind=st.kind, distributions=[old.distribution, st.distribution])
        self._by_kind[st.kind] = st
        self._by_cls[st.cls] = st

    def add_scheme(self, scheme: QuantScheme, distribution: str) -> None:
        """Register one kv_cache_dtype scheme; raises PluginConflictError on a duplicate."""
        for name in scheme.names:
            if name in self._schemes:
                raise PluginConflictError(
                    f"kv_cache_dtype {name!r} is claimed by two plugins: "
                    f"{self._scheme_owner[name]} and {distribution}",
                    kv_cache_dtype=name,
                    distributions=[self._scheme_owner[name], distribution])
        for name in scheme.names:
            self._schemes[name] = scheme
            self._scheme_owner[name] = distribution

    # ---- lookups -------------------------------------------------------------------
    @property
    def kinds(self) -> list[str]:
        return list(self._by_kind)

    def spec_type(self, kind_or_cls: str | type | Any) -> SpecType:
        """The SpecType of a kind name, a spec class or a spec instance."""
        if isinstance(kind_or_cls, str):
            st = self._by_kind.get(kind_or_cls)
            if st is None:
                dist = KNOWN_PLUGIN_KINDS.get(kind_or_cls)
                if dist is not None and dist not in self.distributions:
                    raise MissingPluginError(
                        f"layer type {kind_or_cls!r} is provided by the plugin {dist}, "
                        f"{missing_plugin_hint(dist)}",
                        kind=kind_or_cls, distribution=dist)
                raise SpecError(
                    f"unknown layer type {kind_or_cls!r}; known types: "
                    f"{', '.join(self._by_kind)}", field="type", value=kind_or_cls)
            return st
        cls = kind_or_cls if isinstance(kind_or_cls, type) else type(kind_or_cls)
        for klass in cls.__mro__:
            if klass in self._by_cls:
                return self._by_cls[klass]
        raise SpecError(f"spec class {cls.__name__} is not registered", field="type")

    def spec_class(self, kind: str) -> type:
        """The spec class registered for ``kind``; raises MissingPluginError naming the
        distribution for a known plugin kind, or SpecError listing the known kinds."""
        return self.spec_type(kind).cls

    def grouping_base(self, spec: Any) -> str:
        st = self.spec_type(spec)
        return st.grouping_base or st.kind

    def manager_class(self, spec_or_kind: Any) -> Any:
        """The runtime manager class of a spec's kind (imports a lazy ``"module:Class"``
        path once).  Raises PluginError naming the plugin, its distribution and the
        path when the path cannot be imported or does not name a class."""
        st = self.spec_type(spec_or_kind)
        if st.kind not in self._managers:
            m = st.manager_cls
            if isinstance(m, str):
                module, _, name = m.partition(":")
                try:
                    m = getattr(importlib.import_module(module), name)
                except (KeyboardInterrupt, GeneratorExit):
                    raise
                except BaseException as exc:  # ImportError, AttributeError, SystemExit...
                    raise PluginError(
                        f"kvcore plugin {st.plugin!r} from {st.distribution}: the manager "
                        f"{st.manager_cls!r} of kind {st.kind!r} cannot be loaded "
                        f"({type(exc).__name__}: {exc})", plugin=st.plugin,
                        distribution=st.distribution, kind=st.kind,
                        manager=st.manager_cls) from exc
                if not isinstance(m, type):
                    raise PluginError(
                        f"kvcore plugin {st.plugin!r} from {st.distribution}: the manager "
                        f"{st.manager_cls!r} of kind {st.kind!r} is {type(m).__name__}, "
                        f"not a class", plugin=st.plugin, distribution=st.distribution,
                        kind=st.kind, manager=st.manager_cls)
            self._managers[st.kind] = m
        return self._managers[st.kind]

    def check_managers(self) -> list[PluginError]:
        """Resolve every kind's manager (imports the lazy paths); the errors, one per
        kind that fails (``kvcore plugins`` reports them)."""
        errors: list[PluginError] = []
        for kind in self._by_kind:
            try:
                self.manager_class(kind)
            except PluginError as exc:
                errors.append(exc)
        return errors

    @property
    def kv_cache_dtypes(self) -> list[str]:
        return list(self._schemes)

    def kv_cache_dtype(self, name: Any) -> QuantScheme:
        """The scheme of a kv_cache_dtype string (or a torch dtype).

        Raises UnknownKVCacheDtypeError listing the known names, or MissingPluginError
        naming the distribution that provides a known plugin scheme.
        """
        key = name if isinstance(name, str) else str(name).replace("torch.", "")
        key = key.strip().lower() if isinstance(key, str) else key
        scheme = self._schemes.get(key)
        if scheme is not None:
            return scheme
        if key == "float8_e4m3fn":
            return self._schemes["fp8"]
        if key == "float8_e5m2":
            return self._schemes["fp8_e5m2"]
        for pattern, dist in PLUGIN_KV_CACHE_DTYPES.items():
            if fnmatch.fnmatchcase(str(key), pattern) and dist not in self.distributions:
                raise MissingPluginError(
                    f"kv_cache_dtype {name!r} is provided by the plugin {dist}, "
                    f"{missing_plugin_hint(dist)}",
                    kv_cache_dtype=name, distribution=dist)
        why = self.explain_kv_cache_dtype(str(key)) if self.explain_kv_cache_dtype else None
        raise UnknownKVCacheDtypeError(
            f"unknown kv_cache_dtype {name!r}" + (f" ({why})" if why else "")
            + f"; known: {_compact(list(self._schemes))}",
            kv_cache_dtype=name, known=list(self._schemes))


def _compact(names: list[str], limit: int = 24) -> str:
    """Names joined, families of many names (``turboquant_k2v2`` ...) collapsed."""
    shown: list[str] = []
    families: dict[str, int] = {}
    for n in names:
        prefix = n.split("_")[0] + "_"
        if n.count("_") and sum(1 for m in names if m.startswith(prefix)) > 6:
            families[prefix] = families.get(prefix, 0) + 1
            if families[prefix] > 3:
                continue
        shown.append(n)
    text = ", ".join(shown[:limit])
    extra = sum(max(0, c - 3) for c in families.values()) + max(0, len(shown) - limit)
    return text + (f" and {extra} more (kvcore plugins lists all)" if extra else "")


def missing_plugin_hint(dist: str) -> str:
    """Why a known plugin's distribution is not loaded, and what to do."""
    try:
        from importlib_metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        from importlib.metadata import PackageNotFoundError, version  # type: ignore
    import os

    try:
        version(dist)
    except PackageNotFoundError:
        name = dist.removeprefix("kvcore-")
        return (f"which is not installed (pip install {dist}; from a kvcore source "
                f"checkout: pip install ./plugins/{name})")
    env = [v for v in ("KVCORE_DISABLE_PLUGIN_AUTOLOAD", "KVCORE_PLUGINS") if v in os.environ]
    why = f" ({' / '.join(env)} is set)" if env else ""
    return f"which is installed but not loaded{why}"


_lock = threading.RLock()
_registry: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry, built on first use from the loaded plugins."""
    global _registry
    if _registry is None:
        with _lock:
            if _registry is None:
                from kvcore.plugins import build_registry

                _registry = build_registry()
    return _registry


def reset_registry() -> None:
    """Drop the registry so the next :func:`get_registry` rebuilds it (after
    :func:`kvcore.plugins.register`)."""
    global _registry
    with _lock:
        _registry = None
