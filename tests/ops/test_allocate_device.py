"""``allocate_tensors`` names a device it cannot use and a buffer the device cannot hold
(fresh tester T20 of stop 39: torch's bare RuntimeError / AssertionError before)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import kvcore  # noqa: E402
from kvcore.errors import ConfigError  # noqa: E402
from kvcore.ops import allocate_tensors  # noqa: E402
from kvcore.specs import FullAttentionSpec  # noqa: E402


def _plan(nbytes: int):
    return kvcore.plan({"l0": FullAttentionSpec(block_size=16, num_kv_heads=8,
                                                head_size=128)},
                       max_model_len=4096, kv_cache_memory_bytes=nbytes)


BAD = ["foo", "cuda:x", "", True, 1.5, object()]
if not torch.cuda.is_available():
    BAD += ["cuda", "cuda:0"]
BAD.append(f"cuda:{torch.cuda.device_count() + 3}" if torch.cuda.is_available() else
           "cuda:7")


@pytest.mark.parametrize("device", BAD, ids=lambda d: type(d).__name__ if isinstance(
    d, object) and type(d) is object else repr(d))
def test_a_device_that_cannot_be_used_is_named(device):
    with pytest.raises(ConfigError) as exc:
        allocate_tensors(_plan(64 << 20), device)
    assert exc.value.extra["field"] == "device"
    assert "device" in str(exc.value) and "valid:" in str(exc.value)


def test_a_buffer_the_device_cannot_hold_is_named_not_torchs_error():
    # 2**50 B (1 PiB): no machine's CPU allocator gives it
    with pytest.raises(ConfigError) as exc:
        allocate_tensors(_plan(2 ** 50), "cpu")
    assert exc.value.extra["field"] == "kv_cache_memory"
    assert f"{exc.value.extra['value']:,}" in str(exc.value)


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")], ids=repr)
def test_a_usable_device_still_allocates(device):
    cache = allocate_tensors(_plan(64 << 20), device, num_blocks=4)
    assert all(b.device.type == "cpu" for b in cache.buffers)
