"""Issue 13 item 5: the k-pool kernels never write the null block: ring block ids and
pooled slots from :mod:`kvcore.runtime.kernel_tables` are -1 there and are skipped."""

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from kvcore_kpool.kernels import (  # noqa: E402
    kpool_compress_ref,
    kpool_compress_triton,
    kpool_pool_slot,
    kpool_tail_write_ref,
    kpool_tail_write_triton,
)

from kvcore.runtime.kernel_tables import block_table_ids  # noqa: E402

TRITON = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                            reason="triton is not installed")
NB, RING, H, D, KPOOL, BS = 6, 8, 1, 128, 4, 8


@pytest.mark.parametrize("write", [kpool_tail_write_ref,
                                   pytest.param(kpool_tail_write_triton, marks=TRITON)])
def test_tail_write_skips_the_null_block(write):
    key_ring = torch.full((NB, RING, H, D), 3.0)
    gate_ring = torch.full((NB, RING, H, D), 3.0)
    # two requests: one whose ring is the null block (as the runtime holds it), one live
    ring_ids = torch.tensor(block_table_ids([0, 0, 4, 4]))
    keys = torch.randn(4, H, D)
    write(keys, keys, torch.tensor([0, 1, 0, 1]), ring_ids, key_ring, gate_ring)
    assert torch.equal(key_ring[0], torch.full((RING, H, D), 3.0))
    assert torch.equal(gate_ring[0], torch.full((RING, H, D), 3.0))
    assert torch.equal(key_ring[4, :2], keys[2:])


@pytest.mark.parametrize("compress", [kpool_compress_ref,
                                      pytest.param(kpool_compress_triton, marks=TRITON)])
def test_compress_skips_the_null_block(compress):
    torch.manual_seed(0)
    key_ring = torch.randn(NB, RING, H, D)
    gate_ring = torch.randn(NB, RING, H, D)
    per_block = BS // KPOOL
    out_cache = torch.zeros(NB * per_block, H, D, dtype=torch.float8_e4m3fn)
    out_scale = torch.full((NB * per_block, H), 5.0)
    table = block_table_ids([0, 5])  # pooled cache: block 0 null, block 5 live
    starts = [0, 8]
    slots = [kpool_pool_slot(torch.tensor(table), s, BS, KPOOL) for s in starts]
    assert slots[0] == -1 and slots[1] == 5 * per_block
    compress(key_ring, gate_ring, torch.tensor([2, 2]), torch.tensor(starts),
             torch.tensor(slots), out_cache, out_scale, KPOOL)
    assert torch.equal(out_scale[:per_block], torch.full((per_block, H), 5.0))
    assert (out_cache[:per_block].view(torch.uint8) == 0).all()
    assert out_scale[slots[1]].item() != 5.0  # the live pool was written
