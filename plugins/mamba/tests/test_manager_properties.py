"""Property test of MambaManager: random prompts sharing prefixes, random chunking,
decode steps and speculative blocks.  A model of what the kernels write (the state after
n tokens goes into the running block; in ``all`` mode also each crossed boundary's state
into that position's block) checks that every prefix hit resumes from the state of
exactly the hit length, and that blocks are conserved."""

from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_mamba.manager import align_prefill_chunk
from kvcore_mamba.spec import MambaSpec

from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
from kvcore.runtime import KVCacheManager
from kvcore.specs import FullAttentionSpec

BS = 4


def make(mode, spec_blocks, num_blocks):
    attn = FullAttentionSpec(block_size=BS, num_kv_heads=1, head_size=8)
    mamba = MambaSpec(block_size=BS, shapes=((2, 8),), dtypes=("float32",),
                      mamba_cache_mode=mode, num_speculative_blocks=spec_blocks)
    cfg = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=(),
                        kv_cache_groups=(KVCacheGroupSpec(("a",), attn),
                                         KVCacheGroupSpec(("m",), mamba)),
                        max_model_len=512)
    return KVCacheManager(cfg, max_model_len=512)


@settings(max_examples=40, deadline=None)
@given(mode=st.sampled_from(["align", "all"]), spec_blocks=st.integers(0, 2),
       data=st.data())
def test_hits_resume_from_the_right_state(mode, spec_blocks, data):
    mgr = make(mode, spec_blocks, num_blocks=400)
    m = mgr.managers[1]
    state_at: dict[int, int] = {}  # block id -> tokens its state covers
    base = data.draw(st.lists(st.integers(0, 3), min_size=40, max_size=40))
    for k in range(data.draw(st.integers(2, 5))):
        shared = data.draw(st.integers(0, 40))
        length = data.draw(st.integers(shared + 1, 48))
        prompt = base[:shared] + [100 + k * 100 + j for j in range(length - shared)]
        req = mgr.make_request(f"r{k}", prompt)
        blocks, hit = mgr.get_computed_blocks(req)
        assert hit % BS == 0 and hit <= length - 1
        if hit:
            mb = blocks.blocks[1]
            assert len(mb) == hit // BS and all(b.is_null for b in mb[:-1])
            assert state_at[mb[-1].block_id] == hit  # resumes from the state at `hit`
        done, first = hit, True
        budget = data.draw(st.integers(1, 12))
        decode = data.draw(st.integers(0, 6))
        while done < length + decode:
            if done >= length:  # decode one token
                req.append_output_token_ids(7)
            total = len(req.all_token_ids)
            n = min(budget, total - done)
            if mode == "align" and done < length:
                n = align_prefill_chunk(done, n, length, BS)
            kw = dict(num_new_computed_tokens=hit, new_computed_blocks=blocks) if first \
                else {}
            out = mgr.allocate_slots(req, n, num_lookahead_tokens=spec_blocks, **kw)
            assert out is not None
            first = False
            table = m.get_blocks(req.request_id)
            end = done + n
            if mode == "all":
                for b in range((done // BS + 1) * BS, end + 1, BS):
                    state_at[table[b // BS - 1].block_id] = b
            running = m.state_block(req.request_id)
            assert running is not None and not running.is_null
            state_at[running.block_id] = end
            real = [b for b in table if not b.is_null]
            if mode == "align":
                assert len(real) <= 2 + spec_blocks
            assert len(set(id(b) for b in real)) == len(real)
            done = end
            req.num_computed_tokens = done
        if data.draw(st.booleans()) or k % 2:
            mgr.free(req)
    for rid in list(m.running_request_ids()):
        mgr.free(rid)
    assert mgr.usage == 0.0
