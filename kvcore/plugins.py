"""Plugin discovery and the plugin manager.

Plugins are found through the entry-point group ``kvcore.plugins``.  Environment:

``KVCORE_PLUGINS=a,b``
    load only the entry points named ``a`` and ``b`` (a name no installed entry point
    has is warned about, listing the installed ones).
``KVCORE_DISABLE_PLUGIN_AUTOLOAD=1``
    load no entry point (kvcore's built-ins always load).  Booleans are strict:
    ``1 true yes on`` / ``0 false no off`` or empty (any case); anything else is a
    :class:`~kvcore.errors.ConfigError` naming the variable.

A plugin that fails to import (any exception, SystemExit included), or whose
registration hooks (``kvcore_spec_types``, ``kvcore_kv_cache_dtypes``,
``kvcore_model_types``) raise or return invalid data, is reported with a
:class:`KVCorePluginWarning` naming its distribution, version and error, and skipped;
the others load.  Spec types are validated when the registry is built (the class a
:class:`~kvcore.specs.KVCacheSpec` dataclass, the kind a non-empty string, the manager
None, a class or a ``"module:Class"`` path; the path is imported only when a
:class:`~kvcore.runtime.KVCacheManager` is built or ``kvcore plugins`` lists it).

Every hook implementation is guarded when it is registered: an exception from a
per-call hook (``kvcore_layer_specs``, ``kvcore_explain_kv_cache_dtype``), SystemExit
included, becomes a :class:`~kvcore.errors.PluginError` naming the plugin, its
distribution, version and the hook (a plugin's own KVCoreError, e.g. a ConfigError
naming a config field, passes unchanged), and a result of the wrong type (a list, a
string, a mapping whose values are not spec instances) is a PluginError too.  Two
plugins claiming one kind, spec class or kv_cache_dtype raise
:class:`kvcore.errors.PluginConflictError` naming both.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy

from kvcore.errors import ConfigError, KVCoreError, PluginError
from kvcore.hookspecs import PROJECT_NAME, KVCoreHookSpecs
from kvcore.quant import QuantScheme
from kvcore.registry import Registry, SpecType, reset_registry

__all__ = [
    "ENTRY_POINT_GROUP",
    "KVCorePluginWarning",
    "PluginInfo",
    "PluginInterrupt",
    "get_plugin_manager",
    "register",
    "unregister",
    "list_plugins",
    "reload_plugins",
    "build_registry",
    "env_flag",
    "check_layer_specs_result",
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


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def env_flag(name: str, default: bool = False) -> bool:
    """A boolean environment variable, parsed strictly: ``1 true yes on`` or ``0 false
    no off`` / empty (any case); unset gives ``default``.  Raises ConfigError naming
    the variable for any other value."""
    from kvcore.units import shorten

    if not isinstance(name, str) or not name or type(default) is not bool:
        bad, what, v = (("name", "a non-empty str", name) if not isinstance(name, str)
                        or not name else ("default", "a bool", default))
        raise ConfigError(f"env_flag: {bad} must be {what}, got {type(v).__name__} "
                          f"{shorten(v)}", field=bad, value=shorten(v))
    value = os.environ.get(name)
    if value is None:
        return default
    key = value.strip().lower()
    if key in _TRUE:
        return True
    if key in _FALSE:
        return False
    raise ConfigError(f"environment variable {name}={shorten(value)} is not a boolean; use "
                      f"1, true, yes, on or 0, false, no, off", field=name,
                      value=shorten(value))


# ---- hook guards ------------------------------------------------------------------------

#: hooks whose exceptions end the command with a PluginError (registration hooks are
#: called by build_registry, which warns and skips the plugin instead)
_PER_CALL_HOOKS = ("kvcore_layer_specs", "kvcore_explain_kv_cache_dtype")


def _who(name: str) -> str:
    info = _infos.get(name)
    if info is None:
        return f"kvcore plugin {name!r}"
    return f"kvcore plugin {name!r} from {info.distribution} {info.version or '?'}".rstrip()


def _plugin_error(name: str, hook: str, what: str) -> PluginError:
    info = _infos.get(name)
    return PluginError(f"{_who(name)}: hook {hook} {what}", plugin=name,
                       distribution=info.distribution if info else None,
                       version=info.version if info else None, hook=hook)


def _failure(name: str, hook: str, exc: BaseException) -> PluginError:
    from kvcore.units import shorten

    if isinstance(exc, SystemExit):
        what = f"raised SystemExit({shorten(exc.code)})"
    else:
        what = f"raised {type(exc).__name__}: {shorten(str(exc), 200)}"
    return _plugin_error(name, hook, what + " (a bug in the plugin; kvcore stopped)")


def check_layer_specs_result(result: Any, who: str = "an adapter",
                             hook: str = "kvcore_layer_specs") -> dict[str, Any] | None:
    """A ``kvcore_layer_specs`` answer checked: None, or a mapping of non-empty string
    layer names to :class:`~kvcore.specs.KVCacheSpec` instances.  Returns it as a dict.
    Raises PluginError naming ``who`` (and the first bad entry)."""
    from kvcore.specs import KVCacheSpec
    from kvcore.units import shorten

    if result is None:
        return None
    if not isinstance(result, Mapping):
        raise PluginError(f"{who}: hook {hook} returned {type(result).__name__} "
                          f"{shorten(result)}; it must return None or a dict of layer "
                          f"name -> KVCacheSpec", hook=hook)
    for layer, spec in result.items():
        if not isinstance(layer, str) or not layer.strip():
            raise PluginError(f"{who}: hook {hook} returned the layer name "
                              f"{shorten(layer)}; layer names are non-empty strings",
                              hook=hook)
        if not isinstance(spec, KVCacheSpec):
            raise PluginError(f"{who}: hook {hook} returned {type(spec).__name__} "
                              f"{shorten(spec)} for layer {shorten(layer)}; every value "
                              f"must be a KVCacheSpec instance", hook=hook, layer=layer)
    return dict(result)


def _check_result(name: str, hook: str, result: Any) -> Any:
    if hook == "kvcore_layer_specs":
        try:
            return check_layer_specs_result(result, _who(name), hook)
        except PluginError as exc:
            info = _infos.get(name)
            raise PluginError(exc.message, plugin=name, hook=hook,
                              distribution=info.distribution if info else None,
                              version=info.version if info else None) from None
    if hook == "kvcore_explain_kv_cache_dtype" and result is not None \
            and not isinstance(result, str):
        from kvcore.units import shorten

        raise _plugin_error(name, hook, f"returned {type(result).__name__} "
                                        f"{shorten(result)}; it must return a string or None")
    return result


class PluginInterrupt(KeyboardInterrupt):
    """A KeyboardInterrupt (Ctrl-C, or a plugin raising it) while a plugin was being
    loaded or ran a hook.  It still aborts kvcore (it is a KeyboardInterrupt: the CLI
    exits 130), but it names the plugin, so the one line printed says where it stopped.

    Attributes: ``plugin`` (entry-point name), ``distribution``, ``version``, ``during``
    (``"loading"`` or the hook name)."""

    def __init__(self, plugin: str, distribution: str = "", version: str = "",
                 during: str = "loading") -> None:
        self.plugin, self.distribution, self.version, self.during = \
            plugin, distribution, version, during
        where = f" from {distribution} {version}" if distribution else ""
        what = "loading it" if during == "loading" else f"in its hook {during}"
        super().__init__(f"interrupted in kvcore plugin {plugin!r}{where} ({what})")

    @property
    def message(self) -> str:
        return str(self.args[0])


def _guard_function(fn: Callable[..., Any], name: str, hook: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except PluginInterrupt:
            raise
        except KeyboardInterrupt as exc:
            raise PluginInterrupt(name, during=hook) from exc
        except (KVCoreError, GeneratorExit):
            raise
        except BaseException as exc:  # SystemExit too: a plugin must not end kvcore
            raise _failure(name, hook, exc) from exc
        return _check_result(name, hook, result)

    guarded.__kvcore_guarded__ = True  # type: ignore[attr-defined]
    return guarded


def _guard_wrapper(fn: Callable[..., Any], name: str, hook: str,
                   new_style: bool) -> Callable[..., Any]:
    """A hook wrapper (a generator) whose own failures become PluginError; exceptions
    thrown into it by the wrapped implementations pass through unchanged."""

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            gen = fn(*args, **kwargs)
            if not hasattr(gen, "send"):
                raise TypeError(f"a hook wrapper must be a generator, got "
                                f"{type(gen).__name__}")
            value = next(gen)
        except (KVCoreError, KeyboardInterrupt, GeneratorExit):
            raise
        except StopIteration:
            raise _plugin_error(name, hook, "is a wrapper that did not yield") from None
        except BaseException as exc:
            raise _failure(name, hook, exc) from exc
        while True:
            try:
                sent = yield value
            except BaseException as thrown:
                try:
                    value = gen.throw(thrown)
                except StopIteration as stop:
                    return _check_result(name, hook, stop.value) if new_style else None
                except BaseException as exc:
                    if exc is thrown or isinstance(exc, (KVCoreError, KeyboardInterrupt,
                                                         GeneratorExit)):
                        raise
                    raise _failure(name, hook, exc) from exc
            else:
                try:
                    value = gen.send(sent)
                except StopIteration as stop:
                    return _check_result(name, hook, stop.value) if new_style else None
                except (KVCoreError, KeyboardInterrupt, GeneratorExit):
                    raise
                except BaseException as exc:
                    raise _failure(name, hook, exc) from exc

    guarded.__kvcore_guarded__ = True  # type: ignore[attr-defined]
    return guarded


def _guard(pm: pluggy.PluginManager, obj: Any, name: str) -> None:
    """Wrap every hook implementation of ``obj`` (once) in its guard."""
    for caller in pm.get_hookcallers(obj) or []:
        for impl in caller.get_hookimpls():
            if impl.plugin is not obj or getattr(impl.function, "__kvcore_guarded__", False):
                continue
            if impl.wrapper or impl.hookwrapper:
                # HookImpl.function is Final for type checkers only; pluggy calls it
                impl.function = _guard_wrapper(  # type: ignore[misc]
                    impl.function, name, caller.name, new_style=impl.wrapper)
            else:
                impl.function = _guard_function(  # type: ignore[misc]
                    impl.function, name, caller.name)


def _load() -> pluggy.PluginManager:
    from kvcore import builtins

    pm = _new_manager()
    _infos.clear()
    pm.register(builtins, name="core")
    _infos["core"] = PluginInfo("core", "kvcore", _core_version(), builtins)
    _guard(pm, builtins, "core")
    if env_flag("KVCORE_DISABLE_PLUGIN_AUTOLOAD"):
        return pm
    only = os.environ.get("KVCORE_PLUGINS")
    wanted = None if only is None else {s.strip() for s in only.split(",") if s.strip()}
    eps = _entry_points()
    if wanted:
        unknown = sorted(wanted - {ep.name for ep in eps})
        if unknown:
            from kvcore.units import shorten

            installed = ", ".join(sorted({ep.name for ep in eps})) or "none"
            warnings.warn(
                f"KVCORE_PLUGINS names {', '.join(shorten(u) for u in unknown)}, which no "
                f"installed plugin has (names are case-sensitive); installed: {installed}",
                KVCorePluginWarning, stacklevel=3)
    for ep in eps:
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
        except PluginInterrupt:
            raise
        except KeyboardInterrupt as exc:  # Ctrl-C (or a plugin raising it) still aborts
            raise PluginInterrupt(ep.name, dist_name, version, "loading") from exc
        except GeneratorExit:
            raise
        except BaseException as exc:  # noqa: BLE001 - any failure (SystemExit too) skips it
            _warn(ep.name, dist_name, version, exc)
            continue
        _infos[ep.name] = PluginInfo(ep.name, dist_name, version, obj)
        _guard(pm, obj, ep.name)
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
    registry is rebuilt on next use.

    obj: a module, class or instance with at least one ``kvcore_*`` hook implementation;
    name: a non-empty str (None: pluggy's name for the object); distribution and
    version: strs shown by ``kvcore plugins``.  Raises PluginError naming the argument
    for anything else, and for a name or object registered twice; nothing is
    registered then."""
    _check_register_args(obj, name, distribution, version)
    pm = get_plugin_manager()
    with _lock:
        try:
            plugin_name = pm.register(obj, name=name)
        except ValueError as exc:  # pluggy: a name or object registered twice
            raise PluginError(f"cannot register plugin {name!r}: {exc}", plugin=name) \
                from exc
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {name!r} from {distribution}: {exc}",
                              plugin=name, distribution=distribution) from exc
        assert plugin_name is not None
        _infos[plugin_name] = PluginInfo(plugin_name, distribution, version, obj)
        _guard(pm, obj, plugin_name)
        reset_registry()
    return plugin_name


