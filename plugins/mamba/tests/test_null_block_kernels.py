"""Issue 13 item 5: the state-copy kernels never write the null block.  The align-mode
table ``[null, null, block 7]`` goes to the kernels through
:mod:`kvcore.runtime.kernel_tables` as ``[-1, -1, 7]``; copies to or from -1 are
skipped, so block 0 (shared by every request) keeps its bytes."""

import importlib.util

import pytest

torch = pytest.importorskip("torch")

from kvcore_mamba.kernels import (  # noqa: E402
    checkpoint_states,
    copy_state_blocks_ref,
    copy_state_blocks_triton,
)

from kvcore.runtime.kernel_tables import block_table_ids, state_indices  # noqa: E402

COPIES = [copy_state_blocks_ref, pytest.param(
    copy_state_blocks_triton, marks=pytest.mark.skipif(
        importlib.util.find_spec("triton") is None, reason="triton is not installed"))]
NB = 9


@pytest.mark.parametrize("copy", COPIES)
def test_copies_through_a_table_with_null_entries_leave_block_0(copy):
    state = torch.arange(NB * 5 * 3, dtype=torch.float32).reshape(NB, 5, 3)
    before = state.clone()
    table = block_table_ids([0, 0, 7])  # [-1, -1, 7]
    # the runner copies the running state (block 7) into "the checkpoint of block 0"
    # and a hit's state (null) into block 7: both skipped, block 0 untouched
    copy(state, [table[2], table[0]], [table[0], table[2]])
    assert torch.equal(state, before)
    copy(state, [table[2]], [3])
    assert torch.equal(state[3], before[7]) and torch.equal(state[0], before[0])


def test_checkpoint_with_null_columns_leaves_block_0():
    conv = torch.arange(NB * 4 * 2, dtype=torch.float32).reshape(NB, 4, 2)
    ssm = torch.arange(NB * 2 * 2, dtype=torch.float32).reshape(NB, 2, 2)
    c0, s0 = conv.clone(), ssm.clone()
    # three requests' state columns [running, draft] as the runtime holds them: a null
    # running block, a live one, and a live one whose draft column is null
    cols = state_indices([[0, 0], [6, 8], [5, 0]])
    dst = block_table_ids([2, 0, 3])  # request 1 checkpoints into the null block
    checkpoint_states([conv], [ssm], [c[0] for c in cols], dst,
                      num_accepted_tokens=[1, 1, 2], spec_block_ids=cols)
    assert torch.equal(conv[0], c0[0]) and torch.equal(ssm[0], s0[0])
    assert torch.equal(conv[2], c0[2]) and torch.equal(ssm[2], s0[2])  # src was null
    # request 2: conv window shifted by one accepted draft; SSM state from the null
    # draft column is skipped
    assert torch.equal(conv[3, :3], c0[5, 1:]) and torch.equal(ssm[3], s0[3])
