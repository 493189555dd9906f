"""Plugin discovery and the plugin manager.

Plugins are found through the entry-point group ``kvcore.plugins``.  Environment:

``KVCORE_PLUGINS=a,b``
    load only the entry points named ``a`` and ``b``.
``KVCORE_DISABLE_PLUGIN_AUTOLOAD=1``
    load no entry point (kvcore's built-ins always load).

A plugin that fails to import, or whose hooks raise or return invalid data, is
reported with a :class:`KVCorePluginWarning` naming its distribution, version and error,
and skipped; the others load.  Two plugins claiming one kind, spec class or
kv_cache_dtype raise :class:`kvcore.errors.PluginConflictError` naming both.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any

import pluggy

from kvcore.hookspecs import PROJECT_NAME, KVCoreHookSpecs
from kvcore.quant import QuantScheme
from kvcore.registry import Registry, SpecType, reset_registry

__all__ = [
    "ENTRY_POINT_GROUP",
    "KVCorePluginWarning",
    "PluginInfo",
    "get_plugin_manager",
    "register",
    "unregister",
    "list_plugins",
    "reload_plugins",
    "build_registry",
]

ENTRY_POINT_GROUP = "kvcore.plugins"


class KVCorePluginWarning(UserWarning):
    """A plugin was skipped (import error or invalid hook result)."""


@dataclass
class PluginInfo:
    """What ``kvcore plugins`` shows for one plugin."""

    name: str
    distribution: str
    version: str
    obj: Any = field(repr=False, default=None)
    kinds: list[str] = field(default_factory=list)
    kv_cache_dtypes: list[str] = field(default_factory=list)
    model_types: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "kinds": self.kinds,
            "kv_cache_dtypes": self.kv_cache_dtypes,
            "model_types": self.model_types,
            "hooks": self.hooks,
        }


_lock = threading.RLock()
_pm: pluggy.PluginManager | None = None
_infos: dict[str, PluginInfo] = {}


def _core_version() -> str:
    from kvcore import __version__

    return __version__


def _new_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(KVCoreHookSpecs)
    return pm


def _hook_names(pm: pluggy.PluginManager, obj: Any) -> list[str]:
    return sorted(h.name for h in (pm.get_hookcallers(obj) or []))


def _entry_points() -> list[Any]:
    try:
        from importlib_metadata import entry_points
    except ImportError:  # pragma: no cover - importlib-metadata is a dependency
        from importlib.metadata import entry_points  # type: ignore[assignment]
    return list(entry_points(group=ENTRY_POINT_GROUP))


def _warn(name: str, dist: str, version: str, error: BaseException | str) -> None:
    warnings.warn(
        f"kvcore plugin {name!r} from {dist} {version} was skipped: "
        f"{type(error).__name__ + ': ' if isinstance(error, BaseException) else ''}{error}",
        KVCorePluginWarning, stacklevel=3)


def _load() -> pluggy.PluginManager:
    from kvcore import builtins

    pm = _new_manager()
    _infos.clear()
    pm.register(builtins, name="core")
    _infos["core"] = PluginInfo("core", "kvcore", _core_version(), builtins)
    if os.environ.get("KVCORE_DISABLE_PLUGIN_AUTOLOAD", "").strip() not in ("", "0"):
        return pm
    only = os.environ.get("KVCORE_PLUGINS")
    wanted = None if only is None else {s.strip() for s in only.split(",") if s.strip()}
    for ep in _entry_points():
        if wanted is not None and ep.name not in wanted:
            continue
        dist = getattr(ep, "dist", None)
        dist_name = getattr(dist, "name", None) or "unknown distribution"
        version = getattr(dist, "version", None) or "?"
        if ep.name in _infos:
            _warn(ep.name, dist_name, version,
                  f"another plugin is already registered under the name {ep.name!r}")
            continue
        try:
            obj = ep.load()
            pm.register(obj, name=ep.name)
        except Exception as exc:  # noqa: BLE001 - any failure skips the plugin
            _warn(ep.name, dist_name, version, exc)
            continue
        _infos[ep.name] = PluginInfo(ep.name, dist_name, version, obj)
    return pm


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide pluggy PluginManager (plugins loaded on first use)."""
    global _pm
    if _pm is None:
        with _lock:
            if _pm is None:
                _pm = _load()
    return _pm


