"""Registry and plugin manager: built-ins through the hooks, hand registration,
conflicts, broken plugins, environment switches."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from kvcore import FullAttentionSpec, KVCacheSpec, hookimpl, plugins
from kvcore.errors import PluginConflictError
from kvcore.plugins import KVCorePluginWarning, list_plugins
from kvcore.quant import KVQuantMode, QuantScheme
from kvcore.registry import SpecType, get_registry


@dataclass(frozen=True, kw_only=True)
class DoubledSpec(FullAttentionSpec):
    """A third-party kind: full attention storing everything twice."""

    kind: ClassVar[str] = "test_doubled"

    @property
    def real_page_size_bytes(self) -> int:
        return 2 * super().real_page_size_bytes


class GoodPlugin:
    @hookimpl
    def kvcore_spec_types(self):
        return [SpecType(DoubledSpec, "test_doubled", "kvcore.runtime.managers:FullAttentionManager",
                         grouping_base="full_attention")]

    @hookimpl
    def kvcore_kv_cache_dtypes(self):
        return [QuantScheme("test_int2", KVQuantMode.PLUGIN, lambda d, _: d // 4,
                            lambda d, _: d // 4)]

    @hookimpl
    def kvcore_model_types(self):
        return ["test_model"]


class ClashingPlugin:
    @hookimpl
    def kvcore_spec_types(self):
        return [SpecType(type("Other", (FullAttentionSpec,), {}), "full_attention", None)]


class BrokenPlugin:
    @hookimpl
    def kvcore_spec_types(self):
        raise RuntimeError("boom")


class WrongTypePlugin:
    @hookimpl
    def kvcore_kv_cache_dtypes(self):
        return ["not a scheme"]


@pytest.fixture
def registered():
    names = []

    def reg(obj, name, dist="test-dist"):
        names.append(plugins.register(obj, name=name, distribution=dist, version="9.9"))

    yield reg
    for n in names:
        try:
            plugins.unregister(n)
        except Exception:
            pass
    plugins.reload_plugins()


def test_core_builtins_use_the_hooks():
    core = next(p for p in list_plugins() if p.name == "core")
    assert core.distribution == "kvcore"
    assert {"full_attention", "sliding_window", "chunked_local_attention", "cross_attention",
            "encoder_only_attention", "sink_full_attention"} <= set(core.kinds)
    assert "kvcore_spec_types" in core.hooks and "kvcore_layer_specs" in core.hooks
    assert "int8_per_token_head" in core.kv_cache_dtypes
    assert "llama" in core.model_types


def test_hand_registered_plugin_kind_and_dtype(registered):
    registered(GoodPlugin(), "good")
    spec = KVCacheSpec.from_dict({"type": "test_doubled", "block_size": 16,
                                  "num_kv_heads": 8, "head_size": 128})
    assert isinstance(spec, DoubledSpec) and spec.page_size_bytes == 2 * 65_536
    q = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128,
                          kv_cache_dtype="test_int2")
    assert q.page_size_bytes == 16 * 8 * 64
    assert get_registry().grouping_base(spec) == "full_attention"
    info = next(p for p in list_plugins() if p.name == "good")
    assert info.kinds == ["test_doubled"] and info.model_types == ["test_model"]


def test_conflict_names_both_distributions(registered):
    registered(ClashingPlugin(), "clash", dist="kvcore-clash")
    with pytest.raises(PluginConflictError) as e:
        get_registry()
    msg = str(e.value)
    assert "kvcore-clash" in msg and "kvcore" in msg and "full_attention" in msg


@pytest.mark.parametrize("plugin", [BrokenPlugin(), WrongTypePlugin()])
def test_broken_plugin_is_skipped_with_a_warning(registered, plugin):
    registered(plugin, "broken", dist="kvcore-broken")
    with pytest.warns(KVCorePluginWarning, match="kvcore-broken 9.9"):
        reg = get_registry()
    assert "full_attention" in reg.kinds
    assert "broken" not in [p.name for p in list_plugins()]


def test_disable_autoload_keeps_builtins(monkeypatch):
    monkeypatch.setenv("KVCORE_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins.reload_plugins()
    try:
        assert [p.name for p in list_plugins()] == ["core"]
    finally:
        monkeypatch.delenv("KVCORE_DISABLE_PLUGIN_AUTOLOAD")
        plugins.reload_plugins()


def test_allow_list(monkeypatch):
    monkeypatch.setenv("KVCORE_PLUGINS", "does-not-exist")
    plugins.reload_plugins()
    try:
        assert [p.name for p in list_plugins()] == ["core"]
    finally:
        monkeypatch.delenv("KVCORE_PLUGINS")
        plugins.reload_plugins()


def test_cli_plugins_json(cli):
    code, out, _ = cli("plugins", "--json")
    assert code == 0
    data = json.loads(out)
    core = data["plugins"][0]
    assert set(core) == {"name", "distribution", "version", "kinds", "kv_cache_dtypes",
                         "model_types", "hooks"}
    assert core["name"] == "core" and core["distribution"] == "kvcore"


def test_installed_plugins_listed(cli):
    """With the five plugin distributions installed (the dev setup), each is listed with
    its kinds; in a core-only environment this checks nothing beyond the core."""
    from importlib.util import find_spec

    code, out, _ = cli("plugins", "--json")
    data = {p["distribution"]: p for p in json.loads(out)["plugins"]}
    expected = {"kvcore-mla": "mla_attention", "kvcore-mamba": "mamba",
                "kvcore-turboquant": "turboquant_full_attention", "kvcore-rswa": "rswa",
                "kvcore-kpool": "kpool_tail"}
    for dist, kind in expected.items():
        if find_spec(dist.replace("-", "_")) is None:
            continue
        assert kind in data[dist]["kinds"], (dist, data.get(dist))


class ExplainingPlugin:
    @hookimpl
    def kvcore_explain_kv_cache_dtype(self, name):
        return "zz needs a prime bit width" if name.startswith("zz") else None


def test_explain_hook_adds_the_reason(registered):
    from kvcore.errors import UnknownKVCacheDtypeError

    registered(ExplainingPlugin(), "explain")
    with pytest.raises(UnknownKVCacheDtypeError) as e:
        get_registry().kv_cache_dtype("zz4")
    assert "zz needs a prime bit width" in str(e.value)
    with pytest.raises(UnknownKVCacheDtypeError) as e:
        get_registry().kv_cache_dtype("yy4")
    assert "prime" not in str(e.value)


def test_scheme_spec_kind_used_by_core_adapters(registered):
    from kvcore.models import CacheConfig, load_model_config
    from kvcore.models.planner import layer_specs_for

    class KindPlugin(GoodPlugin):
        @hookimpl
        def kvcore_kv_cache_dtypes(self):
            return [QuantScheme("test_int2k", KVQuantMode.PLUGIN, lambda d, _: d // 4,
                                lambda d, _: d // 4, spec_kind="test_doubled")]

    registered(KindPlugin(), "kind")
    specs = layer_specs_for(load_model_config("llama-3.1-8b"),
                            CacheConfig(kv_cache_dtype="test_int2k"))
    assert {type(s) for s in specs.values()} == {DoubledSpec}


def test_missing_plugin_message_says_why(monkeypatch):
    """Installed but disabled is not 'not installed'."""
    from importlib.util import find_spec

    from kvcore.errors import MissingPluginError

    monkeypatch.setenv("KVCORE_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins.reload_plugins()
    try:
        with pytest.raises(MissingPluginError) as e:
            get_registry().spec_class("mla_attention")
        if find_spec("kvcore_mla") is not None:
            assert "installed but not loaded" in str(e.value)
            assert "KVCORE_DISABLE_PLUGIN_AUTOLOAD" in str(e.value)
        else:
            assert "not installed" in str(e.value) and "./plugins/mla" in str(e.value)
    finally:
        monkeypatch.delenv("KVCORE_DISABLE_PLUGIN_AUTOLOAD")
        plugins.reload_plugins()


# ---- issue 15 item 14: plugin kernel tests without triton ---------------------------------

@pytest.mark.parametrize("plugin, files", [
    ("rswa", ["tests/test_rswa_kernels.py"]),
    ("kpool", ["tests/test_kpool_kernels.py"]),
])
def test_kernel_tests_skip_cleanly_without_triton(plugin, files):
    """With triton hidden (``sys.modules["triton"] = None``: import and find_spec both
    fail, as in an install with torch and no triton), the Triton tests skip and the
    torch-reference tests still run and pass."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    root = Path(__file__).resolve().parents[1] / "plugins" / plugin
    code = ("import sys; sys.modules['triton'] = None\n"
            "import pytest\n"
            f"sys.exit(pytest.main(['-rs', '-p', 'no:cacheprovider', *{files!r}]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True, timeout=600)
    tail = out.stdout[-2000:]
    assert out.returncode == 0, tail
    assert "ModuleNotFoundError" not in out.stdout, tail
    assert " passed" in tail and " skipped" in tail, tail
    assert "triton is not installed" in out.stdout, tail
