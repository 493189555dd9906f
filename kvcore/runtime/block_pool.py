"""The block pool: the one owner of every KV-cache block id.

A block is in exactly one of three states:

* **free**: in the free queue, no hash (reused first);
* **cached-and-free** (evictable): in the free queue *and* in the prefix cache under
  its hash; reusing it for new content evicts it;
* **held**: ``ref_cnt > 0`` (by one or more requests, or reserved by a manager), not in
  the free queue.  A held block may also be in the prefix cache.

Block 0 is the *null block*: never handed out, used as a placeholder in block tables
for blocks a request no longer needs (tokens that left a sliding window).

Eviction order (vLLM v1 ``BlockPool`` / ``FreeKVCacheBlockQueue``): new blocks are taken
from the front of the free queue.  A request's blocks are freed last block first; a
freed block that holds cached content goes to the back, a block without a hash (a
partial last block, or caching off) to the front.  Cached blocks are therefore evicted
least-recently-freed first, and content-free blocks are reused before any cached one
(vLLM issue: a new request must never take A's cached blocks while empty ones exist).

The free queue is a doubly linked list threaded through the blocks themselves
(``prev_free`` / ``next_free``), so taking a cache hit out of the middle is O(1).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KVCacheBlock",
    "FreeBlockQueue",
    "BlockPool",
    "BlockStored",
    "BlockRemoved",
    "AllBlocksCleared",
]


class KVCacheBlock:
    """One block id and its bookkeeping.

    Attributes
    ----------
    block_id: index into the KV-cache tensors (0 = the null block).
    ref_cnt: number of holders (requests, or a manager's reservation).
    block_hash: the prefix-cache key while the block is cached, else None.
    group_id: the KV-cache group whose cache holds ``block_hash``.
    prev_free, next_free: free-queue links (None when not in the queue).
    """

    __slots__ = ("block_id", "ref_cnt", "block_hash", "group_id", "prev_free",
                 "next_free", "is_null")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: bytes | None = None
        self.group_id = -1
        self.prev_free: KVCacheBlock | None = None
        self.next_free: KVCacheBlock | None = None
        self.is_null = False

    def __repr__(self) -> str:
        h = self.block_hash.hex()[:8] if self.block_hash else None
        return f"KVCacheBlock(id={self.block_id}, ref_cnt={self.ref_cnt}, hash={h})"

    # pickle / deepcopy: the free-queue links are left out (a block's state is flat, so
    # copying never recurses along the list); :class:`FreeBlockQueue` restores them
    def __getstate__(self) -> tuple[Any, ...]:
        return (self.block_id, self.ref_cnt, self.block_hash, self.group_id, self.is_null)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.block_id, self.ref_cnt, self.block_hash, self.group_id, self.is_null = state
        self.prev_free = self.next_free = None


class FreeBlockQueue:
    """Doubly linked list of free blocks with O(1) ``remove``, ``append``,
    ``appendleft`` and ``popleft`` (sentinel head and tail).

    ``virgin=(start, end, make)`` appends block ids ``start .. end-1`` that have never
    been used without creating them: a placeholder node stands for the run, and
    ``make(start, k)`` builds blocks when they are first popped (a pool of millions of
    blocks starts in O(1)).  The order is exactly that of a fully built queue.
    """

    __slots__ = ("num_free_blocks", "head", "tail", "_virgin", "_next_id", "_end", "_make")

    def __init__(self, blocks: Sequence[KVCacheBlock],
                 virgin: tuple[int, int, Any] | None = None) -> None:
        from kvcore.units import check_items

        blocks = check_items(blocks, KVCacheBlock, "blocks")
        if virgin is not None and (type(virgin) is not tuple or len(virgin) != 3
                                   or not callable(virgin[2])):
            from kvcore.errors import ConfigError

            raise ConfigError(f"FreeBlockQueue: virgin must be (first id, end id, "
                              f"make(start, k)), got {repr(virgin)[:60]}", field="virgin")
        self.head = KVCacheBlock(-1)
        self.tail = KVCacheBlock(-1)
        prev = self.head
        for b in blocks:
            prev.next_free = b
            b.prev_free = prev
            prev = b
        self.num_free_blocks = len(blocks)
        self._virgin: KVCacheBlock | None = None
        self._next_id = self._end = 0
        self._make = None
        if virgin is not None and virgin[1] > virgin[0]:
            self._next_id, self._end, self._make = virgin
            v = self._virgin = KVCacheBlock(-2)
            prev.next_free = v
            v.prev_free = prev
            prev = v
            self.num_free_blocks += self._end - self._next_id
        prev.next_free = self.tail
        self.tail.prev_free = prev

    # pickle / deepcopy (any length): the queue is saved as the list of its nodes in
    # order, head and tail sentinels and the placeholder of never-used blocks included,
    # and relinked on load (blocks save no links); a linked list copied link by link
    # recursed once per block (RecursionError at about 900 blocks)
    def __getstate__(self) -> tuple[Any, ...]:
        nodes = []
        b: KVCacheBlock | None = self.head
        while b is not None:
            nodes.append(b)
            b = b.next_free
        return (nodes, self.num_free_blocks, self._virgin, self._next_id, self._end,
                self._make)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        nodes, self.num_free_blocks, self._virgin, self._next_id, self._end, \
            self._make = state
        self.head, self.tail = nodes[0], nodes[-1]
        prev = None
        for b in nodes:
            b.prev_free = prev
            if prev is not None:
                prev.next_free = b
            prev = b
        self.tail.next_free = None

    def popleft(self) -> KVCacheBlock:
        return self.popleft_n(1)[0]

    @staticmethod
    def _count(n: Any) -> int:
        """``n`` as a block count: an int >= 0 (numpy integers too), never a bool or a
        float; raises :class:`~kvcore.errors.BlockPoolError` naming ``n``."""
        got = None
        if not isinstance(n, bool):
            try:
                got = operator.index(n)
            except TypeError:
                got = None
        if got is None or got < 0:
            from kvcore.errors import BlockPoolError

            raise BlockPoolError(f"n must be an int >= 0 (a number of blocks), got "
                                 f"{n!r}", field="n", value=repr(n)[:40])
        return got

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """The first ``n`` blocks, removed; raises
        :class:`~kvcore.errors.BlockPoolError` (a ValueError) if fewer are free."""
        if type(n) is not int or n < 0:  # a bool, float or negative count would
            n = self._count(n)  # corrupt num_free_blocks
        if n > self.num_free_blocks:
            from kvcore.errors import BlockPoolError

            raise BlockPoolError(f"asked for {n} blocks, {self.num_free_blocks} free",
                                 field="num_blocks", value=n,
                                 num_free_blocks=self.num_free_blocks)
        out: list[KVCacheBlock] = []
        b = self.head.next_free
        virgin = self._virgin
        i = 0
        while i < n:
            if b is virgin:
                k = min(n - i, self._end - self._next_id)
                out += self._make(self._next_id, k)  # type: ignore[misc]
                self._next_id += k
                i += k
                if self._next_id == self._end:  # run used up: drop the placeholder
                    b = virgin.next_free  # type: ignore[union-attr]
                    virgin.prev_free = virgin.next_free = None  # type: ignore[union-attr]
                    self._virgin = virgin = None
                continue
            out.append(b)  # type: ignore[arg-type]
            nxt = b.next_free  # type: ignore[union-attr]
            b.prev_free = b.next_free = None  # type: ignore[union-attr]
            b = nxt
            i += 1
        self.head.next_free = b
        b.prev_free = self.head  # type: ignore[union-attr]
        self.num_free_blocks -= n
        return out

    def _materialize_all(self) -> None:
        v = self._virgin
        if v is None:
            return
        k = self._end - self._next_id
        blocks = self._make(self._next_id, k)  # type: ignore[misc]
        self._next_id = self._end
        prev, nxt = v.prev_free, v.next_free
        for b in blocks:
            prev.next_free = b  # type: ignore[union-attr]
            b.prev_free = prev
            prev = b
        prev.next_free = nxt  # type: ignore[union-attr]
        nxt.prev_free = prev  # type: ignore[union-attr]
        v.prev_free = v.next_free = None
        self._virgin = None

    def remove(self, b: KVCacheBlock) -> None:
        p, n = b.prev_free, b.next_free
        if p is None or n is None:
            from kvcore.errors import BlockPoolError

            raise BlockPoolError(f"block {b.block_id} is not in the free queue ({b})",
                                 block_id=b.block_id)
        p.next_free = n
        n.prev_free = p
        b.prev_free = b.next_free = None
        self.num_free_blocks -= 1

    def append(self, b: KVCacheBlock) -> None:
        t = self.tail
        last = t.prev_free
        last.next_free = b  # type: ignore[union-attr]
        b.prev_free = last
        b.next_free = t
        t.prev_free = b
        self.num_free_blocks += 1

    def appendleft(self, b: KVCacheBlock) -> None:
        h = self.head
        first = h.next_free
        first.prev_free = b  # type: ignore[union-attr]
        b.next_free = first
        b.prev_free = h
        h.next_free = b
        self.num_free_blocks += 1

    def __iter__(self) -> Any:
        self._materialize_all()
        b = self.head.next_free
        while b is not self.tail:
            yield b
            b = b.next_free  # type: ignore[union-attr]

    def block_ids(self) -> list[int]:
        return [b.block_id for b in self]


@dataclass(frozen=True)
class BlockStored:
    """Blocks entered the prefix cache: hashes in block order, the parent of the
    first, their token ids, ``block_size``, the group and the LoRA name."""

    block_hashes: tuple[bytes, ...]
    parent_block_hash: bytes | None
    token_ids: tuple[int, ...]
    block_size: int
    group_id: int
    lora_name: str | None = None


@dataclass(frozen=True)
class BlockRemoved:
    """Blocks left the prefix cache (evicted)."""

    block_hashes: tuple[bytes, ...]
    group_id: int


@dataclass(frozen=True)
class AllBlocksCleared:
    """The prefix cache was reset."""



def _hashable(h: Any) -> bool:
    try:
        hash(h)
    except TypeError:
        return False
    return True

class BlockPool:
    """Blocks, their free queue and the prefix cache (one hash table per group).

    Parameters
    ----------
    num_blocks: block ids in the cache, counting the null block 0.
    enable_caching: keep freed full blocks findable by hash.
    num_groups: KV-cache groups sharing the pool (each has its own hash table).
    lazy: create block objects on first use (default: when ``num_blocks`` > 65,536);
        ``blocks`` then holds only the blocks used so far.
    enable_events: record :class:`BlockStored` / :class:`BlockRemoved` /
        :class:`AllBlocksCleared` for :meth:`take_events`.

    ``cached[g]`` maps a hash to the *earliest-cached* block holding it; later blocks
    with the same hash (no de-duplication, as in vLLM) wait in ``_dups[g]`` and take
    over, in caching order, when the earlier ones are evicted.

    ``front_in_order`` (attribute, default False): when True, the content-free blocks
    of one :meth:`free_blocks` call go to the front of the free queue *in the order
    given* (vLLM 0.32's ``prepend_n``: the first one given is reused first) instead of
    each to the front as it is freed (the last one given is reused first).  Both are
    safe; kvcore-vllm sets it to hand out vLLM's block ids.
    """

    #: see the class docstring
    front_in_order: bool = False

    def __init__(self, num_blocks: int, *, enable_caching: bool = True,
                 num_groups: int = 1, enable_events: bool = False,
                 lazy: bool | None = None) -> None:
        from kvcore.errors import ConfigError

        if type(num_blocks) is not int and not isinstance(num_blocks, bool) \
                and hasattr(num_blocks, "__index__"):
            num_blocks = num_blocks.__index__()  # numpy ints
        if type(num_blocks) is not int or not 2 <= num_blocks <= 1 << 40:
            raise ConfigError(f"num_blocks must be an int in [2, 2**40] (it counts the "
                              f"null block 0), got {repr(num_blocks)[:40]}",
                              field="num_blocks", value=repr(num_blocks)[:40])
        for flag, v in (("enable_caching", enable_caching), ("enable_events",
                                                              enable_events)):
            if v is not True and v is not False:
                raise ConfigError(f"BlockPool: {flag} must be True or False, got "
                                  f"{repr(v)[:40]}", field=flag, value=repr(v)[:40])
        if type(num_groups) is not int and not isinstance(num_groups, bool) \
                and hasattr(num_groups, "__index__"):
            num_groups = num_groups.__index__()  # numpy ints
        if type(num_groups) is not int or not 1 <= num_groups <= 1 << 16:
            raise ConfigError(f"BlockPool: num_groups must be an int in [1, 65536] (KV-cache "
                              f"groups), got {repr(num_groups)[:40]}", field="num_groups",
                              value=repr(num_groups)[:40])
        if lazy is not None and lazy is not True and lazy is not False:
            raise ConfigError(f"BlockPool: lazy must be True, False or None, got "
                              f"{repr(lazy)[:40]}", field="lazy", value=repr(lazy)[:40])
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.enable_events = enable_events
        if lazy is None:
            lazy = num_blocks > 65536
        if lazy:
            self.blocks = [KVCacheBlock(0)]
            self.free_queue = FreeBlockQueue((), (1, num_blocks, self._make_blocks))
        else:
            self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
            self.free_queue = FreeBlockQueue(self.blocks[1:])
        self.null_block = self.blocks[0]
        self.null_block.is_null = True
        self.null_block.ref_cnt = 1
        self.num_usable_blocks = num_blocks - 1
        self.num_reserved_blocks = 0
        #: blocks taken for good by :meth:`reserve_blocks` (sink blocks)
        self.reserved_blocks: list[KVCacheBlock] = []
        self._reserved_ids: set[int] = set()  # their ids: never freed to the queue
        self.cached: list[dict[bytes, KVCacheBlock]] = [{} for _ in range(num_groups)]
        self._dups: list[dict[bytes, dict[int, KVCacheBlock]]] = [
            {} for _ in range(num_groups)]
        self.events: list[Any] = []

    def _make_blocks(self, start: int, k: int) -> list[KVCacheBlock]:
        assert start == len(self.blocks)
        new = [KVCacheBlock(i) for i in range(start, start + k)]
        self.blocks += new
        return new

    # ---- queries -------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks a new allocation may take (free or cached-and-free)."""
        return self.free_queue.num_free_blocks

    @property
    def usage(self) -> float:
        """Fraction of the usable blocks held (0.0 to 1.0)."""
        return 1.0 - self.free_queue.num_free_blocks / self.num_usable_blocks

    def get_cached_block(self, block_hash: bytes, group_id: int) -> KVCacheBlock | None:
        """The earliest-cached block with this hash in this group, or None.  Raises
        :class:`~kvcore.errors.BlockPoolError` for a ``group_id`` that is not one of the
        pool's groups and an unhashable ``block_hash``."""
        if type(group_id) is not int or group_id < 0:
            group_id = self._group_arg(group_id)
        try:
            return self.cached[group_id].get(block_hash)
        except IndexError:
            raise self._bad_group(group_id) from None
        except TypeError:
            from kvcore.errors import BlockPoolError

            raise BlockPoolError(f"block_hash must be a block hash (bytes), got "
                                 f"{type(block_hash).__name__} {repr(block_hash)[:40]}",
                                 field="block_hash") from None

    def _group_arg(self, group_id: Any) -> int:
        """A group id that is not a plain int: a numpy int converted, else the error."""
        if not isinstance(group_id, bool) and hasattr(group_id, "__index__"):
            gid = group_id.__index__()
            if type(gid) is int and 0 <= gid < len(self.cached):
                return gid
        raise self._bad_group(group_id)

    def _bad_group(self, group_id: Any) -> Exception:
        from kvcore.errors import BlockPoolError

        return BlockPoolError(f"group_id must be an int in [0, {len(self.cached) - 1}] "
                              f"(the pool's KV-cache groups), got {repr(group_id)[:40]}",
                              field="group_id", value=repr(group_id)[:40])

    def _listed(self, blocks: Any, what: str) -> list[Any]:
        """``blocks`` as a list (BlockPoolError for a str, bytes, mapping or
        non-iterable; the items are checked by the caller)."""
        if type(blocks) is list:
            return blocks
        from collections.abc import Mapping

        if not isinstance(blocks, (str, bytes, bytearray, Mapping)):
            try:
                return list(blocks)
            except TypeError:
                pass
        from kvcore.errors import BlockPoolError

        raise BlockPoolError(f"blocks {what} must be a sequence of this pool's blocks, got "
                             f"{type(blocks).__name__} {repr(blocks)[:40]}", field="blocks")

    # ---- allocation ----------------------------------------------------------------
    def get_new_blocks(self, n: int) -> list[KVCacheBlock]:
        """Take ``n`` blocks from the front of the free queue (evicting cached content),
        each with ``ref_cnt = 1``.  Raises :class:`~kvcore.errors.BlockPoolError` when
        fewer than ``n`` are free (callers check :attr:`num_free_blocks` first)."""
        blocks = self.free_queue.popleft_n(n)
        for b in blocks:
            if b.block_hash is not None:
                self._evict(b)
            b.ref_cnt = 1
        return blocks

    def _evict(self, b: KVCacheBlock) -> None:
        h = b.block_hash
        g = b.group_id
        cache = self.cached[g]
        dups = self._dups[g]
        if not dups:  # no duplicated hash in this group: b is the cached one
            del cache[h]  # type: ignore[arg-type]
        elif cache.get(h) is b:  # type: ignore[arg-type]
            more = dups.get(h)  # type: ignore[arg-type]
            if more:
                bid = next(iter(more))
                cache[h] = more.pop(bid)  # type: ignore[index]
                if not more:
                    del dups[h]  # type: ignore[arg-type]
            else:
                del cache[h]  # type: ignore[arg-type]
        else:
            more = dups[h]  # type: ignore[index]
            del more[b.block_id]
            if not more:
                del dups[h]  # type: ignore[arg-type]
        b.block_hash = None
        b.group_id = -1
        if self.enable_events:
            self.events.append(BlockRemoved((h,), g))  # type: ignore[arg-type]

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Add a holder to each block (cache hits); a block with no holder leaves the
        free queue.  The null block is skipped.  Raises
        :class:`~kvcore.errors.BlockPoolError` for a block object that is not this
        pool's (nothing changed then)."""
        q = self.free_queue
        pool_blocks = self.blocks
        blocks = self._listed(blocks, "touched")
        for b in blocks:
            bid = getattr(b, "block_id", None)
            if type(bid) is not int or not 0 <= bid < len(pool_blocks) \
                    or pool_blocks[bid] is not b:
                raise self._foreign(b, "touched")
        for b in blocks:
            if b.ref_cnt == 0:
                q.remove(b)
            if not b.is_null:
                b.ref_cnt += 1

    def cache_full_blocks(self, blocks: Sequence[KVCacheBlock], block_hashes: Sequence[bytes],
                          num_cached: int, num_full: int, group_id: int,
                          stride: int = 1, request: Any = None, block_size: int = 0) -> None:
        """Enter blocks ``num_cached .. num_full-1`` of a request in the cache of
        ``group_id``, block ``i`` under ``block_hashes[(i + 1) * stride - 1]``.  Null
        blocks and blocks already cached are skipped.

        Raises :class:`~kvcore.errors.BlockPoolError`, with nothing changed, for a
        ``group_id`` that is not the pool's, counts that are not ints with ``0 <=
        num_cached <= num_full <= len(blocks)``, a ``stride`` below 1, fewer hashes than
        the range needs, an unhashable hash, and a block in the range that is not one of
        this pool's held blocks (a plugin's manager passing a forged or freed block
        cannot enter it in the cache)."""
        if type(group_id) is not int or not 0 <= group_id < len(self.cached):
            group_id = self._group_arg(group_id)
        if type(num_cached) is not int or type(num_full) is not int \
                or type(stride) is not int or type(block_size) is not int:
            # off the fast path: numpy integers as the equal plain int (bool, floats and
            # text stay for the checks below, which name them)
            from kvcore.units import plain_int

            num_cached, num_full, stride, block_size = (
                plain_int(num_cached), plain_int(num_full), plain_int(stride),
                plain_int(block_size))
        cache = self.cached[group_id]
        self._check_cache_range(blocks, block_hashes, num_cached, num_full, stride)
        if self.enable_events and request is not None:
            self._check_event_args(request, block_size, num_full)
        dups = self._dups[group_id]
        pool_blocks = self.blocks
        done: list[KVCacheBlock] = []  # entered here (undone on an error)
        for i in range(num_cached, num_full):
            b = blocks[i]
            try:
                own = pool_blocks[b.block_id] is b
            except (AttributeError, IndexError, TypeError):
                own = False
            if not own:
                self._undo_cache(done, group_id)
                raise self._foreign(b, "cached")
            if b.block_hash is not None or b.is_null:
                continue
            h = block_hashes[(i + 1) * stride - 1]
            if b.ref_cnt < 1 or (type(h) is not bytes and (h is None
                                                           or not _hashable(h))):
                self._undo_cache(done, group_id)
                raise self._uncacheable(b, h, (i + 1) * stride - 1)
            done.append(b)
            b.block_hash = h
            b.group_id = group_id
            if h in cache:
                dups.setdefault(h, {})[b.block_id] = b
            else:
                cache[h] = b
        if self.enable_events and done:
            self._stored_event(tuple(b.block_hash for b in done), block_hashes,
                               num_cached, num_full, group_id, stride, request, block_size)

    def cache_call(self, manager: Any) -> Callable[..., None]:
        """The caching call ``manager`` goes through: the pool's unchecked
        :meth:`_cache_range` for kvcore's own manager types (``kvcore.runtime.managers``,
        whose tables hold only blocks taken from this pool and hits the coordinator
        verified) on a pool that does not override :meth:`cache_full_blocks`; the
        checked :meth:`cache_full_blocks` for a plugin's manager or a subclassed pool."""
        if type(manager).__module__ == "kvcore.runtime.managers" \
                and type(self).cache_full_blocks is BlockPool.cache_full_blocks:
            return self._cache_range
        return self.cache_full_blocks

    def _cache_range(self, blocks: Sequence[KVCacheBlock], block_hashes: Sequence[bytes],
                     num_cached: int, num_full: int, group_id: int, stride: int = 1,
                     request: Any = None, block_size: int = 0) -> None:
        """:meth:`cache_full_blocks` without its checks, for kvcore's own managers
        (``kvcore.runtime.managers``), whose tables hold only blocks they took from
        this pool or hits the coordinator verified, and whose counts are their own.
        A plugin's manager goes through the checked call."""
        cache = self.cached[group_id]
        stored: list[bytes] = []
        for i in range(num_cached, num_full):
            b = blocks[i]
            if b.block_hash is not None or b.is_null:
                continue
            h = block_hashes[(i + 1) * stride - 1]
            b.block_hash = h
            b.group_id = group_id
            if h in cache:
                self._dups[group_id].setdefault(h, {})[b.block_id] = b
            else:
                cache[h] = b
            if self.enable_events:
                stored.append(h)
        if stored:
            self._stored_event(tuple(stored), block_hashes, num_cached, num_full,
                               group_id, stride, request, block_size)

    def _stored_event(self, stored: tuple[Any, ...], block_hashes: Sequence[Any],
                      num_cached: int, num_full: int, group_id: int, stride: int,
                      request: Any, block_size: int) -> None:
        """Append the BlockStored event of one caching call (the hashes it entered)."""
        parent = (block_hashes[num_cached * stride - 1] if num_cached > 0 else None)
        toks: tuple[int, ...] = ()
        lora = None
        if request is not None:
            toks = tuple(request.all_token_ids[num_cached * block_size:
                                               num_full * block_size])
            lora = getattr(request, "lora_name", None)
        self.events.append(BlockStored(stored, parent, toks, block_size, group_id, lora))

    def _check_cache_range(self, blocks: Any, block_hashes: Any, num_cached: Any,
                           num_full: Any, stride: Any) -> None:
        """The counts and lengths of :meth:`cache_full_blocks` (its blocks and hashes
        are checked as it goes, and its entries undone on an error)."""
        if type(num_cached) is int and type(num_full) is int and type(stride) is int \
                and stride >= 1 and 0 <= num_cached <= num_full:
            try:
                if num_full <= len(blocks) and (num_full == num_cached
                                                or num_full * stride <= len(block_hashes)):
                    return
            except TypeError:
                pass
        from kvcore.errors import BlockPoolError

        def bad(msg: str, field: str) -> Exception:
            return BlockPoolError(f"cache_full_blocks: {msg}", field=field)

        for nm, v in (("num_cached", num_cached), ("num_full", num_full),
                      ("stride", stride)):
            if type(v) is not int:
                raise bad(f"{nm} must be an int, got {repr(v)[:40]}", nm)
        if stride < 1:
            raise bad(f"stride must be >= 1, got {stride}", "stride")
        try:
            nb, nh = len(blocks), len(block_hashes)
        except TypeError:
            raise bad("blocks and block_hashes must be sequences", "blocks") from None
        if not 0 <= num_cached <= num_full <= nb:
            raise bad(f"need 0 <= num_cached ({num_cached}) <= num_full ({num_full}) <= "
                      f"len(blocks) ({nb})", "num_full")
        raise bad(f"{nh} block hashes for blocks up to {num_full} at stride {stride} "
                  f"(needs {num_full * stride})", "block_hashes")

    def _check_event_args(self, request: Any, block_size: Any, num_full: int) -> None:
        """The ``request`` and ``block_size`` a BlockStored event reads, checked before
        :meth:`cache_full_blocks` changes anything."""
        from kvcore.errors import BlockPoolError

        if type(block_size) is not int or block_size < 1:
            raise BlockPoolError(f"cache_full_blocks: block_size must be an int >= 1 "
                                 f"(tokens; the BlockStored event's), got "
                                 f"{repr(block_size)[:40]}", field="block_size")
        toks = getattr(request, "all_token_ids", None)
        try:
            len(toks)  # type: ignore[arg-type]
            toks[0:0]  # type: ignore[index]
        except TypeError:
            raise BlockPoolError(f"cache_full_blocks: request must have all_token_ids "
                                 f"(a sequence of token ids) for the BlockStored event, "
                                 f"got {type(request).__name__}", field="request") from None
        try:
            lora = getattr(request, "lora_name", None)
        except Exception:  # noqa: BLE001 - a property that raises
            lora = 0
        if lora is not None and not isinstance(lora, str):
            raise BlockPoolError("cache_full_blocks: request.lora_name must be a str or "
                                 "None", field="request")

    def _uncacheable(self, b: KVCacheBlock, h: Any, k: int) -> Exception:
        from kvcore.errors import BlockPoolError

        if b.ref_cnt < 1:
            return BlockPoolError(f"cache_full_blocks: block {b.block_id} is not held "
                                  f"(ref_cnt {b.ref_cnt}); only a held block's content "
                                  "can be cached", block_id=b.block_id)
        return BlockPoolError(f"cache_full_blocks: block_hashes[{k}] is not a block hash "
                              f"(None or unhashable): {type(h).__name__}",
                              field="block_hashes")

    def _undo_cache(self, done: list[KVCacheBlock], group_id: int) -> None:
        """Take back the entries a failed :meth:`cache_full_blocks` made (error path)."""
        cache, dups = self.cached[group_id], self._dups[group_id]
        for b in reversed(done):
            h: Any = b.block_hash
            d = dups.get(h)
            if d is not None and b.block_id in d:
                del d[b.block_id]
                if not d:
                    del dups[h]
            elif cache.get(h) is b:
                del cache[h]
            b.block_hash = None
            b.group_id = -1

    def free_blocks(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one holder of each block, in the order given (callers pass a request's
        blocks last block first).  A block reaching ``ref_cnt == 0`` goes to the back
        of the free queue if cached, to the front otherwise.

        Raises :class:`~kvcore.errors.BlockPoolError` naming the block id, with nothing
        changed, for a block that is not held (``ref_cnt`` would go below 0: a block
        freed twice, or listed twice in one call while held once) and for a block
        object that is not one of this pool's (a forged or foreign block).  These
        checks are always on (one comparison and one identity test per block)."""
        q = self.free_queue
        head, tail = q.head, q.tail
        pool_blocks = self.blocks
        null = self.null_block
        if type(blocks) is not list:
            blocks = self._listed(blocks, "freed")
        n = 0
        k = 0  # blocks processed (undone on an error)
        anchor = head if self.front_in_order else None  # insert after it, then advance
        for b in blocks:
            try:
                is_null = b.is_null
            except AttributeError:  # not a block at all (an int id, None, ...)
                self._undo_free([d for d in blocks[:k]  # type: ignore[index]
                                 if not d.is_null], n)
                raise self._foreign(b, "freed") from None
            if is_null:
                if b is not null:
                    self._undo_free([d for d in blocks[:k]  # type: ignore[index]
                                     if not d.is_null], n)
                    raise self._foreign(b, "freed")
                k += 1
                continue
            bid = b.block_id
            try:
                foreign = pool_blocks[bid] is not b
            except (IndexError, TypeError):
                foreign = True
            rc = b.ref_cnt - 1
            if foreign or rc < 0 or (rc == 0 and self._reserved_ids
                                     and bid in self._reserved_ids):
                done = [d for d in blocks[:k] if not d.is_null]  # type: ignore[index]
                self._undo_free(done, n)
                if foreign:
                    raise self._foreign(b, "freed")
                from kvcore.errors import BlockPoolError

                if rc == 0:
                    raise BlockPoolError(
                        f"block {bid} is a reserved block (reserve_blocks: taken for "
                        f"good); freeing its last holder would hand it out again; "
                        f"nothing was freed", block_id=bid)

                times = sum(1 for d in done if d is b)
                raise BlockPoolError(
                    f"block {bid} freed more often than it is held (held {b.ref_cnt} "
                    f"time(s), listed {times + 1} time(s) in this free): its ref count "
                    f"would go below 0 (a duplicate in one free, or a block freed "
                    f"twice); nothing was freed", block_id=bid, ref_cnt=b.ref_cnt)
            k += 1
            b.ref_cnt = rc
            if rc == 0:
                n += 1
                if b.block_hash is None and anchor is not None:  # front, in order
                    first = anchor.next_free
                    first.prev_free = b  # type: ignore[union-attr]
                    b.next_free = first
                    b.prev_free = anchor
                    anchor.next_free = b
                    anchor = b
                elif b.block_hash is None:  # front: reused first
                    first = head.next_free
                    first.prev_free = b  # type: ignore[union-attr]
                    b.next_free = first
                    b.prev_free = head
                    head.next_free = b
                else:  # back: evicted last
                    last = tail.prev_free
                    last.next_free = b  # type: ignore[union-attr]
                    b.prev_free = last
                    b.next_free = tail
                    tail.prev_free = b
        q.num_free_blocks += n

    def _foreign(self, b: Any, what: str) -> Exception:
        from kvcore.errors import BlockPoolError

        bid = getattr(b, "block_id", None)
        who = f"block {bid}" if bid is not None else f"a {type(b).__name__}"
        return BlockPoolError(
            f"{who} {what} is not a block of this pool ({b!r}; the pool has block "
            f"ids 0..{self.num_blocks - 1} and hands out only its own objects)",
            block_id=bid)

    def _undo_free(self, done: list[KVCacheBlock], n_queued: int) -> None:
        """Give back the holders a failed :meth:`free_blocks` dropped (error path)."""
        q = self.free_queue
        q.num_free_blocks += n_queued
        for b in reversed(done):
            if b.ref_cnt == 0:
                q.remove(b)
            b.ref_cnt += 1

    def is_pool_block(self, b: Any) -> bool:
        """Whether ``b`` is one of this pool's block objects (the null block included)."""
        bid = getattr(b, "block_id", -1)
        return isinstance(bid, int) and 0 <= bid < len(self.blocks) \
            and self.blocks[bid] is b

    def reserve_blocks(self, n: int) -> list[KVCacheBlock]:
        """Take ``n`` blocks for good (e.g. attention sinks shared by all requests); they
        are listed in :attr:`reserved_blocks`.  Raises
        :class:`~kvcore.errors.NotEnoughMemoryError` when fewer than ``n`` are free, and
        BlockPoolError for an ``n`` that is not an int >= 0."""
        n = self.free_queue._count(n)
        if n > self.free_queue.num_free_blocks:
            from kvcore.errors import NotEnoughMemoryError

            raise NotEnoughMemoryError(
                f"cannot reserve {n} blocks: the pool has {self.free_queue.num_free_blocks}"
                f" free of {self.num_usable_blocks} usable (num_blocks {self.num_blocks} "
                f"counts the null block); plan with more memory or fewer reserved blocks",
                field="num_blocks", value=self.num_blocks, reserved_blocks=n)
        blocks = self.get_new_blocks(n)
        self.num_reserved_blocks += n
        self.reserved_blocks.extend(blocks)
        self._reserved_ids.update(b.block_id for b in blocks)
        return blocks

    # ---- cache control -------------------------------------------------------------
    def num_held_blocks(self) -> int:
        """Blocks held by requests (reserved blocks excluded)."""
        return self.num_usable_blocks - self.free_queue.num_free_blocks \
            - self.num_reserved_blocks

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; only when no request holds a block (else False,
        nothing changed)."""
        if self.num_held_blocks() != 0:
            return False
        for b in self.blocks:
            b.block_hash = None
            b.group_id = -1
        for c in self.cached:
            c.clear()
        for d in self._dups:
            d.clear()
        if self.enable_events:
            self.events.append(AllBlocksCleared())
        return True

    def take_events(self) -> list[Any]:
        """The events recorded since the last call (oldest first)."""
        ev, self.events = self.events, []
        return ev
