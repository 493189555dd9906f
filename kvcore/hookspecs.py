"""The contract between kvcore and its plugins: pluggy hook specifications.

A plugin is a module (or object) whose functions are marked with
:data:`kvcore.hookimpl` and whose name matches a hook below.  It is found through the
entry-point group ``kvcore.plugins``::

    [project.entry-points."kvcore.plugins"]
    myplugin = "my_package.plugin"

kvcore's own spec types, kv_cache_dtypes and model adapters are registered through
these same hooks (``kvcore/builtins.py``), so the contract is exercised on every run.
Every hook is called with keyword arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from kvcore.quant import QuantScheme
    from kvcore.registry import SpecType
    from kvcore.specs import KVCacheSpec

__all__ = ["PROJECT_NAME", "hookspec", "hookimpl", "KVCoreHookSpecs"]

PROJECT_NAME = "kvcore"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class KVCoreHookSpecs:
    """Hook specifications.  Plugins implement any subset."""

    @hookspec
    def kvcore_spec_types(self) -> list[SpecType]:
        """Register spec classes.

        Called once when the registry is built.  Return a list of
        :class:`kvcore.registry.SpecType` ``(cls, kind, manager_cls, grouping_base)``:
        the spec class, its kind name (the ``type`` of a specs file), the runtime manager
        class (a class, an ``"module:Class"`` string imported on first use, or None for
        a layer without KV cache), and the kind whose layers it may share a group with
        (None = its own kind).  Two plugins claiming one kind or class is an error
        (:class:`kvcore.errors.PluginConflictError`) naming both distributions.
        """

    @hookspec
    def kvcore_kv_cache_dtypes(self) -> list[QuantScheme]:
        """Register ``kv_cache_dtype`` schemes.

        Called once when the registry is built.  Return a list of
        :class:`kvcore.quant.QuantScheme`; each scheme's name and aliases must be unique
        across plugins.
        """

    @hookspec(firstresult=True)
    def kvcore_layer_specs(
        self, model_config: Any, cache_config: Any
    ) -> dict[str, KVCacheSpec] | None:
        """Model-family adapter: per-layer specs for a model.

        Called for each ``kvcore plan MODEL`` with a normalized
        :class:`kvcore.models.ModelConfig` and a frozen :class:`kvcore.models.CacheConfig`.
        Return ``{layer name: spec}`` in layer order for a model you serve, or None to
        let the next adapter try (the first non-None result wins).  Raise
        :class:`kvcore.errors.ConfigError` naming the field when the config is malformed.
        """

    @hookspec
    def kvcore_model_types(self) -> list[str]:
        """The HF ``model_type`` values your adapter serves (for ``kvcore plugins`` and
        for error messages that list the supported types)."""

    @hookspec(firstresult=True)
    def kvcore_explain_kv_cache_dtype(self, name: str) -> str | None:
        """Why ``name`` is not a valid kv_cache_dtype of your family (e.g. "norm
        correction needs keys of 2 to 4 bits"), or None.

        Called only when a kv_cache_dtype lookup fails; the first answer is added to the
        :class:`kvcore.errors.UnknownKVCacheDtypeError` message.
        """
