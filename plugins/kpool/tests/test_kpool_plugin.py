"""kvcore-kpool as an installed plugin: listed by ``kvcore plugins`` with its kind when
it is the only plugin loaded, importable without torch, and planning a model end to
end through ``kvcore.plan_model``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import kvcore


def run(args, env_extra):
    env = dict(os.environ, **env_extra)
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          env=env, timeout=1800)  # hang watchdog only


def test_kvcore_plugins_lists_kpool_alone_on_the_core():
    out = run(["-m", "kvcore.cli", "plugins", "--json"], {"KVCORE_PLUGINS": "kpool"})
    assert out.returncode == 0, out.stderr
    plugins = {p["name"]: p for p in json.loads(out.stdout)["plugins"]}
    assert set(plugins) == {"core", "kpool"}
    assert plugins["kpool"]["distribution"] == "kvcore-kpool"
    assert plugins["kpool"]["kinds"] == ["kpool_tail"]


def test_planning_modules_do_not_import_torch():
    code = ("import sys, kvcore_kpool, kvcore_kpool.plugin, kvcore_kpool.adapter, "
            "kvcore_kpool.manager\n"
            "from kvcore.registry import get_registry\n"
            "get_registry().manager_class('kpool_tail')\n"
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules\n")
    out = run(["-c", code], {"KVCORE_PLUGINS": "kpool"})
    assert out.returncode == 0, out.stderr


def test_plan_model_with_index_kpool(tmp_path):
    cfg_json = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 8,
                "num_key_value_heads": 8, "hidden_size": 1024,
                "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
                "index_kpool": 16}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg_json))
    cfg = kvcore.plan_model(str(path), kv_cache_memory_bytes=1 << 30, block_size=64)
    assert [(g.kind, g.block_size, len(g.layer_names)) for g in cfg.kv_cache_groups] == \
        [("full_attention", 64, 4), ("kpool_tail", 64, 4)]
    # per request: cdiv(8192, 64) = 128 attention blocks + 1 ring
    assert cfg.stats["blocks_per_request"] == 129
