"""State-copy kernel: torch reference against hand-built expectations, and Triton
(TRITON_INTERPRET=1, set by conftest.py) against the reference."""

import importlib.util
import os

import pytest

torch = pytest.importorskip("torch")

from kvcore_mamba.kernels import (  # noqa: E402
    checkpoint_states,
    copy_state_blocks,
    copy_state_blocks_ref,
    copy_state_blocks_triton,
    state_views,
)
from kvcore_mamba.spec import MambaSpec  # noqa: E402

#: Triton paths skip cleanly without triton (issue 15 item 14); the torch references run
HAS_TRITON = importlib.util.find_spec("triton") is not None
requires_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")


def numbered(*shape, dtype=torch.float32):
    return torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(
        shape).to(dtype)


@requires_triton
def test_interpreter_is_on():
    assert os.environ.get("TRITON_INTERPRET") == "1"


def test_reference_whole_and_shifted_copy():
    conv = numbered(6, 5, 4)  # 6 blocks, window 3 + 2 draft rows, 4 channels
    before = conv.clone()
    copy_state_blocks_ref(conv, [1, 2, -1], [4, 5, 0], [0, 2, 0])
    assert torch.equal(conv[4], before[1])                      # shift 0: whole block
    assert torch.equal(conv[5, :3], before[2, 2:])              # rows 2..4 -> 0..2
    assert torch.equal(conv[5, 3:], before[5, 3:])              # tail left as it was
    assert torch.equal(conv[0], before[0])                      # padding entry skipped
    for b in (1, 2, 3):
        assert torch.equal(conv[b], before[b])


@requires_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16,
                                   torch.float8_e4m3fn])
def test_triton_matches_reference(dtype):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(7, 6, 3, 5, generator=g).to(dtype)
    src, dst, shifts = [0, 3, 5, -1], [2, 6, 1, 4], [0, 1, 5, 2]
    a, b = base.clone(), base.clone()
    copy_state_blocks_ref(a, src, dst, shifts)
    copy_state_blocks_triton(b, src, dst, shifts, block=16)  # several programs per copy
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))  # bitwise
    c = base.clone()
    copy_state_blocks_triton(c, src, dst, None)
    d = base.clone()
    copy_state_blocks_ref(d, src, dst, None)
    assert torch.equal(c.view(torch.uint8), d.view(torch.uint8))


@requires_triton
def test_dispatcher_uses_triton_under_interpreter():
    s = numbered(4, 3, 2)
    copy_state_blocks(s, torch.tensor([0]), torch.tensor([3]), torch.tensor([1]))
    assert torch.equal(s[3, :2], numbered(4, 3, 2)[0, 1:])


@requires_triton
def test_strided_padded_page_views():
    # Jamba-like state scaled down: conv (3, 8) bf16 + ssm (8, 4) fp32 = 48 + 128 = 176 B,
    # padded to 192 B pages
    spec = MambaSpec(block_size=16, shapes=((3, 8), (8, 4)), dtypes=("bfloat16", "float32"),
                     page_size_padded=192)
    buf = torch.zeros(5 * 192, dtype=torch.uint8)
    conv, ssm = state_views(buf, spec, 5)
    assert conv.shape == (5, 3, 8) and ssm.shape == (5, 8, 4)
    assert conv.stride(0) == 96 and ssm.stride(0) == 48  # 192 B in elements
    conv.copy_(numbered(5, 3, 8, dtype=torch.bfloat16))
    ssm.copy_(numbered(5, 8, 4) + 1000)
    raw_before = buf.clone()
    copy_state_blocks_triton(conv, [1], [3], [2], block=8)
    copy_state_blocks_triton(ssm, [1], [3], None, block=8)
    # the ssm of block 3 starts at byte 3 x 192 + 48
    assert torch.equal(buf[3 * 192 + 48: 3 * 192 + 176], raw_before[192 + 48: 192 + 176])
    # conv row 2 of block 1 (bytes 32..47 of its page) -> row 0 of block 3
    assert torch.equal(buf[3 * 192: 3 * 192 + 16], raw_before[192 + 32: 192 + 48])
    assert torch.equal(buf[3 * 192 + 176: 4 * 192], raw_before[3 * 192 + 176: 4 * 192])
    for b in (0, 1, 2, 4):
        assert torch.equal(buf[b * 192:(b + 1) * 192], raw_before[b * 192:(b + 1) * 192])


def test_checkpoint_with_accepted_speculative_tokens():
    # 2 draft tokens: conv window 3 + 2 rows; request 0 accepted 3 tokens (shift 2, SSM
    # from its 3rd block), request 1 accepted 1 (shift 0, SSM from its running block)
    conv = numbered(10, 5, 4)
    ssm = numbered(10, 2, 3) + 500
    c0, s0 = conv.clone(), ssm.clone()
    spec_blocks = [[1, 2, 3], [4, 5, 6]]
    checkpoint_states([conv], [ssm], running_block_ids=[1, 4], dst_block_ids=[8, 9],
                      num_accepted_tokens=[3, 1], spec_block_ids=spec_blocks)
    assert torch.equal(conv[8, :3], c0[1, 2:])
    assert torch.equal(conv[9], c0[4])
    assert torch.equal(ssm[8], s0[3])
    assert torch.equal(ssm[9], s0[4])
    for b in range(8):
        assert torch.equal(conv[b], c0[b]) and torch.equal(ssm[b], s0[b])


def test_bad_shift_raises():
    s = numbered(3, 4, 2)
    with pytest.raises(ValueError, match="shift"):
        copy_state_blocks_ref(s, [0], [1], [4])
    if HAS_TRITON:
        with pytest.raises(ValueError, match="shifts"):
            copy_state_blocks_triton(s, [0], [1], [7])
