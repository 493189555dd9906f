"""The runtime invariant as a reference model (issue 13): a shadow of what every layer's
kernel reads and writes, checked after every runtime call.

The invariant
=============
After every ``allocate_slots``, ``free``, ``get_computed_blocks`` + admission,
``reset_prefix_cache`` and preemption, for every live request and every layer: every
token position (or recurrent state) that the layer's kernel reads or writes in the step
just allocated lies in a block that

(a) is not the null block,
(b) is held by this request (``ref_cnt >= 1``, in this request's table),
(c) holds exactly those tokens (same hash chain), and, for a state layer, holds the
    state after exactly the position its hash claims.

How the model works
===================
:class:`World` owns a :class:`~kvcore.runtime.KVCacheManager`, a *shadow memory* (what
each block id holds, as the kernels would have written it) and one :class:`Shadow` per
KV-cache group.  Memory is keyed by block id alone, since layers of different groups
share buffers (a block id is in one group at a time, so a block that moves to another
group is overwritten there).

* A token's K/V is identified by its **prefix key**: ``key[p] = hash((key[p - 1],
  token[p]))``, so two slots hold the same K/V iff the prefixes up to them are equal
  (exactly what a chained block hash claims).  A draft token's key is built the same
  way from the draft, so a rejected draft leaves a key no real prefix has.
* An attention block is a list of ``block_size`` slot keys; a state block is a tuple
  ``("S", pos, key[pos - 1])`` (the state after ``pos`` tokens of that prefix).
* :meth:`World.step` is one scheduled step of one request: it calls the runtime, then
  every group's shadow runs "the kernel": :meth:`Shadow.pre_check` (what it reads before
  writing, e.g. the initial state), :meth:`Shadow.run` (checks every write target and
  writes shadow memory), and the step stays *pending* until the request's next
  allocation; :meth:`Shadow.check` re-checks a pending step after every later call
  (the model runs after the whole scheduler step, so blocks a step reads must survive
  everything else done in that step; the model is applied at once here, which only
  checks more).
* Pool consistency (:meth:`KVCacheManager.check_consistency`) runs after every call.

A violation is recorded (:attr:`World.violations`, with the call count, plan and
message) instead of raised, so the driver can count them; tests assert there are none.

Adding a kind's shadow
======================
Subclass :class:`Shadow` (or :class:`AttentionShadow` for K/V per token, overriding
:meth:`AttentionShadow.read_ranges`) and register it::

    from invariant import AttentionShadow, register_shadow

    class MyShadow(AttentionShadow):
        def read_ranges(self, ctx):          # token positions the queries read
            return [(max(0, ctx.c - 7), ctx.c + ctx.n)]

    register_shadow("my_kind", MyShadow)

A shadow gets ``(world, group_id, group, manager)``; per step it gets a
:class:`StepContext` (table, computed tokens before the step ``c``, new tokens ``n``,
lookahead ``L``, the keys the step's inputs carry, the computed tokens after the step
``c_next``, the request's true keys, prompt and encoder lengths).  Report faults with
``self.bad(ctx, what)``; use ``self.check_slots`` / ``self.check_held`` for the common
checks.  Hooks, in the order a step calls them: ``pre_check`` (reads the step's own
writes may overwrite), ``run`` (check each write target, write ``world.mem``),
``after`` (remember what the next step reads, e.g. the block holding a state);
``check`` re-checks a pending step after every later call; ``probe`` checks a lookup's
hit table (cached blocks) without admission.  A kind with no registered shadow makes
:class:`World` raise ``KeyError`` naming it.  Usage::

    world = World(cfg, max_model_len=128, num_spec=2, seed=0)
    world.run(20_000)                  # scheduler-like steps, checked after each call
    assert not world.violations

Kinds shipped here: full attention (MLA, TurboQuant, indexers), sinks,
sliding windows (per-layer windows of a packed group), local chunks, cross attention,
R-SWA, kpool tails and Mamba (``none`` / ``align`` / ``all``, speculative blocks).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvcore.errors import BlockPoolError
from kvcore.runtime import KVCacheManager

__all__ = ["World", "Shadow", "AttentionShadow", "StepContext", "Violation",
           "register_shadow", "shadow_class"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def chain(parent: int, tokens: Sequence[int]) -> list[int]:
    """Prefix keys of ``tokens`` following ``parent`` (the key before them)."""
    out = []
    for t in tokens:
        parent = hash((parent, t))
        out.append(parent)
    return out


ROOT = hash(("root",))


@dataclass
class Violation:
    op: int
    plan: str
    request: str
    group: int
    kind: str
    message: str

    def __str__(self) -> str:
        return (f"[{self.plan} op {self.op}] request {self.request} group {self.group} "
                f"({self.kind}): {self.message}")


@dataclass
class StepContext:
    """One scheduled step of one request, as every group's kernel sees it.

    ``c``: tokens computed before the step (hits included); ``n``: tokens computed in
    it; ``L``: lookahead slots; ``keys``: the key of every position ``< c + n`` that
    the step's inputs carry (true keys below ``c``, the inputs' keys from ``c`` on,
    drafts included); ``c_next``: computed tokens after verification; ``true_keys``:
    the request's real keys (at least ``c_next`` of them); ``tables``: per group, the
    request's block table (live lists of the manager)."""

    rid: str
    c: int
    n: int
    L: int
    keys: list[Any]
    c_next: int
    true_keys: list[int]
    prompt_len: int
    enc_len: int
    enc_id: Any
    first: bool
    hit: int = 0
    tables: list[list[Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


class Shadow:
    """What one group's kernels read and write (see the module docstring)."""

    def __init__(self, world: World, gid: int, group: Any, manager: Any) -> None:
        self.world = world
        self.gid = gid
        self.group = group
        self.manager = manager
        self.spec = group.spec
        self.kind = group.spec.kind
        self.bs: int = group.spec.block_size

    # ---- hooks -----------------------------------------------------------------------
    def pre_check(self, ctx: StepContext) -> None:
        """Reads that the step's own writes may overwrite (an initial state)."""

    def run(self, ctx: StepContext) -> None:
        """The kernel: check each write target, write shadow memory."""

    def check(self, ctx: StepContext) -> None:
        """Re-check a pending step (after any later call)."""

    def after(self, ctx: StepContext) -> None:
        """After every group ran the step (e.g. remember where a state went)."""

    def probe(self, ctx: StepContext, blocks: list[Any]) -> None:
        """A lookup of ``ctx.c`` hit tokens without admission: ``blocks`` is this
        group's hit table (cached blocks, not held); check their content."""

    # ---- helpers ---------------------------------------------------------------------
    def table(self, ctx: StepContext) -> list[Any]:
        return ctx.tables[self.gid]

    def bad(self, ctx: StepContext, what: str) -> None:
        self.world.violation(ctx.rid, self.gid, self.kind, what)

    def check_held(self, ctx: StepContext, idx: int, what: str) -> Any:
        """Table entry ``idx`` is a real block this request holds; returns it or None."""
        table = self.table(ctx)
        if idx < 0 or idx >= len(table):
            self.bad(ctx, f"{what}: table index {idx} outside the table (len "
                          f"{len(table)})")
            return None
        b = table[idx]
        if b.is_null:
            self.bad(ctx, f"{what}: table[{idx}] is the null block")
            return None
        if b.ref_cnt < 1:
            self.bad(ctx, f"{what}: table[{idx}] = block {b.block_id} has ref_cnt "
                          f"{b.ref_cnt} (freed while in use)")
            return None
        return b

    def check_slots(self, ctx: StepContext, lo: int, hi: int, keys: Sequence[Any],
                    what: str) -> None:
        """Positions ``[lo, hi)`` lie in held blocks whose slots carry ``keys[p]``."""
        if hi <= lo:
            return
        bs = self.bs
        mem = self.world.mem
        for i in range(lo // bs, (hi - 1) // bs + 1):
            b = self.check_held(ctx, i, what)
            if b is None:
                return
            s = max(lo, i * bs)
            e = min(hi, (i + 1) * bs)
            m = mem.get(b.block_id)
            if type(m) is not list or m[s - i * bs:e - i * bs] != keys[s:e]:
                got = "a state" if type(m) is tuple else "other tokens"
                self.bad(ctx, f"{what}: block {b.block_id} (table[{i}]) holds {got} at "
                              f"positions {s}..{e - 1}, not this request's")
                return

    def write_slots(self, ctx: StepContext, lo: int, hi: int, keys: Sequence[Any],
                    what: str) -> None:
        """The kernel writes positions ``[lo, hi)`` (checking every target)."""
        bs = self.bs
        mem = self.world.mem
        for i in range(lo // bs, (hi - 1) // bs + 1) if hi > lo else ():
            b = self.check_held(ctx, i, what)
            if b is None:
                return
            m = mem.get(b.block_id)
            if type(m) is not list:
                m = mem[b.block_id] = [None] * bs
            s = max(lo, i * bs)
            e = min(hi, (i + 1) * bs)
            new = list(keys[s:e])
            if b.ref_cnt > 1 and m[s - i * bs:e - i * bs] != new:
                self.bad(ctx, f"{what}: writes block {b.block_id} (table[{i}]) that "
                              f"{b.ref_cnt - 1} other holder(s) read, with other content")
            m[s - i * bs:e - i * bs] = new


class AttentionShadow(Shadow):
    """K/V per token: the step writes ``[c, c + n)``, its queries read
    :meth:`read_ranges`, and the lookahead slots ``[c + n, c + n + L)`` must be
    allocated to the request (they are written at the next step)."""

    def read_ranges(self, ctx: StepContext) -> list[tuple[int, int]]:
        """Token positions the step's queries ``c .. c + n - 1`` read (full attention:
        everything before them)."""
        return [(0, ctx.c + ctx.n)]

    def run(self, ctx: StepContext) -> None:
        self.write_slots(ctx, ctx.c, ctx.c + ctx.n, ctx.keys, "write")
        self.check(ctx)

    def probe(self, ctx: StepContext, blocks: list[Any]) -> None:
        bs = self.bs
        for lo, hi in self.read_ranges(ctx):
            lo, hi = max(lo, 0), min(hi, ctx.c)
            for i in range(lo // bs, _cdiv(hi, bs)) if hi > lo else ():
                if i >= len(blocks) or blocks[i].is_null:
                    self.bad(ctx, f"hit of {ctx.c} tokens: table[{i}] is missing or "
                                  f"null although position {max(lo, i * bs)} is read")
                    return
                m = self.world.mem.get(blocks[i].block_id)
                s, e = max(lo, i * bs), min(hi, (i + 1) * bs)
                if type(m) is not list or m[s - i * bs:e - i * bs] != ctx.keys[s:e]:
                    self.bad(ctx, f"hit of {ctx.c} tokens: block {blocks[i].block_id} "
                                  f"(table[{i}]) holds other tokens")
                    return

    def check(self, ctx: StepContext) -> None:
        for lo, hi in self.read_ranges(ctx):
            self.check_slots(ctx, max(lo, 0), hi, ctx.keys, f"read {lo}..{hi - 1}")
        if ctx.L:
            end = ctx.c + ctx.n
            for i in range(end // self.bs, (end + ctx.L - 1) // self.bs + 1):
                self.check_held(ctx, i, "lookahead slot")


class FullShadow(AttentionShadow):
    pass


class SinkShadow(FullShadow):
    """Full attention plus the sink blocks every request reads."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        for b in getattr(self.manager, "sink_blocks", ()):
            self.world.mem[b.block_id] = ("sink",)

    def check(self, ctx: StepContext) -> None:
        super().check(ctx)
        for b in getattr(self.manager, "sink_blocks", ()):
            if b.is_null or b.ref_cnt < 1 or self.world.mem.get(b.block_id) != ("sink",):
                self.bad(ctx, f"sink block {b.block_id} was freed or overwritten")


class SlidingShadow(AttentionShadow):
    """Query ``q`` reads ``[q - w + 1, q]`` for each layer's own window ``w`` (a packed
    group's layers keep their windows in ``layer_specs``)."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        specs = self.group.layer_specs or (self.spec,)
        self.windows = sorted({s.sliding_window for s in specs})

    def read_ranges(self, ctx: StepContext) -> list[tuple[int, int]]:
        w = self.windows[-1]
        return [(max(0, ctx.c - w + 1), ctx.c + ctx.n)]


class ChunkedShadow(AttentionShadow):
    """Query ``q`` reads ``[q // C * C, q]`` (local chunks of ``C`` tokens)."""

    def read_ranges(self, ctx: StepContext) -> list[tuple[int, int]]:
        specs = self.group.layer_specs or (self.spec,)
        lo = min(ctx.c // s.attention_chunk_size * s.attention_chunk_size for s in specs)
        return [(lo, ctx.c + ctx.n)]


class RSWAShadow(AttentionShadow):
    """R-SWA: a query sees every prompt token and the last ``rswa_window`` others."""

    def read_ranges(self, ctx: StepContext) -> list[tuple[int, int]]:
        p, end = ctx.prompt_len, ctx.c + ctx.n
        w = self.spec.rswa_window
        return [(0, min(p, end)), (max(p, ctx.c - w + 1), end)]


class CrossShadow(Shadow):
    """Cross attention: the encoder output, ``enc_len`` positions, written at the
    request's first step after admission and read by every step."""

    def _keys(self, ctx: StepContext) -> list[Any]:
        return [(ctx.enc_id, p) for p in range(ctx.enc_len)]

    def run(self, ctx: StepContext) -> None:
        if ctx.first and ctx.enc_len:
            self.write_slots(ctx, 0, ctx.enc_len, self._keys(ctx), "encoder write")
        self.check(ctx)

    def check(self, ctx: StepContext) -> None:
        if ctx.enc_len:
            keys = ctx.extra.get("enc_keys")
            if keys is None:
                keys = ctx.extra["enc_keys"] = self._keys(ctx)
            self.check_slots(ctx, 0, ctx.enc_len, keys, "encoder read")


class KPoolShadow(Shadow):
    """A ring of ``ring_size`` slots in the request's one block: position ``p`` in slot
    ``p % ring_size``; a step reads the incomplete pool before it (``[c // kpool *
    kpool, c)``) and writes its tokens (the last ``ring_size`` of them survive)."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.ring = self.spec.ring_size
        self.kpool = self.spec.kpool

    def _ring(self, ctx: StepContext) -> Any:
        b = self.check_held(ctx, 0, "ring block")
        if b is None:
            return None, None
        m = self.world.mem.get(b.block_id)
        if type(m) is not list or len(m) != self.ring:
            m = None
        return b, m

    def _check_range(self, ctx: StepContext, lo: int, hi: int, what: str) -> None:
        b, m = self._ring(ctx)
        if b is None or hi <= lo:
            return
        r = self.ring
        if m is None or any(m[p % r] != ctx.keys[p] for p in range(lo, hi)):
            self.bad(ctx, f"{what}: ring block {b.block_id} lost positions {lo}..{hi - 1}")

    def pre_check(self, ctx: StepContext) -> None:
        self._check_range(ctx, ctx.c // self.kpool * self.kpool, ctx.c, "pool read")

    def run(self, ctx: StepContext) -> None:
        b, m = self._ring(ctx)
        if b is None:
            return
        if m is None:
            m = self.world.mem[b.block_id] = [None] * self.ring
        if b.ref_cnt > 1:
            self.bad(ctx, f"ring block {b.block_id} is shared ({b.ref_cnt} holders)")
        r = self.ring
        for p in range(max(ctx.c, ctx.c + ctx.n - r), ctx.c + ctx.n):
            m[p % r] = ctx.keys[p]
        self.check(ctx)

    def check(self, ctx: StepContext) -> None:
        end = ctx.c + ctx.n
        self._check_range(ctx, max(ctx.c // self.kpool * self.kpool, end - self.ring),
                          end, "ring")


class MambaShadow(Shadow):
    """A recurrent state per request, as kvcore-mamba's manager documents it
    (:mod:`kvcore_mamba.manager`: "What a state layer reads and writes in one step").

    A step computes tokens ``[C, M)``.  The *columns* are ``[running block, S
    speculative blocks]``: the running block is table index ``cdiv(M, block_size) - 1``
    (``align`` / ``all``; never moved back, so after rejected drafts it may stay one
    block ahead) or 0 (``none``), the speculative blocks follow it (``none``: indices
    1..S).

    * **reads** the state after ``C``: where the previous step left the accepted state
      (its column ``a`` after ``a`` accepted drafts, the running block after a step
      without drafts), or for a new request the last block of its hit (index ``C /
      block_size - 1``), which must hold the state after ``C`` of this prefix;
    * **writes**, in a step with ``k`` drafts, the state after ``C + j`` into column
      ``j - 1`` (``j = 1 .. 1 + k``; a rejected draft's state carries the draft's key);
      in a step without drafts the state after ``M`` into the running block and, in
      ``all`` mode, the state at each block boundary ``b`` with ``C < b < M`` that the
      SSM kernel materialises (``b`` and ``b - C`` multiples of ``mamba_chunk_size``)
      into block ``b / block_size - 1``; no other boundary block is written;
    * a hit of ``h`` tokens (admission or lookup) reads block ``h / block_size - 1``,
      which must hold the state after ``h`` with this prefix (so a published block
      always holds the state at its own boundary).
    """

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.mode = getattr(self.spec, "mamba_cache_mode", "none")
        self.S = int(getattr(self.spec, "num_speculative_blocks", 0) or 0)
        self.chunk = getattr(self.spec, "mamba_chunk_size", None)

    def _columns(self, ctx: StepContext) -> list[int]:
        if self.mode == "none":
            return list(range(0, 1 + self.S))
        run = max(_cdiv(ctx.c + ctx.n, self.bs) - 1, 0)
        prev = ctx.extra.get(("run", self.gid))
        if prev is not None and prev > run:  # never moved back (after rejected drafts)
            run = prev
        return list(range(run, run + 1 + self.S))

    @staticmethod
    def _state(pos: int, keys: Sequence[Any]) -> tuple:
        return ("S", pos, keys[pos - 1] if pos > 0 else ROOT)

    @staticmethod
    def _describe(got: Any) -> str:
        return f"the state after {got[1]}" if type(got) is tuple and len(got) == 3 \
            else "no state"

    def pre_check(self, ctx: StepContext) -> None:
        if ctx.c == 0:
            return
        prev = ctx.extra.get(("state_loc", self.gid))
        if prev is None:  # first step after a hit of c tokens
            if self.mode == "none" or ctx.c % self.bs:
                self.bad(ctx, f"resumes at {ctx.c} tokens without a state (hit not on a "
                              f"block boundary of block_size {self.bs})")
                return
            loc = ctx.c // self.bs - 1
        else:
            # the runner reads the block the previous step left the state in (the
            # manager may have moved it in the table: speculative blocks relocate)
            table = self.table(ctx)
            loc = next((i for i, b in enumerate(table) if b is prev), -1)
            if loc < 0:
                self.bad(ctx, f"initial state (after {ctx.c}): block {prev.block_id}, "
                              f"where the previous step left it, is no longer in the "
                              f"table (ref_cnt {prev.ref_cnt})")
                return
        b = self.check_held(ctx, loc, f"initial state (after {ctx.c})")
        if b is None:
            return
        got = self.world.mem.get(b.block_id)
        if got != self._state(ctx.c, ctx.true_keys):
            self.bad(ctx, f"initial state: block {b.block_id} (table[{loc}]) holds "
                          f"{self._describe(got)}, not the state after {ctx.c} of this "
                          f"prefix")

    def _write(self, ctx: StepContext, idx: int, value: tuple, what: str) -> None:
        b = self.check_held(ctx, idx, what)
        if b is None:
            return
        if b.ref_cnt > 1 and self.world.mem.get(b.block_id) != value:
            self.bad(ctx, f"{what}: writes block {b.block_id} (table[{idx}]) that "
                          f"{b.ref_cnt - 1} other holder(s) share")
        self.world.mem[b.block_id] = value
        ctx.extra.setdefault(("written", self.gid), []).append((b, value, what))

    def run(self, ctx: StepContext) -> None:
        c, end = ctx.c, ctx.c + ctx.n
        ctx.extra[("written", self.gid)] = []
        cols = self._columns(ctx)
        ctx.extra[("run", self.gid)] = cols[0]
        k = ctx.extra.get("drafts", 0)
        if k:
            for j in range(1, ctx.n + 1):
                self._write(ctx, cols[j - 1], self._state(c + j, ctx.keys),
                            f"state after {c + j} (column {j - 1})")
            loc = cols[ctx.c_next - c - 1]
        else:
            if self.mode == "all" and self.chunk:
                ch = self.chunk
                for b in range((c // self.bs + 1) * self.bs, end, self.bs):
                    if b % ch == 0 and (b - c) % ch == 0:
                        self._write(ctx, b // self.bs - 1, self._state(b, ctx.keys),
                                    f"boundary state {b}")
            self._write(ctx, cols[0], self._state(end, ctx.keys),
                        f"running state (after {end})")
            loc = cols[0]
        ctx.extra[("next_loc", self.gid)] = loc
        self.check(ctx)

    def after(self, ctx: StepContext) -> None:
        loc = ctx.extra.get(("next_loc", self.gid))
        table = self.table(ctx)
        ctx.extra[("state_loc", self.gid)] = table[loc] if loc is not None and \
            loc < len(table) else None

    def check(self, ctx: StepContext) -> None:
        mem = self.world.mem
        for blk, value, what in ctx.extra.get(("written", self.gid), ()):
            if blk.ref_cnt < 1 or mem.get(blk.block_id) != value:
                self.bad(ctx, f"{what}: block {blk.block_id} was freed or overwritten "
                              f"before the step's states were read")
        if ctx.extra.get(("written", self.gid)):
            for idx in self._columns(ctx)[1:]:
                self.check_held(ctx, idx, "speculative block")

    def probe(self, ctx: StepContext, blocks: list[Any]) -> None:
        if self.mode == "none":
            return
        i = ctx.c // self.bs - 1
        if ctx.c % self.bs or i >= len(blocks) or blocks[i].is_null:
            self.bad(ctx, f"hit of {ctx.c} tokens: no state block at table[{i}]")
            return
        got = self.world.mem.get(blocks[i].block_id)
        if got != self._state(ctx.c, ctx.keys):
            self.bad(ctx, f"hit of {ctx.c} tokens: block {blocks[i].block_id} holds "
                          f"{self._describe(got)}, not the state after {ctx.c} of this "
                          f"prefix")


_SHADOWS: dict[str, type[Shadow]] = {
    "full_attention": FullShadow,
    "mla_attention": FullShadow,
    "mla_indexer": FullShadow,
    "hidden_state_cache": FullShadow,
    "turboquant_full_attention": FullShadow,
    "sink_full_attention": SinkShadow,
    "sliding_window": SlidingShadow,
    "sliding_window_mla": SlidingShadow,
    "chunked_local_attention": ChunkedShadow,
    "cross_attention": CrossShadow,
    "rswa": RSWAShadow,
    "kpool_tail": KPoolShadow,
    "mamba": MambaShadow,
}


def register_shadow(kind: str, cls: type[Shadow]) -> None:
    """Use ``cls`` as the shadow of groups of ``kind``."""
    _SHADOWS[kind] = cls


def shadow_class(kind: str) -> type[Shadow]:
    try:
        return _SHADOWS[kind]
    except KeyError:
        raise KeyError(f"no shadow for kind {kind!r}: register one with "
                       f"register_shadow (see tests/runtime/invariant.py)") from None


# ---- the world: requests, scheduler-like driver, checks ---------------------------
@dataclass
class ShadowRequest:
    req: Any
    base: str  # the request's name (a resumed request keeps it)
    true_keys: list[int]
    max_tokens: int
    enc_len: int = 0
    first_alloc_done: bool = False
    step: StepContext | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    admitted: bool = False
    #: the key before token 0: the decoder's K/V depends on the encoder input, so a
    #: request with one starts from its audio's identity (a fresh key when it has
    #: none): a hit across audio then holds foreign K/V, which the shadows report
    root: int = ROOT


class World:
    """A manager, its shadows, live requests and the check after every call.

    Parameters: ``cfg`` a KVCacheConfig; ``max_model_len``; ``num_spec`` speculative
    tokens (lookahead after a request's first allocation, drafts per decode step);
    ``manager_kw`` passed to :class:`KVCacheManager`; ``name`` for reports; ``seed``.
    """

    def __init__(self, cfg: Any, *, max_model_len: int, num_spec: int = 0,
                 name: str = "plan", seed: int = 0, max_enc: int = 0,
                 token_budget: int = 48, **manager_kw: Any) -> None:
        self.name = name
        self.rng = random.Random(seed)
        self.max_model_len = max_model_len
        self.num_spec = num_spec
        self.max_enc = max_enc
        self.token_budget = token_budget
        # the world records faults itself (the debug switch would raise at the first)
        manager_kw.setdefault("check_invariants", False)
        try:
            self.mgr = KVCacheManager(cfg, max_model_len=max_model_len, **manager_kw)
        except TypeError:  # a runtime without the debug switch (an older kvcore)
            manager_kw.pop("check_invariants")
            self.mgr = KVCacheManager(cfg, max_model_len=max_model_len, **manager_kw)
        self._consistency = getattr(self.mgr, "check_consistency", None)
        self.mem: dict[int, Any] = {}
        self.shadows: list[Shadow] = [
            shadow_class(g.spec.kind)(self, gid, g, m)
            for gid, (g, m) in enumerate(zip(cfg.kv_cache_groups, self.mgr.managers))]
        self.running: dict[str, ShadowRequest] = {}
        self.waiting: list[ShadowRequest] = []
        self.violations: list[Violation] = []
        self._seen: set[tuple[str, int, str]] = set()
        self.ops = 0
        self.failed_allocs = 0
        self.refused = 0
        self.hits = 0
        self._garbage = 0
        self._counter = 0
        self.prefixes = [[self.rng.randrange(1, 50) for _ in range(self.rng.randrange(
            4, max(5, max_model_len // 3)))] for _ in range(4)]

    # ---- bookkeeping -------------------------------------------------------------
    def next_garbage(self) -> int:
        self._garbage += 1
        return self._garbage

    def violation(self, rid: str, gid: int, kind: str, message: str) -> None:
        """Record a fault once (a pending step re-checked after every call would report
        it again)."""
        key = (rid, gid, re.sub(r"\d+", "#", message))
        if key in self._seen:
            return
        self._seen.add(key)
        if len(self.violations) < 10000:
            self.violations.append(Violation(self.ops, self.name, rid, gid, kind,
                                             message))

    def true_token(self, sr: ShadowRequest, pos: int) -> int:
        """The request's real token at ``pos`` (the model's deterministic output)."""
        return hash((sr.base, pos)) % 50 + 1

    def _tables(self, rid: str) -> list[list[Any]]:
        return [m.req_to_blocks.get(rid, []) for m in self.mgr.managers]

    def _call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """One runtime call, counted, then every check."""
        self.ops += 1
        try:
            out = fn(*args, **kw)
        except BlockPoolError as e:
            self.violation("-", -1, "pool", f"{fn.__name__} raised {e}")
            raise
        return out

    def check_all(self) -> None:
        """The invariant for every live request, and pool consistency."""
        try:
            if self._consistency is not None:
                self._consistency()
        except BlockPoolError as e:
            self.violation("-", -1, "pool", str(e))
        for sr in self.running.values():
            ctx = sr.step
            if ctx is None:
                continue
            ctx.tables = self._tables(ctx.rid)
            for sh in self.shadows:
                sh.check(ctx)

    # ---- operations --------------------------------------------------------------
    def new_request(self) -> ShadowRequest:
        self._counter += 1
        rng = self.rng
        prefix = rng.choice(self.prefixes + [[]])
        cut = rng.randrange(0, len(prefix) + 1) if prefix else 0
        tail = [rng.randrange(1, 50) for _ in range(rng.randrange(1, 12))]
        toks = (prefix[:cut] + tail)[:self.max_model_len - 1]
        if rng.random() < 0.04:  # prompts at the length limit (one past it: refused)
            want = max(1, self.max_model_len + rng.choice((-2, -1, 0, 1)))
            toks = (toks + [rng.randrange(1, 50) for _ in range(want)])[:want]
        enc = rng.randrange(0, self.max_enc + 1) if self.max_enc else 0
        if self.max_enc and rng.random() < 0.05:  # over the planned limit: refused
            enc = self.max_enc + rng.randrange(1, 20)
        name = f"r{self._counter}"
        # the encoder input: one of three audios (same audio, same prompt may hit), or
        # none identified (never hits)
        audio = rng.choice(["a0", "a1", "a2", None]) if enc else None
        req = self.mgr.make_request(name, toks, max_tokens=rng.randrange(1, 24),
                                    num_encoder_tokens=enc, encoder_id=audio)
        root = ROOT if not enc else hash(("root", audio, enc)) if audio is not None \
            else hash(("root", "unidentified", name))
        sr = ShadowRequest(req, name, chain(root, toks), req.max_tokens, enc, root=root)
        self.waiting.append(sr)
        return sr

    def _chunk(self, sr: ShadowRequest, c: int, remaining: int, hit: int) -> int:
        n = min(remaining, max(1, self.rng.randrange(1, self.token_budget + 1)))
        cap = getattr(self.mgr, "max_prefill_chunk_tokens", None)
        if cap is not None:
            n = cap(sr.req, n, hit)
        return max(1, min(n, remaining))

    def admit(self, sr: ShadowRequest) -> bool:
        """get_computed_blocks + allocate_slots for a waiting request (True: admitted)."""
        req = sr.req
        hit_blocks, hit = self._call(self.mgr.get_computed_blocks, req)
        self.check_all()
        remaining = req.num_tokens - hit
        n = self._chunk(sr, hit, remaining, hit)
        if self.max_enc and sr.enc_len > self.max_enc:
            self._refused(sr, n, hit, hit_blocks, layer="cross_attention",
                          why=f"encoder length {sr.enc_len} over the planned "
                              f"{self.max_enc}")
            return True
        if req.num_tokens > self.max_model_len:  # past the limit (fresh or re-admitted)
            # vLLM's rule: only lookahead slots are capped at max_model_len
            self._refused(sr, remaining, hit, hit_blocks, layer="max_model_len",
                          why=f"{sr.req.num_tokens} tokens over max_model_len "
                              f"{self.max_model_len}")
            return True
        out = self._call(self.mgr.allocate_slots, req, n, hit, hit_blocks,
                         num_lookahead_tokens=0,
                         full_sequence_must_fit=self.rng.random() < 0.25)
        if out is None:
            self.failed_allocs += 1
            self.check_all()
            return False
        self.hits += hit
        self.waiting.remove(sr)
        self.running[req.request_id] = sr
        self._after_alloc(sr, hit, n, 0, first=True, hit=hit)
        return True

    def _refused(self, sr: ShadowRequest, n: int, hit: int, hit_blocks: Any, *,
                 layer: str, why: str) -> None:
        """A request the plan cannot serve (``why``: what was over its limit):
        RequestError, nothing changed."""
        from kvcore.errors import RequestError

        before = (self.mgr.num_free_blocks, self.mgr.get_block_ids(sr.req))
        try:
            self._call(self.mgr.allocate_slots, sr.req, n, hit, hit_blocks)
        except RequestError:
            self.refused += 1
        else:
            self.violation(sr.base, -1, layer, f"{why} was admitted")
            self._call(self.mgr.free, sr.req)
        if (self.mgr.num_free_blocks, self.mgr.get_block_ids(sr.req)) != before:
            self.violation(sr.base, -1, layer, "a refused request changed the pool")
        self.waiting.remove(sr)
        self.check_all()

    def _after_alloc(self, sr: ShadowRequest, c: int, n: int, L: int, first: bool,
                     hit: int = 0, drafts: Sequence[int] = (), accepted: int = 0) -> None:
        req = sr.req
        # inputs: real tokens of positions c .. c + n - 1 - len(drafts), then drafts
        real = req.all_token_ids[c:c + n - len(drafts)]
        parent = sr.true_keys[c - 1] if c > 0 else sr.root
        in_keys = chain(parent, list(real) + list(drafts))
        keys = sr.true_keys[:c] + in_keys
        # after verification: accepted drafts and a bonus token, or a prefill chunk
        end = c + n
        prompt_done = end >= req.num_tokens
        c_next = c + (n - len(drafts)) + accepted
        new_toks: list[int] = []
        if prompt_done:
            for pos in range(req.num_tokens, c_next + 1):
                new_toks.append(self.true_token(sr, pos))
        prev = sr.step
        ctx = StepContext(req.request_id, c, n, L, keys, c_next, sr.true_keys,
                          req.num_prompt_tokens, sr.enc_len, sr.base, first, hit,
                          self._tables(req.request_id),
                          extra=dict(prev.extra) if prev is not None and not first else {})
        ctx.extra["drafts"] = len(drafts)
        # true keys must cover c_next (the tokens appended below)
        if new_toks:
            sr.true_keys.extend(chain(sr.true_keys[-1] if sr.true_keys else sr.root,
                                      new_toks))
        for sh in self.shadows:
            sh.pre_check(ctx)
        for sh in self.shadows:
            sh.run(ctx)
        for sh in self.shadows:
            sh.after(ctx)
        sr.step = ctx
        req.num_computed_tokens = c_next
        if new_toks:
            req.append_output_token_ids(new_toks)
        sr.first_alloc_done = True
        self.check_all()

    def step_running(self, sr: ShadowRequest) -> str:
        """The request's next step: a prefill chunk or a decode step with drafts.
        Returns 'ok', 'full' (no blocks) or 'done' (finished, freed)."""
        req = sr.req
        c = req.num_computed_tokens
        if req.num_tokens - req.num_prompt_tokens >= sr.max_tokens or \
                req.num_tokens >= self.max_model_len - 1:
            self.finish(sr)
            return "done"
        rng = self.rng
        remaining = req.num_tokens - c
        S = self.num_spec
        if remaining > 1:  # prefill (or a resumed request replaying its tokens)
            n = self._chunk(sr, c, remaining, 0)
            drafts: list[int] = []
            accepted = 0
        else:  # decode: the last sampled token plus k drafts
            room = self.max_model_len - 1 - req.num_tokens - S
            k = min(rng.randrange(0, S + 1), max(0, room)) if S else 0
            accepted = rng.randrange(0, k + 1) if k else 0
            drafts = [self.true_token(sr, c + 1 + j) if j < accepted else
                      -1 - rng.randrange(1, 1000) for j in range(k)]
            n = 1 + k
        L = S if sr.first_alloc_done else 0
        L = max(0, min(L, self.max_model_len - (c + n)))
        out = self._call(self.mgr.allocate_slots, req, n, num_lookahead_tokens=L)
        if out is None:
            self.failed_allocs += 1
            self.check_all()
            return "full"
        self._after_alloc(sr, c, n, L, first=False, drafts=drafts, accepted=accepted)
        return "ok"

    def finish(self, sr: ShadowRequest) -> None:
        self._call(self.mgr.free, sr.req)
        self.running.pop(sr.req.request_id, None)
        self.check_all()

    def preempt(self, sr: ShadowRequest) -> None:
        """Free the request and put it back to wait, to recompute from scratch."""
        self._call(self.mgr.free, sr.req)
        self.running.pop(sr.req.request_id, None)
        sr.req.num_computed_tokens = 0
        sr.step = None
        sr.first_alloc_done = False
        self.waiting.insert(0, sr)
        self.check_all()

    def reset(self, running_too: bool) -> None:
        ok = self._call(self.mgr.reset_prefix_cache, reset_running_requests=running_too)
        if ok and running_too:
            for sr in list(self.running.values()):
                self.running.pop(sr.req.request_id)
                sr.step = None
                sr.first_alloc_done = False
                if sr.req.num_computed_tokens != 0:
                    self.violation(sr.base, -1, "reset", "num_computed_tokens not 0 "
                                   "after reset_prefix_cache(reset_running_requests)")
                self.waiting.insert(0, sr)
        self.check_all()

    def probe(self) -> None:
        """A lookup without admission: the hit's blocks hold this prefix."""
        rng = self.rng
        prefix = rng.choice(self.prefixes)
        toks = prefix[:rng.randrange(1, len(prefix) + 1)] + [rng.randrange(1, 50)]
        req = self.mgr.make_request("probe", toks)
        blocks, n = self._call(self.mgr.get_computed_blocks, req)
        keys = chain(ROOT, toks)
        ctx = StepContext("probe", n, 0, 0, keys, n, keys, len(toks), 0, None, True, n,
                          [list(g) for g in blocks.blocks])
        if n:
            for sh in self.shadows:
                if blocks.blocks[sh.gid]:
                    sh.probe(ctx, blocks.blocks[sh.gid])
        self.check_all()

    def scheduler_step(self) -> None:
        """One scheduler step: every running request advances (preempting the newest
        when blocks run out), then waiting requests are admitted."""
        rng = self.rng
        for rid in list(self.running):
            sr = self.running.get(rid)
            if sr is None:
                continue
            while True:
                res = self.step_running(sr)
                if res != "full":
                    break
                victim = list(self.running.values())[-1]
                self.preempt(victim)
                if victim is sr:
                    break
        budget = rng.randrange(0, 3)
        if not self.waiting or rng.random() < 0.5:
            self.new_request()
        while self.waiting and budget > 0:
            budget -= 1
            if not self.admit(self.waiting[0]):
                break
        r = rng.random()
        if r < 0.03:
            self.reset(running_too=rng.random() < 0.5)
        elif r < 0.10:
            self.probe()
        elif r < 0.14 and self.running:
            self.finish(rng.choice(list(self.running.values())))  # abort
        elif r < 0.17 and self.running:
            self.preempt(rng.choice(list(self.running.values())))

    def run(self, num_ops: int) -> World:
        while self.ops < num_ops:
            self.scheduler_step()
        return self
