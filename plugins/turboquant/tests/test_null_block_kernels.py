"""Issue 13 item 5: TurboQuant store / dequant skip the null block (-1 in kernel
tables from :mod:`kvcore.runtime.kernel_tables`)."""

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from kvcore_turboquant.kernels import (  # noqa: E402
    allocate_kv_cache,
    turboquant_dequant,
    turboquant_store,
)

from kvcore.runtime.kernel_tables import block_tables, slot_mapping  # noqa: E402

IMPLS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not installed"))]
BS, NB, H, D = 4, 8, 2, 64
TABLE = [0, 0, 7]
SCHEME = "turboquant_4bit_nc"


@pytest.mark.parametrize("impl", IMPLS)
def test_store_and_dequant_skip_the_null_block(impl):
    torch.manual_seed(0)
    cache = allocate_kv_cache(NB, BS, H, SCHEME, head_size=D)
    cache.fill_(0xAB)
    block0 = cache[0].clone()
    k = torch.randn(12, H, D)
    v = torch.randn(12, H, D)
    turboquant_store(k, v, cache, slot_mapping(TABLE, range(12), BS, as_tensor=True),
                     SCHEME, impl=impl)
    assert torch.equal(cache[0], block0)
    kk, vv = turboquant_dequant(cache, block_tables([TABLE], as_tensor=True), SCHEME,
                                head_size=D, impl=impl)
    assert torch.equal(kk[0, :8], torch.zeros(8, H, D))
    assert torch.isfinite(kk).all() and (kk[0, 8:] != 0).any()
