"""A shadow of what a Mamba layer's kernels read and write, for the runtime safety
tests (issue 13).  Importable by other suites: ``MambaShadow`` follows one
:class:`~kvcore_mamba.manager.MambaManager` group through a driver's calls.

The kernel contract it models is the one in :mod:`kvcore_mamba.manager`'s docstring:

* a step ``[C, M)`` reads the state after ``C`` tokens from the read block (the running
  block before the allocation, or a new request's hit block);
* after the step ran and ``a`` tokens were accepted (``a = M - C`` without drafts), the
  running block holds the state after ``C + a`` (the runner moved the accepted column
  into it), and in ``all`` mode each boundary block the manager gave the step (a real
  block between the read and the running block) holds its boundary's state;
  speculative blocks hold nothing reusable.

A state is the tuple of the tokens it has consumed.  ``check_*`` raise AssertionError
with the request, block and what was expected.
"""

from __future__ import annotations

from typing import Any

JUNK = ("junk",)


class MambaShadow:
    """What each block of one Mamba group holds, as the kernels would have left it."""

    def __init__(self, mgr: Any, gid: int) -> None:
        self.mgr = mgr
        self.gid = gid
        self.m = mgr.managers[gid]
        self.bs = self.m.block_size
        #: block id -> state (tuple of tokens) the block holds
        self.state: dict[int, tuple[int, ...]] = {}
        self._step: dict[str, tuple[int, int, list[int], int, list[int]]] = {}

    # ---- the step -------------------------------------------------------------------
    def before(self, req: Any, num_computed: int, hit_blocks: Any = None) -> None:
        """Record the read block before allocate_slots (``num_computed`` includes a hit
        of ``hit_blocks``, the KVCacheBlocks from get_computed_blocks)."""
        rid = req.request_id
        table = self.m.get_blocks(rid)
        read = self.m.state_block(rid) if table else None
        if read is None and hit_blocks is not None and hit_blocks.blocks[self.gid]:
            read = hit_blocks.blocks[self.gid][-1]
        self._read = (rid, read.block_id if read is not None else None, num_computed)

    def after_allocate(self, req: Any, num_computed: int, num_main: int) -> None:
        """Checks right after a successful allocate_slots of ``[num_computed,
        num_main)``: the read block still held and holding the state after
        ``num_computed``; every block the step writes is real, held only by this
        request and not in any other table."""
        rid = req.request_id
        m = self.m
        table = m.get_blocks(rid)
        rid0, read_id, c = self._read
        assert rid0 == rid
        toks = tuple(req.all_token_ids)
        if c > 0:
            # the state the step starts from
            read = next((b for b in table if not b.is_null and b.block_id == read_id),
                        None)
            assert read is not None, (f"{rid}: read block {read_id} (state after {c}) "
                                      f"left the table {[b.block_id for b in table]}")
            assert read.ref_cnt >= 1, f"{rid}: read block {read_id} was freed"
            assert self.state.get(read_id) == toks[:c], (
                f"{rid}: read block {read_id} holds the state after "
                f"{len(self.state.get(read_id, JUNK))} tokens, expected {c}")
        writes = self._columns(rid, table)
        assert writes and all(not b.is_null for b in writes), (
            f"{rid}: a state column is the null block: {[b.block_id for b in writes]}")
        running = writes[0]
        if m.mode != "none":
            want = -(-max(num_main, 1) // self.bs) - 1
            idx = next(i for i, b in enumerate(table) if b is running)
            assert idx >= want, f"{rid}: running block at {idx}, step ends in block {want}"
        boundary = []
        if m.mode == "all":
            ri = table.index(running)
            lo = next((i for i, b in enumerate(table) if b.block_id == read_id), -1) \
                if read_id is not None else -1
            boundary = [b.block_id for b in table[lo + 1:ri] if not b.is_null]
        for b in writes + [x for x in table if x.block_id in boundary]:
            assert b.ref_cnt == 1, (f"{rid}: block {b.block_id} is written this step but "
                                    f"has ref_cnt {b.ref_cnt} (shared)")
            assert b.block_hash is None, (f"{rid}: block {b.block_id} is written this step "
                                          f"but is already published")
        self._check_exclusive(rid, [b.block_id for b in writes] + boundary)
        self._step[rid] = (c, num_main, boundary, running.block_id,
                           [b.block_id for b in writes[1:]])

    def ran(self, req: Any, accepted: int) -> None:
        """The step ran and ``accepted`` tokens were kept: apply the kernel's writes.
        Call after the engine appended the accepted tokens, before the next step."""
        rid = req.request_id
        c, num_main, boundary, running, spec = self._step.pop(rid)
        toks = tuple(req.all_token_ids)
        for bid in spec:
            self.state[bid] = JUNK
        self.state[running] = toks[:c + accepted]
        table = self.m.get_blocks(rid)
        for b in table:
            if b.block_id in boundary:
                i = table.index(b)
                self.state[b.block_id] = toks[:(i + 1) * self.bs]

    def dropped(self, req: Any) -> None:
        """The scheduled step did not run (the request was freed or preempted first)."""
        self._step.pop(req.request_id, None)

    def _columns(self, rid: str, table: list[Any]) -> list[Any]:
        """[running block, speculative blocks] (the manager's ``state_blocks``)."""
        if hasattr(self.m, "state_blocks"):
            return list(self.m.state_blocks(rid))
        sb = self.m.state_block(rid)
        i = next(i for i, b in enumerate(table) if b is sb)
        return list(table[i:i + 1 + self.m.num_spec])

    # ---- checks -----------------------------------------------------------------------
    def _check_exclusive(self, rid: str, ids: list[int]) -> None:
        for g, mgr in enumerate(self.mgr.managers):
            for other, table in mgr.req_to_blocks.items():
                if g == self.gid and other == rid:
                    continue
                clash = {b.block_id for b in table if not b.is_null} & set(ids)
                assert not clash, (f"{rid}: blocks {sorted(clash)} written this step are "
                                   f"also in group {g}'s table of {other!r}")

    def check_published(self) -> None:
        """Every block in this group's prefix cache holds exactly the state its hash
        claims: the state after its boundary's tokens."""
        for h, b in self.mgr.block_pool.cached[self.gid].items():
            held = self.state.get(b.block_id)
            want = self._claims.get(h)
            assert want is not None and held == want, (
                f"published block {b.block_id} holds the state after "
                f"{None if held is None else len(held)} tokens, its hash claims "
                f"{None if want is None else len(want)}")

    def check_hit(self, req: Any, blocks: Any, n: int) -> None:
        """A hit of ``n`` tokens resumes from the state after exactly those tokens."""
        if not n or self.m.mode == "none":
            return
        mb = blocks.blocks[self.gid]
        assert len(mb) == n // self.bs and all(b.is_null for b in mb[:-1])
        assert self.state.get(mb[-1].block_id) == tuple(req.all_token_ids)[:n], (
            f"{req.request_id}: hit of {n} tokens resumes from block {mb[-1].block_id} "
            f"holding {len(self.state.get(mb[-1].block_id, JUNK))} tokens' state")

    # hash -> the tokens a block under that hash must have consumed
    _claims: dict[bytes, tuple[int, ...]]

    def learn_hashes(self, req: Any) -> None:
        """Remember what each of the request's block hashes stands for."""
        if not hasattr(self, "_claims"):
            self._claims = {}
        stride = self.m.hash_stride
        toks = tuple(req.all_token_ids)
        hashes = req.block_hashes
        for i in range(len(hashes) // stride):
            self._claims[hashes[(i + 1) * stride - 1]] = toks[:(i + 1) * self.bs]
