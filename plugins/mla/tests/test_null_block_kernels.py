"""Issue 13 item 5: MLA kernels never touch the null block.  Slots and block tables
come from :mod:`kvcore.runtime.kernel_tables` (null block -> -1); the writer leaves block
0 bit for bit as it was and the reader never reads it (block 0 holds NaN/0xFF bytes)."""

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from kvcore_mla import ops  # noqa: E402

from kvcore.runtime.kernel_tables import block_tables, slot_mapping  # noqa: E402

BACKENDS = ["ref", pytest.param("triton", marks=pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not installed"))]
BS, NB, L, R = 4, 8, 512, 64
TABLE = [0, 0, 7]  # the runtime's table: two null entries, then block 7


def cache(mode):
    if mode == "fp8_ds_mla":
        return torch.full((NB, BS, 656), 0xFF, dtype=torch.uint8)
    if mode == "fp8":
        return torch.full((NB, BS, L + R), 0x7F, dtype=torch.uint8).view(
            torch.float8_e4m3fn)  # 0x7F: NaN in e4m3
    return torch.full((NB, BS, L + R), float("nan"), dtype=torch.bfloat16)


def raw(c):
    return c.view(torch.uint8) if c.element_size() == 1 else c.view(torch.int16)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["auto", "fp8", "fp8_ds_mla"])
def test_write_and_read_skip_the_null_block(backend, mode):
    torch.manual_seed(0)
    c = cache(mode)
    block0 = raw(c[0]).clone()
    slots = slot_mapping(TABLE, range(12), BS, as_tensor=True)
    kv_c = torch.randn(12, L, dtype=torch.bfloat16)
    k_pe = torch.randn(12, R, dtype=torch.bfloat16)
    ops.concat_and_cache_mla(kv_c, k_pe, c, slots, mode, 1.0, backend=backend)
    assert torch.equal(raw(c[0]), block0)
    out = ops.gather_mla_cache(c, block_tables([TABLE], as_tensor=True),
                               torch.tensor([12]), mode, 1.0, backend=backend)
    assert torch.equal(out[:8].float(), torch.zeros(8, L + R))  # null positions: zeros
    assert torch.isfinite(out.float()).all()
    if mode != "fp8":  # fp8 rounds k_pe; the other layouts keep it exactly
        assert (out[8:, L:].float() == k_pe[8:].float()).all()  # block 7 read back
    else:
        assert (out[8:].float() != 0).any()


def test_slots_from_block_table_marks_null_entries():
    bt = block_tables([TABLE], as_tensor=True)
    slots = ops.slots_from_block_table(bt, torch.tensor([12]), BS)
    assert slots.tolist() == [-1] * 8 + [28, 29, 30, 31]
