"""allocate_tensors: buffers, per-layer views at the planned byte positions."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kvcore.errors import KVCoreError  # noqa: E402
from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor  # noqa: E402
from kvcore.ops import allocate_tensors, reshape_and_cache  # noqa: E402
from kvcore.planning import plan  # noqa: E402
from kvcore.specs import FullAttentionSpec, SlidingWindowSpec  # noqa: E402


def one_layer(spec, num_blocks=4, **tensor):
    return KVCacheConfig(
        num_blocks=num_blocks, kv_cache_groups=[KVCacheGroupSpec(["l0"], spec)],
        kv_cache_tensors=[KVCacheTensor(
            size=tensor.pop("size", None) or num_blocks * spec.page_size_bytes,
            shared_by=["l0"], **tensor)])


def test_bf16_views_and_byte_positions():
    spec = FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8, head_size_v=4)
    page = 4 * 2 * (8 + 4) * 2  # 192 B
    assert spec.page_size_bytes == page
    caches = allocate_tensors(one_layer(spec), "cpu")
    layer = caches["l0"]
    assert layer.key.shape == (4, 4, 2, 8) and layer.value.shape == (4, 4, 2, 4)
    assert layer.key.dtype == torch.bfloat16 and layer.raw.shape == (4, page)
    assert layer.key_scale is None
    # K of block 2, token 1, head 1, channel 3 at byte 2*192 + ((1*2 + 1)*8 + 3)*2
    layer.key[2, 1, 1, 3] = 1.5
    buf = caches.buffers[0]
    assert buf.numel() == 4 * page
    pos = 2 * page + ((1 * 2 + 1) * 8 + 3) * 2
    assert buf[pos:pos + 2].view(torch.bfloat16).item() == 1.5
    # V starts after the K plane (4 * 2 * 8 * 2 = 128 B into the page)
    layer.value[3, 0, 0, 0] = -2.0
    pos = 3 * page + 128
    assert buf[pos:pos + 2].view(torch.bfloat16).item() == -2.0
    # nothing else touched: 1.5 = 0x3FC0 (2 non-zero bytes), -2.0 = 0xC000 (1)
    assert int((buf != 0).sum()) == 3


def test_per_token_head_scale_planes_inside_the_page():
    spec = FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8,
                             kv_cache_dtype="int8_per_token_head")
    page = 2 * 4 * 2 * (8 + 4)  # 192 B
    assert spec.page_size_bytes == page
    layer = allocate_tensors(one_layer(spec), "cpu")["l0"]
    assert layer.key.dtype == torch.int8 and layer.key_scale.dtype == torch.float32
    assert layer.key_scale.shape == (4, 4, 2)
    layer.value_scale[1, 3, 1] = 0.25
    # V scale plane at 64 (K) + 32 (K scales) + 64 (V) = 160 B; entry (3, 1) = 7th float
    pos = page + 160 + (3 * 2 + 1) * 4
    assert layer.raw[1, 160 + 28:160 + 32].view(torch.float32).item() == 0.25
    assert layer.raw.view(-1).numel() == 4 * page and pos < 4 * page


def test_shared_tensor_two_groups_and_padding():
    full = FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8)
    sw = SlidingWindowSpec(block_size=4, num_kv_heads=1, head_size=4, sliding_window=8,
                           page_size_padded=full.page_size_bytes)
    page = full.page_size_bytes  # 128 B; the SW layer's 64 B page padded to 128
    cfg = KVCacheConfig(
        num_blocks=3,
        kv_cache_groups=[KVCacheGroupSpec(["f0"], full), KVCacheGroupSpec(["s0"], sw)],
        kv_cache_tensors=[KVCacheTensor(size=3 * page, shared_by=["f0", "s0"])])
    caches = allocate_tensors(cfg, "cpu")
    assert len(caches.buffers) == 1 and caches.tensor_buffers == (0,)
    f0, s0 = caches["f0"], caches["s0"]
    assert s0.raw.shape == (3, 128) and s0.key.stride(0) == 128 // 2
    # the two layers alias block by block (the runtime never gives both a block id)
    s0.key[2, 0, 0, 0] = 3.0
    assert f0.raw[2, 0:2].view(torch.bfloat16).item() == 3.0


def test_block_outermost_plan_shares_one_buffer():
    specs = {f"l{i}": FullAttentionSpec(block_size=4, num_kv_heads=1, head_size=8 * (i + 1))
             for i in range(2)}
    cfg = plan(specs, max_model_len=32, num_gpu_blocks_override=10,
               kv_cache_layout="BLHNC")
    caches = allocate_tensors(cfg, "cpu")
    pages = [specs[n].page_size_bytes for n in ("l0", "l1")]  # 128, 256
    assert len(caches.buffers) == 1 and caches.buffers[0].numel() == 10 * sum(pages)
    l0, l1 = caches["l0"], caches["l1"]
    assert l0.layout.head_major
    # block b of l1 starts at b * (128 + 256) + 128
    l1.raw[3, 0] = 7
    assert caches.buffers[0][3 * 384 + 128].item() == 7
    key = torch.randn(1, 1, 16, dtype=torch.bfloat16)
    reshape_and_cache(key, key, l1.key, l1.value, torch.tensor([5]), "auto")
    assert torch.equal(l1.key[1, 1], key[0]) and int((l0.raw != 0).sum()) == 0


def test_unsupported_dtype_gets_raw_only():
    spec = FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8,
                             kv_cache_dtype="nvfp4")
    layer = allocate_tensors(one_layer(spec), "cpu")["l0"]
    assert layer.key is None and layer.layout is None
    assert layer.raw.shape == (4, spec.page_size_bytes)


def test_errors():
    spec = FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8)
    with pytest.raises(KVCoreError, match="num_blocks"):
        allocate_tensors(one_layer(spec, num_blocks=None, size=64), "cpu")
    with pytest.raises(KVCoreError, match="needs offset"):
        allocate_tensors(one_layer(spec, size=3 * spec.page_size_bytes), "cpu")
    bad = KVCacheConfig(num_blocks=2, kv_cache_groups=[KVCacheGroupSpec(["a"], spec)],
                        kv_cache_tensors=[KVCacheTensor(size=1024, shared_by=["b"])])
    with pytest.raises(KVCoreError, match="'b'"):
        allocate_tensors(bad, "cpu")
    # num_blocks= overrides a plan without a budget
    caches = allocate_tensors(one_layer(spec, num_blocks=None, size=2 * spec.page_size_bytes),
                              "cpu", num_blocks=2)
    assert caches["l0"].key.shape[0] == 2


def _extent(view):
    """(first byte, one past the last byte) a view reaches inside its storage."""
    isz = view.element_size()
    start = view.storage_offset() * isz
    last = sum((n - 1) * s for n, s in zip(view.shape, view.stride())) * isz
    return start, start + last + isz


@pytest.mark.parametrize(("model", "kv_dtype", "layout"), [
    ("llama-3.1-8b", "auto", None),
    ("gemma-2-2b-it", "int8_per_token_head", None),
    ("gpt-oss-20b", "fp8", None),
    ("gemma-2-2b-it", "auto", "BLHNC"),
    ("qwen3-next-80b-a3b-thinking", "auto", None),
])
def test_real_model_plans_allocate_on_meta(model, kv_dtype, layout):
    import kvcore

    options = {"kv_cache_layout": layout} if layout else {}
    cfg = kvcore.plan_model(model, kv_cache_memory_bytes=1 << 30, max_model_len=4096,
                            kv_cache_dtype=kv_dtype, **options)
    caches = allocate_tensors(cfg, "meta")  # full-size views, no memory
    assert caches.total_bytes <= 1 << 30
    if layout == "BLHNC":  # block-outermost: every layer's page inside one block span
        assert len(caches.buffers) == 1
        assert caches.buffers[0].numel() == cfg.num_blocks * cfg.bytes_per_block
    for i, t in enumerate(cfg.kv_cache_tensors):
        buf = caches.buffers[caches.tensor_buffers[i]]
        for name in t.shared_by:
            layer = caches[name]
            for view in (layer.raw, layer.key, layer.value, layer.key_scale,
                         layer.value_scale):
                if view is not None:
                    lo, hi = _extent(view)
                    assert 0 <= lo and hi <= buf.numel(), (name, lo, hi, buf.numel())
            spec = layer.spec
            if spec.kind in ("full_attention", "sliding_window"):
                assert layer.key.shape == (cfg.num_blocks, spec.block_size,
                                           spec.num_kv_heads, spec.head_size)
                assert (layer.key_scale is not None) == kv_dtype.endswith("token_head")
    # layers of one group never share bytes of one block
    buffer_of = {n: caches.tensor_buffers[i] for i, t in enumerate(cfg.kv_cache_tensors)
                 for n in t.shared_by}
    for group in cfg.kv_cache_groups:
        spans = {}
        for name in group.layer_names:
            raw = caches[name].raw
            start = raw.storage_offset() + raw.stride(0)  # block 1
            spans.setdefault(buffer_of[name], []).append((start, start + raw.shape[1]))
        for items in spans.values():
            items.sort()
            assert all(a[1] <= b[0] for a, b in zip(items, items[1:]))


@pytest.mark.parametrize(("model", "layout"), [
    ("llama-3.1-8b", None), ("gemma-2-2b-it", None), ("gemma-2-2b-it", "BLHNC"),
])
def test_num_blocks_override_allocates_only_what_the_views_need(model, layout):
    """Issue 13 item 11: ``num_blocks=8`` on a 40 GiB plan allocates 8 blocks' bytes per
    buffer, not the plan's sizes (the process was killed for memory)."""
    import kvcore

    options = {"kv_cache_layout": layout} if layout else {}
    cfg = kvcore.plan_model(model, kv_cache_memory_bytes=40 << 30, max_model_len=4096,
                            **options)
    assert sum(t.size for t in cfg.kv_cache_tensors) > 20 << 30
    caches = allocate_tensors(cfg, "meta", num_blocks=8)
    if layout == "BLHNC":  # one buffer of 8 block spans
        assert caches.total_bytes == 8 * cfg.kv_cache_tensors[0].block_stride
    else:  # each layer-outermost buffer: 8 pages of its largest layer page
        want = sum(max(_page(cfg, n) for n in t.shared_by) * 8
                   for t in cfg.kv_cache_tensors)
        assert caches.total_bytes == want
    for i, t in enumerate(cfg.kv_cache_tensors):
        buf = caches.buffers[caches.tensor_buffers[i]]
        for name in t.shared_by:
            assert caches[name].raw.shape[0] == 8
            assert _extent(caches[name].raw)[1] <= buf.numel()


def _page(cfg, name):
    for g in cfg.kv_cache_groups:
        if name in g.layer_names:
            return g.spec_of(name).page_size_bytes
    raise AssertionError(name)
