"""Registry and plugin manager: built-ins through the hooks, hand registration,
conflicts, broken plugins, environment switches."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import pytest
from kvcore_watchdog import run_watched

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
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    root = Path(__file__).resolve().parents[1] / "plugins" / plugin
    code = ("import sys; sys.modules['triton'] = None\n"
            "import pytest\n"
            f"sys.exit(pytest.main(['-rs', '-p', 'no:cacheprovider', *{files!r}]))")
    out = run_watched([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True)
    tail = out.stdout[-2000:]
    assert out.returncode == 0, tail
    assert "ModuleNotFoundError" not in out.stdout, tail
    assert " passed" in tail and " skipped" in tail, tail
    assert "triton is not installed" in out.stdout, tail


# ---- issue 15 items 10, 11, 13: plugins that cannot take kvcore down ---------------------

BROKEN_TYPE = "test_broken_model"
BROKEN_CONFIG = {"model_type": BROKEN_TYPE, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "hidden_size": 256,
                 "max_position_embeddings": 1024}


def _adapter_plugin(behaviour):
    class Adapter:
        @hookimpl
        def kvcore_layer_specs(self, model_config, cache_config):
            if model_config.model_type != BROKEN_TYPE:
                return None
            return behaviour()

    return Adapter()


def _raise(exc):
    def f():
        raise exc
    return f


F16 = FullAttentionSpec(block_size=16, num_kv_heads=4, head_size=64)
ADAPTER_BEHAVIOURS = {
    "raises": (_raise(RuntimeError("adapter exploded")), "RuntimeError"),
    "keyerror": (_raise(KeyError("num_layers")), "KeyError"),
    "systemexit0": (_raise(SystemExit(0)), "SystemExit"),
    "systemexit3": (_raise(SystemExit(3)), "SystemExit"),
    "list": (lambda: [F16], "list"),
    "string": (lambda: "model.layers.0", "str"),
    "non-spec values": (lambda: {"model.layers.0.self_attn": {"type": "full_attention"}},
                        "KVCacheSpec"),
    "non-string names": (lambda: {0: F16}, "layer name"),
}


@pytest.mark.parametrize("behaviour", list(ADAPTER_BEHAVIOURS))
def test_misbehaving_adapter_is_a_plugin_error(registered, cli, tmp_path, behaviour):
    """Item 10: the error names the distribution, its version and the hook; exit 2 with
    one line (JSON under --json); SystemExit(0) from a plugin does not end kvcore with
    exit 0."""
    fn, fragment = ADAPTER_BEHAVIOURS[behaviour]
    registered(_adapter_plugin(fn), "brokenadapter", dist="kvcore-broken-adapter")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BROKEN_CONFIG))
    code, out, err = cli("plan", str(path), "--kv-cache-memory", "1GiB")
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for part in ("kvcore-broken-adapter", "9.9", "kvcore_layer_specs", fragment):
        assert part in lines[0], (part, lines[0])
    code, out, _ = cli("plan", str(path), "--kv-cache-memory", "1GiB", "--json")
    payload = json.loads(out)["error"]
    assert code == 2 and payload["type"] == "PluginError"
    assert payload["distribution"] == "kvcore-broken-adapter" and payload["version"] == "9.9"
    assert payload["hook"] == "kvcore_layer_specs"


def test_misbehaving_adapter_in_the_python_api(registered, tmp_path):
    from kvcore import plan_model
    from kvcore.errors import PluginError

    registered(_adapter_plugin(_raise(ValueError("bad"))), "brokenadapter",
               dist="kvcore-broken-adapter")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BROKEN_CONFIG))
    with pytest.raises(PluginError, match="kvcore-broken-adapter 9.9: hook "
                                          "kvcore_layer_specs raised ValueError"):
        plan_model(path, kv_cache_memory_bytes=2**30)


def test_plugin_config_error_passes_unchanged(registered, tmp_path):
    """A plugin's own ConfigError (a malformed config field) is the user's error, not a
    plugin bug: it passes through with its field."""
    from kvcore import plan_model
    from kvcore.errors import ConfigError

    def complain():
        raise ConfigError("config: field 'x' = 5 must be a string", field="x")

    registered(_adapter_plugin(complain), "strict")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BROKEN_CONFIG))
    with pytest.raises(ConfigError) as e:
        plan_model(path, kv_cache_memory_bytes=2**30)
    assert type(e.value) is ConfigError and e.value.extra["field"] == "x"


class BrokenWrapper:
    @hookimpl(wrapper=True)
    def kvcore_layer_specs(self, model_config, cache_config):
        result = yield
        if model_config.model_type == BROKEN_TYPE:
            raise ZeroDivisionError("in the wrapper")
        return result


def test_broken_hook_wrapper_is_named(registered, cli, tmp_path):
    registered(BrokenWrapper(), "brokenwrapper", dist="kvcore-broken-wrapper")
    registered(_adapter_plugin(lambda: {"model.layers.0.self_attn": F16}), "fine")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BROKEN_CONFIG))
    code, _, err = cli("plan", str(path), "--kv-cache-memory", "1GiB")
    assert code == 2 and "kvcore-broken-wrapper" in err and "ZeroDivisionError" in err
    code, _, err = cli("plan", "llama-3.1-8b", "--kv-cache-memory", "20GiB",
                       "--max-model-len", "4096")
    assert code == 0, err  # other models pass through the wrapper untouched


@pytest.mark.parametrize("answer, fragment", [
    (_raise(RuntimeError("explain exploded")), "RuntimeError"),
    (_raise(SystemExit(0)), "SystemExit"),
    (lambda: 42, "must return a string or None"),
])
def test_misbehaving_explain_hook(registered, cli, answer, fragment):
    class Explain:
        @hookimpl
        def kvcore_explain_kv_cache_dtype(self, name):
            return answer()

    registered(Explain(), "explain", dist="kvcore-broken-explain")
    code, _, err = cli("plan", "llama-3.1-8b", "--kv-cache-dtype", "bogus",
                       "--max-model-len", "4096")
    assert code == 2 and "Traceback" not in err, err
    assert "kvcore-broken-explain" in err and "kvcore_explain_kv_cache_dtype" in err
    assert fragment in err


class NotASpecPlugin:
    @hookimpl
    def kvcore_spec_types(self):
        return [SpecType(dict, "test_not_a_spec", None)]


class MissingManagerPlugin:
    @hookimpl
    def kvcore_spec_types(self):
        return [SpecType(DoubledSpec, "test_doubled",
                         "kvcore_no_such_module_xyz:Manager", "full_attention")]


class BadManagerPathPlugin:
    @hookimpl
    def kvcore_spec_types(self):
        return [SpecType(DoubledSpec, "test_doubled", "not a path", "full_attention")]


@pytest.mark.parametrize("plugin, fragment", [
    (NotASpecPlugin(), "not a KVCacheSpec dataclass"),
    (BadManagerPathPlugin(), "'module:Class' path"),
])
def test_invalid_registration_is_refused(registered, plugin, fragment):
    """Item 11: a SpecType whose class is not a KVCacheSpec (or whose manager is not a
    class or path) is refused when the registry is built, naming the plugin."""
    registered(plugin, "badreg", dist="kvcore-bad-registration")
    with pytest.warns(KVCorePluginWarning, match=fragment) as rec:
        reg = get_registry()
    assert "kvcore-bad-registration 9.9" in str(rec[0].message)
    assert "test_not_a_spec" not in reg.kinds and "test_doubled" not in reg.kinds
    assert "badreg" not in [p.name for p in list_plugins()]


def test_missing_manager_module_named_when_listed_and_when_managing(registered, cli):
    """Item 11: a manager path to a missing module plans (the path is not imported at
    import or planning time), and is an error naming the plugin in ``kvcore plugins``
    and when a KVCacheManager is built."""
    from kvcore import KVCacheManager, plan
    from kvcore.errors import PluginError

    registered(MissingManagerPlugin(), "nomanager", dist="kvcore-no-manager")
    spec = DoubledSpec(block_size=16, num_kv_heads=8, head_size=128)
    config = plan({"a": spec}, max_model_len=1024, kv_cache_memory_bytes=10**8)
    with pytest.raises(PluginError) as e:
        KVCacheManager(config, max_model_len=1024)
    for part in ("kvcore-no-manager", "nomanager", "kvcore_no_such_module_xyz",
                 "ModuleNotFoundError"):
        assert part in str(e.value), str(e.value)
    code, out, err = cli("plugins")
    assert code == 2 and "kvcore-no-manager" in err and "kvcore_no_such_module_xyz" in err
    code, out, _ = cli("plugins", "--json")
    data = json.loads(out)
    assert code == 2 and data["errors"][0]["distribution"] == "kvcore-no-manager"


@pytest.mark.parametrize("value, loads", [
    ("1", False), ("true", False), ("YES", False), ("on", False),
    ("0", True), ("false", True), ("no", True), ("off", True), ("", True),
])
def test_autoload_switch_is_strict(monkeypatch, value, loads):
    """Item 13: false / no / off / 0 keep autoload on (they used to disable it)."""
    from importlib.util import find_spec

    monkeypatch.setenv("KVCORE_DISABLE_PLUGIN_AUTOLOAD", value)
    plugins.reload_plugins()
    try:
        names = [p.name for p in list_plugins()]
        if find_spec("kvcore_mla") is not None:
            assert ("mla" in names) is loads, names
        else:
            assert "core" in names
    finally:
        monkeypatch.delenv("KVCORE_DISABLE_PLUGIN_AUTOLOAD")
        plugins.reload_plugins()


@pytest.mark.parametrize("value", ["maybe", "2", "disable", "nope"])
def test_autoload_switch_refuses_junk(monkeypatch, cli, value):
    monkeypatch.setenv("KVCORE_DISABLE_PLUGIN_AUTOLOAD", value)
    plugins.reload_plugins()
    try:
        code, _, err = cli("plugins")
        assert code == 2 and "KVCORE_DISABLE_PLUGIN_AUTOLOAD" in err and value in err
        assert len(err.strip().splitlines()) == 1
    finally:
        monkeypatch.delenv("KVCORE_DISABLE_PLUGIN_AUTOLOAD")
        plugins.reload_plugins()


@pytest.mark.parametrize("value", ["MLA", "nope", "mla,nope"])
def test_unknown_plugin_names_are_warned_with_the_installed_ones(monkeypatch, value):
    from importlib.util import find_spec

    monkeypatch.setenv("KVCORE_PLUGINS", value)
    plugins.reload_plugins()
    try:
        with pytest.warns(KVCorePluginWarning, match="no installed plugin has") as rec:
            list_plugins()
        msg = str(rec[0].message)
        assert ("nope" if "nope" in value else "MLA") in msg
        if find_spec("kvcore_mla") is not None:
            assert "installed: " in msg and "mla" in msg.split("installed: ")[1]
    finally:
        monkeypatch.delenv("KVCORE_PLUGINS")
        plugins.reload_plugins()


def test_models_with_conflicting_plugins_reports_once(registered, cli):
    """Item 13: the conflict is one line and exit 2, not a note in every row."""
    registered(ClashingPlugin(), "clash", dist="kvcore-clash")
    code, out, err = cli("models")
    assert code == 2 and out == "", out[:300]
    assert len(err.strip().splitlines()) == 1 and "kvcore-clash" in err
    code, out, _ = cli("models", "--json")
    assert code == 2 and json.loads(out)["error"]["type"] == "PluginConflictError"
