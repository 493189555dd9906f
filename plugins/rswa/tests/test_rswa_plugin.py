"""kvcore-rswa as an installed plugin: listed by ``kvcore plugins`` with its kind when it
is the only plugin loaded, and importable (spec, adapter, manager) without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run(code_or_args, env_extra):
    env = dict(os.environ, **env_extra)
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, *code_or_args], capture_output=True, text=True,
                          env=env, timeout=1800)  # hang watchdog only


def test_kvcore_plugins_lists_rswa_alone_on_the_core():
    out = run(["-m", "kvcore.cli", "plugins", "--json"], {"KVCORE_PLUGINS": "rswa"})
    assert out.returncode == 0, out.stderr
    plugins = {p["name"]: p for p in json.loads(out.stdout)["plugins"]}
    assert set(plugins) == {"core", "rswa"}
    assert plugins["rswa"]["distribution"] == "kvcore-rswa"
    assert plugins["rswa"]["kinds"] == ["rswa"]
    assert "kvcore_layer_specs" in plugins["rswa"]["hooks"]


def test_planning_modules_do_not_import_torch():
    code = ("import sys, kvcore_rswa, kvcore_rswa.plugin, kvcore_rswa.adapter, "
            "kvcore_rswa.manager\n"
            "from kvcore.registry import get_registry\n"
            "get_registry().manager_class('rswa')\n"
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules\n")
    out = run(["-c", code], {"KVCORE_PLUGINS": "rswa"})
    assert out.returncode == 0, out.stderr