def _check_register_args(obj: Any, name: Any, distribution: Any, version: Any) -> None:
    from kvcore.units import shorten

    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise PluginError(f"plugin name must be a non-empty str or None, got "
                          f"{type(name).__name__} {shorten(name)}", field="name",
                          value=shorten(name))
    for field_name, v in (("distribution", distribution), ("version", version)):
        if not isinstance(v, str):
            raise PluginError(f"plugin {name!r}: {field_name} must be a str, got "
                              f"{type(v).__name__} {shorten(v)}", field=field_name,
                              value=shorten(v), plugin=name)
    hooks = [h for h in dir(obj) if h.startswith(PROJECT_NAME + "_")] \
        if obj is not None and not isinstance(obj, (bool, int, float, complex, str, bytes,
                                                     bytearray, list, tuple, dict, set,
                                                     frozenset)) else []
    if not hooks:
        raise PluginError(f"plugin {name!r} from {distribution}: the object "
                          f"({type(obj).__name__} {shorten(obj)}) implements no "
                          f"{PROJECT_NAME}_* hook; register a module, class or instance "
                          f"with @kvcore.hookimpl methods", field="obj", plugin=name,
                          distribution=distribution)


def unregister(name: str) -> None:
    """Unregister a plugin registered by name (the registry is rebuilt on next use).
    Raises PluginError for a name that is not a str; an unknown name is a no-op."""
    if not isinstance(name, str):
        from kvcore.units import shorten

        raise PluginError(f"plugin name must be a str, got {type(name).__name__} "
                          f"{shorten(name)}", field="name", value=shorten(name))
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


