"""Chained block hashes for prefix caching, and the :class:`Request` that carries them.

The hash of block ``i`` of a request covers the hash of block ``i - 1`` (its *parent*;
block 0's parent is the fixed :data:`ROOT_HASH`), the ``block_size`` token ids of the
block, and the block's *extra keys*.  Two blocks therefore have equal hashes only when
their whole prefixes (tokens and extra keys) are equal, which is what makes a hash a
prefix-cache key.  This is the scheme of vLLM's v1 ``kv_cache_utils.hash_block_tokens``
(sha256 over ``(parent, tokens, extra_keys)``); kvcore encodes the tuple itself instead
of pickling it, so the digests do not depend on the Python version or process.

Extra keys are tagged with their source, so two sources can never collide: a LoRA
adapter named ``"X"`` and a cache salt ``"X"`` give different hashes (vLLM issue: both
were plain strings in one tuple).  Sources:

* ``lora``: the LoRA adapter name, on every block of the request;
* ``salt``: the request's ``cache_salt``, on the first block only (it changes every
  later hash through the chain);
* ``mm``: the identifier of each multimodal input whose placeholder tokens overlap the
  block (``mm_features``: ``(offset, length, identifier)`` in prompt positions);
* ``enc``: the **encoder input's identity** (``encoder_id`` and ``num_encoder_tokens``),
  on every block of a request that brings an encoder input (an encoder-decoder model
  such as Whisper).  Every decoder layer's K/V depends on the encoder output (through
  the cross-attention of the layers below it), so the same decoder prompt over
  different audio, or over the same audio cut to another length, must never share a
  block (issue 24: a request with other audio reused 64 tokens of another's decoder
  self-attention).  A request with an encoder input but no ``encoder_id`` cannot be
  told apart from another: its blocks carry a key no other request has (a random
  nonce), and :class:`~kvcore.runtime.KVCacheManager` gives it no prefix hit (a
  request object of another class computes its own hashes: it must key such blocks
  apart itself) (vLLM 0.32 turns prefix caching off for encoder-decoder models instead;
  with an identity kvcore keeps the hits that are safe: same audio, same prompt).

Encoding (all integers little-endian): ``parent (32 B) | u32 n | n x i64 token ids |
for each extra key: u8 tag | u32 len | utf-8 bytes``; a key value that is not a string
(e.g. a multimodal identifier ``5``) is typed: tag | 0x80 and the bytes of
``"int:5"``, so ``5`` and ``"5"`` never share a hash.  Token ids must be ints in
``[0, 2**63)`` (:func:`check_token_ids`; RequestError otherwise).  ``hash="sha256"`` (default)
digests it with :func:`hashlib.sha256`; ``"sha256_128"`` keeps the first 16 bytes;
any callable ``bytes -> bytes`` may be given.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "ROOT_HASH",
    "BlockHash",
    "get_hash_function",
    "hash_block_tokens",
    "block_extra_keys",
    "BlockHasher",
    "check_token_ids",
    "MAX_TOKEN_ID",
    "Request",
]

BlockHash = bytes

#: the parent hash of block 0 (fixed, so hashes agree across processes)
ROOT_HASH: BlockHash = hashlib.sha256(b"kvcore.runtime.ROOT_HASH").digest()

_TAGS = {"lora": 1, "salt": 2, "mm": 3, "enc": 4}


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _sha256_128(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()[:16]


_HASH_FUNCTIONS: dict[str, Callable[[bytes], bytes]] = {
    "sha256": _sha256,
    "sha256_128": _sha256_128,
}


#: the shortest digest a custom block hash may return (vLLM's shortest, xxhash's 64
#: bits); a shorter one makes different prompts' blocks collide
MIN_HASH_BYTES = 8


def _checked_hash(fn: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """``fn`` probed once (deterministic, different digests for different inputs) and
    wrapped so every digest is checked: bytes (bytearray / memoryview are copied) of at
    least :data:`MIN_HASH_BYTES`.  A custom hash returning ``b""`` or one byte made
    other prompts hit a request's blocks and put one block twice in a table (fresh
    tester, T11).  Raises ConfigError (field ``hash``) naming what it returned."""
    if getattr(fn, "_kvcore_checked", False):  # already probed and wrapped
        return fn
    from kvcore.errors import ConfigError
    from kvcore.units import shorten

    name = getattr(fn, "__name__", type(fn).__name__)

    def digest(data: bytes) -> bytes:
        try:
            out = fn(data)
        except Exception as e:  # a user's function: named, never a raw traceback
            raise ConfigError(f"block hash {name!r} raised {type(e).__name__}: "
                              f"{shorten(str(e))}", field="hash", value=name) from None
        if type(out) is not bytes:
            if not isinstance(out, (bytearray, memoryview)):
                raise ConfigError(f"block hash {name!r} returned {shorten(out)} "
                                  f"({type(out).__name__}); it must return bytes (a "
                                  f"digest of at least {MIN_HASH_BYTES} bytes)",
                                  field="hash", value=name)
            out = bytes(out)
        if len(out) < MIN_HASH_BYTES:
            raise ConfigError(f"block hash {name!r} returned a {len(out)}-byte digest; "
                              f"at least {MIN_HASH_BYTES} bytes are needed (shorter "
                              "digests make different prompts' blocks collide)",
                              field="hash", value=name)
        return out

    a, b = b"kvcore block-hash probe 0", b"kvcore block-hash probe 1"
    da = digest(a)
    if digest(a) != da:
        raise ConfigError(f"block hash {name!r} is not deterministic (two digests of one "
                          "input differ); prefix caching needs a pure function",
                          field="hash", value=name)
    if digest(b) == da:
        raise ConfigError(f"block hash {name!r} gives one digest for two different "
                          "inputs; every prompt's blocks would collide",
                          field="hash", value=name)
    digest.__name__ = name
    digest._kvcore_checked = True  # type: ignore[attr-defined]
    return digest


def get_hash_function(hash: str | Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """The digest function for a name (``sha256``, ``sha256_128``) or a callable.

    Raises :class:`~kvcore.errors.ConfigError` for an unknown name (listing the known)."""
    if callable(hash):
        return _checked_hash(hash)
    fn = _HASH_FUNCTIONS.get(hash) if isinstance(hash, str) else None
    if fn is None:
        from kvcore.errors import ConfigError
        from kvcore.units import shorten

        raise ConfigError(f"unknown block hash {shorten(hash)}; known: "
                          f"{', '.join(_HASH_FUNCTIONS)} or a callable bytes -> bytes",
                          field="hash", value=hash)
    return fn


def _encode_extra(extra_keys: Sequence[tuple[str, str]] | None) -> bytes:
    if not extra_keys:
        return b""
    out = bytearray()
    for tag, value in extra_keys:
        code = _TAGS[tag]
        if isinstance(value, str):
            raw = value.encode()
        else:  # typed: identifier 5 and "5" must not collide (tag | 0x80, "type:repr")
            code |= 0x80
            raw = f"{type(value).__qualname__}:{value!r}".encode()
        out += code.to_bytes(1, "little") + len(raw).to_bytes(4, "little") + raw
    return bytes(out)


#: the largest token id a block hash can hold (``array("q")``: signed 64-bit)
MAX_TOKEN_ID = (1 << 63) - 1


def check_token_ids(token_ids: Sequence[Any], request_id: Any = None,
                    start: int = 0) -> None:
    """Token ids must be ints in ``[0, 2**63)`` (block hashes store them as signed
    64-bit integers).  Raises RequestError naming the request, the position and the
    value (cut when long)."""
    try:
        arr = array("q", token_ids)
        if not arr or min(arr) >= 0:
            return
    except (OverflowError, TypeError):
        pass
    from kvcore.errors import RequestError
    from kvcore.units import as_int, shorten

    for i, t in enumerate(token_ids):
        n = as_int(t)  # numpy integers are token ids too; bool is not
        if n is None or not 0 <= n <= MAX_TOKEN_ID:
            who = f"request {shorten(request_id)}: " if request_id is not None else ""
            raise RequestError(
                f"{who}token id {shorten(t)} at position {start + i:,} is not an int in "
                f"[0, 2**63) (block hashes store token ids as signed 64-bit integers)",
                field="prompt_token_ids", position=start + i, value=shorten(t))


def hash_block_tokens(hash_fn: Callable[[bytes], bytes], parent: BlockHash,
                      token_ids: Sequence[int],
                      extra_keys: Sequence[tuple[str, str]] | None = None) -> BlockHash:
    """Hash one block: ``hash_fn(parent | len | tokens | tagged extra keys)``.

    Parameters
    ----------
    parent: the previous block's hash (:data:`ROOT_HASH` for block 0).
    token_ids: the block's token ids (non-negative ints < 2**63).
    extra_keys: ``(source, value)`` pairs, source one of ``lora``, ``salt``, ``mm``,
        ``enc``.

    Raises ConfigError naming ``hash_fn``, ``parent`` or ``extra_keys`` for a hash
    function that is not callable or does not return bytes, a parent that is not bytes
    and malformed extra keys; RequestError for token ids out of range.
    """
    from kvcore.errors import ConfigError

    if not callable(hash_fn):
        raise ConfigError(f"hash_fn must be a callable bytes -> bytes (get_hash_function"
                          f"('sha256')), got {type(hash_fn).__name__}", field="hash_fn")
    if not isinstance(parent, bytes):
        raise ConfigError(f"parent must be the previous block's hash (bytes; ROOT_HASH "
                          f"for block 0), got {type(parent).__name__} {repr(parent)[:40]}",
                          field="parent")
    if isinstance(token_ids, (str, bytes, bytearray)):
        raise ConfigError(f"token_ids must be a sequence of int token ids, got "
                          f"{type(token_ids).__name__}", field="token_ids")
    try:
        toks = array("q", token_ids)
    except (OverflowError, TypeError):
        if not hasattr(token_ids, "__iter__"):
            raise ConfigError(f"token_ids must be a sequence of int token ids, got "
                              f"{type(token_ids).__name__}", field="token_ids") from None
        check_token_ids(list(token_ids))
        raise
    if extra_keys is not None:
        _check_extra_keys(extra_keys)
    out = hash_fn(parent + len(toks).to_bytes(4, "little") + toks.tobytes()
                  + _encode_extra(extra_keys))
    if not isinstance(out, bytes):
        raise ConfigError(f"hash_fn returned {type(out).__name__}, not bytes",
                          field="hash_fn")
    return out


def _check_extra_keys(extra_keys: Any) -> None:
    from kvcore.errors import ConfigError

    ok = isinstance(extra_keys, (list, tuple))
    if ok:
        for k in extra_keys:
            if type(k) is not tuple or len(k) != 2 or k[0] not in _TAGS:
                ok = False
                break
    if not ok:
        raise ConfigError(f"extra_keys must be a list of (source, value) pairs, source one "
                          f"of {sorted(_TAGS)} (block_extra_keys builds them), got "
                          f"{repr(extra_keys)[:60]}", field="extra_keys")


def encoder_key(encoder_id: Any, num_encoder_tokens: int) -> str | None:
    """The ``enc`` extra key of a request's blocks: its encoder input's identity and
    length (``"<type>:<repr>|<tokens>"``, so ``5`` and ``"5"`` differ), or None when
    the request brings no encoder input or no identity for it."""
    if not num_encoder_tokens or encoder_id is None:
        return None
    return f"{type(encoder_id).__qualname__}:{encoder_id!r}|{int(num_encoder_tokens)}"


def block_extra_keys(start: int, end: int, *, lora_name: str | None = None,
                     cache_salt: str | None = None,
                     mm_features: Sequence[tuple[int, int, str]] | None = None,
                     encoder: str | None = None) -> list[tuple[str, str]]:
    """The tagged extra keys of the block covering token positions ``[start, end)``
    (``encoder``: :func:`encoder_key`, on every block).  ``mm_features``: ``(offset,
    length, identifier)`` per multimodal input (token positions).  Raises ConfigError
    naming the argument for positions that are not ints with ``0 <= start <= end``,
    names that are not strs and malformed features."""
    from kvcore.errors import ConfigError

    if type(start) is not int or type(end) is not int:  # numpy integers too
        from kvcore.units import as_int

        s_int, e_int = as_int(start), as_int(end)
        if s_int is None or e_int is None:
            raise ConfigError(f"block_extra_keys: need int positions 0 <= start <= end, "
                              f"got start={repr(start)[:30]} end={repr(end)[:30]}",
                              field="start" if s_int is None else "end")
        start, end = s_int, e_int
    if not 0 <= start <= end:
        raise ConfigError(f"block_extra_keys: need int positions 0 <= start <= end, got "
                          f"start={repr(start)[:30]} end={repr(end)[:30]}", field="start")
    for nm, v in (("lora_name", lora_name), ("cache_salt", cache_salt),
                  ("encoder", encoder)):
        if v is not None and not isinstance(v, str):
            raise ConfigError(f"block_extra_keys: {nm} must be a str or None, got "
                              f"{type(v).__name__} {repr(v)[:40]}", field=nm)
    if mm_features:
        mm_features = _check_mm_features("block_extra_keys", mm_features)
    return _block_extra_keys(start, end, lora_name=lora_name, cache_salt=cache_salt,
                             mm_features=mm_features, encoder=encoder)


def _block_extra_keys(start: int, end: int, *, lora_name: Any = None,
                      cache_salt: Any = None, mm_features: Any = None,
                      encoder: str | None = None) -> list[tuple[str, str]]:
    """:func:`block_extra_keys` without its checks (the hasher's own calls, whose
    arguments the Request checked)."""
    keys: list[tuple[str, str]] = []
    if encoder is not None:
        keys.append(("enc", encoder))
    if lora_name is not None:
        keys.append(("lora", lora_name))
    if cache_salt is not None and start == 0:
        keys.append(("salt", cache_salt))
    if mm_features:
        for offset, length, ident in mm_features:
            if offset < end and offset + length > start:
                keys.append(("mm", ident))
    return keys


class BlockHasher:
    """Computes a request's block hashes incrementally (only newly full blocks).

    ``block_size`` here is the *hash* block size: the greatest common divisor of the
    block sizes of the groups that prefix cache (a group with a k-times larger block
    keys its blocks by every k-th hash; see :mod:`kvcore.runtime.managers`).
    """

    __slots__ = ("block_size", "hash_fn", "_static_extra")

    def __init__(self, block_size: int, hash: str | Callable[[bytes], bytes] = "sha256"):
        from kvcore.units import as_int

        number = as_int(block_size)  # numpy integers too, as a plain int; bool refused
        if number is None or number < 1:
            from kvcore.errors import ConfigError

            raise ConfigError(f"block_size must be a positive int, got {block_size!r}",
                              field="block_size", value=repr(block_size))
        self.block_size = number
        self.hash_fn = get_hash_function(hash)

    def extend(self, request: Any) -> None:
        """Append to ``request.block_hashes`` the hashes of its newly full blocks."""
        bs = self.block_size
        tokens = request.all_token_ids
        hashes = request.block_hashes
        start_block = len(hashes)
        end_block = len(tokens) // bs
        if end_block <= start_block:
            return
        hash_fn = self.hash_fn
        parent = hashes[-1] if hashes else ROOT_HASH
        lora = getattr(request, "lora_name", None)
        salt = getattr(request, "cache_salt", None)
        mm = getattr(request, "mm_features", None)
        enc = getattr(request, "_enc_key", None) if type(request) is Request else \
            encoder_key(getattr(request, "encoder_id", None),
                        getattr(request, "num_encoder_tokens", 0) or 0)
        simple_extra = _encode_extra(_block_extra_keys(0, 0, lora_name=lora, encoder=enc))
        header = bs.to_bytes(4, "little")
        for i in range(start_block, end_block):
            s = i * bs
            if (salt is not None and i == 0) or mm:
                extra = _encode_extra(_block_extra_keys(
                    s, s + bs, lora_name=lora, cache_salt=salt, mm_features=mm,
                    encoder=enc))
            else:
                extra = simple_extra
            try:
                toks = array("q", tokens[s:s + bs])
                if min(toks) < 0:
                    raise OverflowError
            except (OverflowError, TypeError):
                check_token_ids(tokens[s:s + bs], getattr(request, "request_id", None), s)
                raise
            parent = hash_fn(parent + header + toks.tobytes() + extra)
            hashes.append(parent)


_MM_ID_TYPES = (str, bytes, int, float)  # bool is an int


def _check_mm_features(request_id: Any, mm_features: Any) -> list[tuple[int, int, Any]] | None:
    """``mm_features`` as a list of ``(offset, length, identifier)`` (offset and length
    ints >= 0 in prompt positions, identifier a str, bytes or number), or None when
    empty; RequestError (field ``mm_features``) naming the entry otherwise."""
    if mm_features is None:
        return None
    from kvcore.errors import RequestError
    from kvcore.units import as_int, shorten

    def bad(what: str) -> RequestError:
        return RequestError(
            f"request {shorten(request_id)}: mm_features {what}; expected a list of "
            f"(offset, length, identifier) per multimodal input (offset and length: "
            f"ints >= 0 in prompt token positions; identifier: a str, bytes or number)",
            field="mm_features", value=shorten(mm_features))

    if isinstance(mm_features, (str, bytes)) or not hasattr(mm_features, "__iter__"):
        raise bad(f"must be a sequence, got {type(mm_features).__name__}")
    out = []
    for i, f in enumerate(mm_features):
        if isinstance(f, (str, bytes)) or not hasattr(f, "__len__") or len(f) != 3:
            raise bad(f"entry {i} is {shorten(f)}, not an (offset, length, identifier) "
                      f"triple")
        offset, length, ident = f
        ints = []
        for name, v in (("offset", offset), ("length", length)):
            n = v if type(v) is int else as_int(v)  # numpy integers too; bool refused
            if n is None or n < 0:
                raise bad(f"entry {i}: {name} {shorten(v)} is not an int >= 0")
            ints.append(n)
        offset, length = ints
        if not isinstance(ident, _MM_ID_TYPES):
            raise bad(f"entry {i}: identifier {shorten(ident)} is a "
                      f"{type(ident).__name__}")
        out.append((offset, length, ident))
    return out or None


class Request:
    """A request as the runtime sees it: token ids, progress, and block hashes.

    Any object with ``request_id``, ``all_token_ids``, ``num_computed_tokens`` and
    ``block_hashes`` (optional ``lora_name``, ``cache_salt``, ``mm_features``,
    ``num_encoder_tokens``, ``max_tokens``) works with :class:`KVCacheManager`; this
    class keeps ``block_hashes`` current as output tokens are appended.

    Parameters
    ----------
    request_id: unique id (non-empty str).
    prompt_token_ids: the prompt (non-empty list of int token ids).
    max_tokens: most output tokens (int >= 0; used by ``full_sequence_must_fit``).
    block_size, hash: the hash block size and function
        (:attr:`KVCacheManager.hash_block_size` and its ``hash``).
    lora_name, cache_salt, mm_features: extra keys (see the module docstring);
        ``mm_features`` lists ``(offset, length, identifier)`` per multimodal input
        (``mm_hashes`` gives the identifiers).
    num_encoder_tokens: encoder output length (cross-attention; int >= 0), 0 if none.
    encoder_id: the identity of the encoder input (e.g. the audio's hash; a str, bytes
        or number), hashed with ``num_encoder_tokens`` into every block (module
        docstring); without it a request with an encoder input gets no prefix hit.

    Raises :class:`~kvcore.errors.RequestError` naming the argument when one has the
    wrong type or range.
    """

    __slots__ = ("request_id", "all_token_ids", "num_prompt_tokens", "max_tokens",
                 "num_computed_tokens", "block_hashes", "lora_name", "cache_salt",
                 "mm_features", "num_encoder_tokens", "encoder_id", "_enc_key", "_hasher",
                 "_bs", "__weakref__")

    def __init__(self, request_id: str, prompt_token_ids: Sequence[int], *,
                 max_tokens: int = 0, block_size: int = 16,
                 hash: str | Callable[[bytes], bytes] | BlockHasher = "sha256",
                 lora_name: str | None = None, cache_salt: str | None = None,
                 mm_features: Sequence[tuple[int, int, str]] | None = None,
                 num_encoder_tokens: int = 0, encoder_id: Any = None) -> None:
        from kvcore.errors import RequestError
        from kvcore.units import as_int, shorten

        if type(request_id) is not str or not request_id:
            raise RequestError(f"request_id must be a non-empty str, got "
                               f"{shorten(request_id)}", field="request_id",
                               value=repr(request_id))
        counts = []
        for name, v in (("max_tokens", max_tokens),
                        ("num_encoder_tokens", num_encoder_tokens)):
            n = v if type(v) is int else as_int(v)  # numpy integers too; bool refused
            if n is None or n < 0:
                raise RequestError(f"request {request_id!r}: {name} must be an int >= 0 "
                                   f"(tokens), got {shorten(v)}", field=name,
                                   value=repr(v))
            counts.append(n)
        max_tokens, num_encoder_tokens = counts
        self.request_id = request_id
        if isinstance(prompt_token_ids, (str, bytes)) or not hasattr(prompt_token_ids,
                                                                   "__iter__"):
            raise RequestError(f"request {shorten(request_id)}: prompt_token_ids must be a "
                               f"sequence of token ids, got {shorten(prompt_token_ids)}",
                               field="prompt_token_ids")
        self.all_token_ids = list(prompt_token_ids)
        if not self.all_token_ids:
            raise RequestError(f"request {request_id!r}: prompt_token_ids is empty (a "
                               f"request needs at least one prompt token)",
                               field="prompt_token_ids", value=0)
        check_token_ids(self.all_token_ids, request_id)
        self.num_prompt_tokens = len(self.all_token_ids)
        self.max_tokens = max_tokens
        self.num_computed_tokens = 0
        self.block_hashes: list[BlockHash] = []
        self.lora_name = lora_name
        self.cache_salt = cache_salt
        self.mm_features = _check_mm_features(request_id, mm_features)
        for key, text in (("lora_name", lora_name), ("cache_salt", cache_salt)):
            if text is not None and not isinstance(text, str):
                raise RequestError(f"request {shorten(request_id)}: {key} must be a str "
                                   f"or None, got {shorten(text)} ({type(text).__name__})",
                                   field=key, value=repr(text))
        self.num_encoder_tokens = num_encoder_tokens
        if encoder_id is not None and (isinstance(encoder_id, bool)
                                       or not isinstance(encoder_id, _MM_ID_TYPES)):
            raise RequestError(f"request {shorten(request_id)}: encoder_id must be a "
                               f"str, bytes or number identifying the encoder input, got "
                               f"{shorten(encoder_id)} ({type(encoder_id).__name__})",
                               field="encoder_id", value=shorten(encoder_id))
        self.encoder_id = encoder_id
        self._enc_key = encoder_key(encoder_id, num_encoder_tokens)
        if self._enc_key is None and num_encoder_tokens:
            # an encoder input nothing identifies: a key no other request has, so no
            # block of it is ever a hit for another request (with or without encoder)
            import os

            self._enc_key = f"unidentified:{os.urandom(16).hex()}|{num_encoder_tokens}"
        if not isinstance(hash, BlockHasher):
            get_hash_function(hash)  # ConfigError naming ``hash`` for a bad one
        self._hasher = hash if isinstance(hash, BlockHasher) else BlockHasher(block_size,
                                                                                 hash)
        self._bs = self._hasher.block_size
        self._hasher.extend(self)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def mm_hashes(self) -> list[str]:
        """Identifiers of the multimodal inputs (from ``mm_features``)."""
        return [ident for _, _, ident in self.mm_features or ()]

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - self.num_prompt_tokens

    def append_output_token_ids(self, token_ids: int | Sequence[int]) -> None:
        """Append output token(s); hashes every block this completes."""
        toks = self.all_token_ids
        if type(token_ids) is int:
            toks.append(token_ids)
        else:
            toks.extend(token_ids)  # type: ignore[arg-type]
        if len(toks) // self._bs > len(self.block_hashes):
            self._hasher.extend(self)

    def copy(self, request_id: str | None = None) -> Request:
        """A fresh request (0 computed tokens) with the same tokens and hashes, without
        hashing again."""
        new = Request.__new__(Request)
        new.request_id = self.request_id if request_id is None else request_id
        new.all_token_ids = list(self.all_token_ids)
        new.num_prompt_tokens = self.num_prompt_tokens
        new.max_tokens = self.max_tokens
        new.num_computed_tokens = 0
        new.block_hashes = list(self.block_hashes)
        new.lora_name = self.lora_name
        new.cache_salt = self.cache_salt
        new.mm_features = list(self.mm_features) if self.mm_features else None
        new.num_encoder_tokens = self.num_encoder_tokens
        new.encoder_id = self.encoder_id
        new._enc_key = self._enc_key
        new._hasher = self._hasher
        new._bs = self._bs
        return new

    def __repr__(self) -> str:
        return (f"Request({self.request_id!r}, num_tokens={self.num_tokens}, "
                f"num_computed_tokens={self.num_computed_tokens})")
