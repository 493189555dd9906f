"""Issue 13 item 5: R-SWA decode attention never reads a -1 (null block) entry, even
inside the visible range; block 0 holds NaN, so a read would show."""

import importlib.util
import math

import pytest

torch = pytest.importorskip("torch")

from kvcore_rswa.kernels import (  # noqa: E402
    rswa_decode_attention_ref,
    rswa_decode_attention_triton,
)

from kvcore.runtime.kernel_tables import block_tables  # noqa: E402

IMPLS = [rswa_decode_attention_ref, pytest.param(
    rswa_decode_attention_triton, marks=pytest.mark.skipif(
        importlib.util.find_spec("triton") is None, reason="triton is not installed"))]
BS, NB, H, D = 4, 10, 2, 16


@pytest.mark.parametrize("fn", IMPLS)
def test_null_entries_are_left_out(fn):
    torch.manual_seed(0)
    kc = torch.randn(NB, BS, H, D)
    vc = torch.randn(NB, BS, H, D)
    kc[0] = float("nan")
    vc[0] = float("nan")
    q = torch.randn(1, H, D)
    # prompt of 8 tokens; the runtime's table holds the null block for block 1
    table = block_tables([[3, 0, 7]], as_tensor=True)
    out = fn(q, kc, vc, table, torch.tensor([11]), torch.tensor([8]), 64)
    assert torch.isfinite(out).all()
    # equal to attention over the live positions: block 3 (0..3) and block 7 (8..10)
    k = torch.cat([kc[3], kc[7, :3]])
    v = torch.cat([vc[3], vc[7, :3]])
    s = torch.einsum("hd,nhd->hn", q[0], k) / math.sqrt(D)
    want = torch.einsum("hn,nhd->hd", s.softmax(-1), v)
    assert torch.allclose(out[0], want, atol=1e-4)