def _check_spec_type(st: SpecType) -> None:
    """A registered SpecType's fields: a KVCacheSpec dataclass, a non-empty kind, a
    manager that is None, a class or a ``"module:Class"`` path (not imported here), a
    grouping base that is None or a kind name.  Raises TypeError saying which."""
    import dataclasses
    import re

    from kvcore.specs import KVCacheSpec

    cls = st.cls
    if not isinstance(cls, type) or not issubclass(cls, KVCacheSpec) \
            or not dataclasses.is_dataclass(cls):
        raise TypeError(f"kvcore_spec_types: the class of kind {st.kind!r} is {cls!r}, not "
                        f"a KVCacheSpec dataclass")
    if not isinstance(st.kind, str) or not st.kind.strip():
        raise TypeError(f"kvcore_spec_types: kind {st.kind!r} of {cls.__name__} is not a "
                        f"non-empty string")
    m = st.manager_cls
    if isinstance(m, str):
        if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", m):
            raise TypeError(f"kvcore_spec_types: manager {m!r} of kind {st.kind!r} is not "
                            f"a 'module:Class' path")
    elif m is not None and not isinstance(m, type):
        raise TypeError(f"kvcore_spec_types: manager {m!r} of kind {st.kind!r} is neither "
                        f"None, a class nor a 'module:Class' path")
    if st.grouping_base is not None and (not isinstance(st.grouping_base, str)
                                         or not st.grouping_base.strip()):
        raise TypeError(f"kvcore_spec_types: grouping_base {st.grouping_base!r} of kind "
                        f"{st.kind!r} is not a kind name")


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
                    _check_spec_type(st)
                for mt in model_types:
                    if not isinstance(mt, str) or not mt.strip():
                        raise TypeError(f"kvcore_model_types returned {mt!r}, not a "
                                        f"non-empty string")
                for sc in schemes:
                    if not isinstance(sc, QuantScheme):
                        raise TypeError(
                            f"kvcore_kv_cache_dtypes returned {sc!r}, not a QuantScheme")
            except Exception as exc:  # noqa: BLE001
                if name == "core":
                    raise
                cause: BaseException = exc
                if isinstance(exc, PluginError) and exc.__cause__ is not None:
                    cause = exc.__cause__  # the guard's wrapping: report the plugin's error
                _warn(name, info.distribution, info.version, cause)
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
