"""Triton kernel of :mod:`kvcore_rswa.kernels` (imported on first use: it imports
triton at module level, so that ``@triton.jit`` functions can call each other)."""

import triton
import triton.language as tl


@triton.jit
def _block(Q_vec, K, V, bt_row, j, q_pos, prompt_len, window, scale, kvh,
           m_i, l_i, acc,
           stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
           BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, HEAD: tl.constexpr,
           HEAD_P: tl.constexpr, HEAD_V: tl.constexpr, HEAD_VP: tl.constexpr):
    bid = tl.load(bt_row + j).to(tl.int64)
    offs_t = tl.arange(0, BLOCK_N)
    pos = j * BLOCK_SIZE + offs_t
    # a negative id (null block, padding) is never read
    valid = (offs_t < BLOCK_SIZE) & (pos <= q_pos) & ((offs_t * 0 + bid) >= 0) & \
        ((pos < prompt_len) | (q_pos - pos < window))
    bid = tl.maximum(bid, 0)
    offs_d = tl.arange(0, HEAD_P)
    offs_dv = tl.arange(0, HEAD_VP)
    k = tl.load(K + bid * stride_kb + offs_t[:, None] * stride_kt + kvh * stride_kh
                + offs_d[None, :],
                mask=valid[:, None] & (offs_d[None, :] < HEAD), other=0.0)
    s = tl.sum(k.to(tl.float32) * Q_vec[None, :], axis=1) * scale
    s = tl.where(valid, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=0))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_safe)
    p = tl.exp(s - m_safe)
    v = tl.load(V + bid * stride_vb + offs_t[:, None] * stride_vt + kvh * stride_vh
                + offs_dv[None, :],
                mask=valid[:, None] & (offs_dv[None, :] < HEAD_V), other=0.0)
    acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
    l_i = l_i * alpha + tl.sum(p, axis=0)
    return m_new, l_i, acc

@triton.jit
def _rswa_decode(Q, K, V, BT, SEQ, PROMPT, OUT, scale, window,
                 stride_qs, stride_qh, stride_kb, stride_kt, stride_kh,
                 stride_vb, stride_vt, stride_vh, stride_bts, stride_os, stride_oh,
                 GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
                 HEAD: tl.constexpr, HEAD_P: tl.constexpr, HEAD_V: tl.constexpr,
                 HEAD_VP: tl.constexpr):
    s = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // GROUP
    seq_len = tl.load(SEQ + s)
    prompt_len = tl.load(PROMPT + s)
    q_pos = seq_len - 1
    offs_d = tl.arange(0, HEAD_P)
    q = tl.load(Q + s * stride_qs + h * stride_qh + offs_d, mask=offs_d < HEAD,
                other=0.0).to(tl.float32)
    m_i = tl.full((), float("-inf"), tl.float32)
    l_i = tl.full((), 0.0, tl.float32)
    acc = tl.zeros((HEAD_VP,), dtype=tl.float32)
    bt_row = BT + s * stride_bts
    num_blocks = (seq_len + BLOCK_SIZE - 1) // BLOCK_SIZE
    prompt_blocks = tl.minimum((prompt_len + BLOCK_SIZE - 1) // BLOCK_SIZE, num_blocks)
    # the prompt (always visible) ...
    for j in range(0, prompt_blocks):
        m_i, l_i, acc = _block(q, K, V, bt_row, j, q_pos, prompt_len, window, scale,
                               kvh, m_i, l_i, acc, stride_kb, stride_kt, stride_kh,
                               stride_vb, stride_vt, stride_vh, BLOCK_SIZE, BLOCK_N,
                               HEAD, HEAD_P, HEAD_V, HEAD_VP)
    # ... then the decode window; the gap between them is never touched
    win_start = tl.maximum(prompt_len, q_pos - window + 1)
    win_first = tl.maximum(prompt_blocks, win_start // BLOCK_SIZE)
    for j in range(win_first, num_blocks):
        m_i, l_i, acc = _block(q, K, V, bt_row, j, q_pos, prompt_len, window, scale,
                               kvh, m_i, l_i, acc, stride_kb, stride_kt, stride_kh,
                               stride_vb, stride_vt, stride_vh, BLOCK_SIZE, BLOCK_N,
                               HEAD, HEAD_P, HEAD_V, HEAD_VP)
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)
    offs_dv = tl.arange(0, HEAD_VP)
    tl.store(OUT + s * stride_os + h * stride_oh + offs_dv,
             out.to(OUT.dtype.element_ty), mask=offs_dv < HEAD_V)