def register(obj: Any, name: str | None = None, distribution: str = "(registered by hand)",
             version: str = "") -> str:
    """Register a plugin object by hand (tests, notebooks); returns its name.  The
    registry is rebuilt on next use."""
    pm = get_plugin_manager()
    with _lock:
        plugin_name = pm.register(obj, name=name)
        assert plugin_name is not None
        _infos[plugin_name] = PluginInfo(plugin_name, distribution, version, obj)
        reset_registry()
    return plugin_name


def unregister(name: str) -> None:
    """Unregister a plugin registered by name (the registry is rebuilt on next use)."""
    pm = get_plugin_manager()
    with _lock:
        pm.unregister(name=name)
        _infos.pop(name, None)
        reset_registry()


def reload_plugins() -> None:
    """Forget every plugin and the registry; the next use loads them again (reads the
    environment variables again)."""
    global _pm
    with _lock:
        _pm = None
        _infos.clear()
        reset_registry()


def _call_one(pm: pluggy.PluginManager, hook_name: str, obj: Any) -> list[Any]:
    impls = [i for i in getattr(pm.hook, hook_name).get_hookimpls() if i.plugin is obj]
    out: list[Any] = []
    for impl in impls:
        result = impl.function()
        if result is None:
            continue
        if not isinstance(result, (list, tuple)):
            raise TypeError(f"{hook_name} must return a list, got {type(result).__name__}")
        out.extend(result)
    return out


def build_registry() -> Registry:
    """Collect every loaded plugin's spec types and schemes into a new Registry.

    A plugin whose hooks raise or return invalid data is warned about and skipped;
    conflicts between plugins raise PluginConflictError.
    """
    pm = get_plugin_manager()
    reg = Registry()
    with _lock:
        for name, info in list(_infos.items()):
            obj = info.obj
            try:
                spec_types = _call_one(pm, "kvcore_spec_types", obj)
                schemes = _call_one(pm, "kvcore_kv_cache_dtypes", obj)
                model_types = _call_one(pm, "kvcore_model_types", obj)
                for st in spec_types:
                    if not isinstance(st, SpecType):
                        raise TypeError(f"kvcore_spec_types returned {st!r}, not a SpecType")
                for sc in schemes:
                    if not isinstance(sc, QuantScheme):
                        raise TypeError(
                            f"kvcore_kv_cache_dtypes returned {sc!r}, not a QuantScheme")
            except Exception as exc:  # noqa: BLE001
                if name == "core":
                    raise
                _warn(name, info.distribution, info.version, exc)
                pm.unregister(obj)
                del _infos[name]
                continue
            for st in spec_types:
                st = SpecType(st.cls, st.kind, st.manager_cls, st.grouping_base,
                              distribution=info.distribution, plugin=name)
                reg.add_spec_type(st)
            for sc in schemes:
                reg.add_scheme(sc, info.distribution)
            reg.distributions.add(info.distribution)
            info.kinds = [st.kind for st in spec_types]
            info.kv_cache_dtypes = [sc.name for sc in schemes]
            info.model_types = [str(m) for m in model_types]
            info.hooks = _hook_names(pm, obj)
    hook = pm.hook.kvcore_explain_kv_cache_dtype
    reg.explain_kv_cache_dtype = lambda name: hook(name=name)
    return reg


def list_plugins() -> list[PluginInfo]:
    """Every loaded plugin (the core's built-ins first) with its kinds, dtypes, model
    types and hooks."""
    from kvcore.registry import get_registry

    get_registry()
    with _lock:
        return list(_infos.values())
