"""Conformance vectors for KV-aware routers: kvcore's manager on a seeded workload, its
event stream and, before each admission, the hit the manager then gives.

A vector is one JSON object (format in docs/ROUTING.md)::

    {"format": "kvcore-routing-vectors", "version": 1, "name": ..., "seed": ...,
     "config": {"hash": "sha256", "hash_block_size": 4, "use_eagle": false,
                "max_model_len": 128, "num_blocks": 40,
                "groups": [{"layer_names": [...], "spec": {...}, "layer_specs": null},
                           ...]},
     "records": [{"op": "events", "seq": 0, "events": [...]},
                 {"op": "query", "request_id": "r3", "num_tokens": 37,
                  "num_prompt_tokens": 37, "token_ids": [...], "block_hashes": [...],
                  "hit": 24}, ...]}

Every ``events`` record is one batch (numbered 0, 1, ... on the one replica the
vector describes); a ``query`` record comes right after the batch holding every event
before that ``get_computed_blocks`` call, and ``hit`` is what the call returned
(tokens).  A router passes a vector when, fed the batches in order, it answers
``hit`` for every query.

:func:`generate` makes a vector (the scheduler loop of
``scripts/gen_routing_vectors.py``), :func:`load` reads one (file or dict),
:func:`check` replays it into a :class:`~kvcore.routing.ResidencyIndex` and returns
the mismatches.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvcore.routing.events import event_to_dict, hash_from_json, hash_to_json

__all__ = ["FORMAT", "VERSION", "Vector", "Mismatch", "generate", "load", "check",
           "config_to_dict", "config_from_dict", "dump"]

FORMAT = "kvcore-routing-vectors"
VERSION = 1


@dataclass
class Vector:
    """A loaded vector: its name, seed, ``KVCacheConfig``, index options and records
    (events hex-decoded as dicts, query hashes as bytes)."""

    name: str
    seed: int
    kv_cache_config: Any
    options: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def queries(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["op"] == "query"]


@dataclass(frozen=True)
class Mismatch:
    """A query the index answered differently: record index, request, expected and
    got (tokens)."""

    record: int
    request_id: str
    expected: int
    got: int


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The parts of a ``KVCacheConfig`` the hit rule reads: groups (layer names, spec,
    per-layer specs), ``num_blocks``, ``max_model_len``."""
    return {
        "num_blocks": cfg.num_blocks,
        "max_model_len": cfg.max_model_len,
        "groups": [{"layer_names": list(g.layer_names), "spec": g.spec.to_dict(),
                    "layer_specs": None if g.layer_specs is None
                    else [s.to_dict() for s in g.layer_specs]}
                   for g in cfg.kv_cache_groups],
    }


def config_from_dict(d: dict[str, Any]) -> Any:
    """Inverse of :func:`config_to_dict` (plugin kinds need their plugin)."""
    from kvcore.kv_cache_config import KVCacheConfig, KVCacheGroupSpec
    from kvcore.specs import KVCacheSpec

    groups = tuple(
        KVCacheGroupSpec(tuple(g["layer_names"]), KVCacheSpec.from_dict(g["spec"]),
                         None if g.get("layer_specs") is None
                         else tuple(KVCacheSpec.from_dict(s) for s in g["layer_specs"]))
        for g in d["groups"])
    return KVCacheConfig(num_blocks=d.get("num_blocks"), kv_cache_tensors=(),
                         kv_cache_groups=groups, max_model_len=d.get("max_model_len") or 0)


# ---- generation --------------------------------------------------------------------
def generate(name: str, kv_cache_config: Any, *, seed: int, num_requests: int = 24,
             max_num_seqs: int = 3, token_budget: int = 48, max_prompt: int = 60,
             max_tokens: int = 6, use_eagle: bool = False, num_lookahead: int = 0,
             reset_every: int = 0, hash: str = "sha256", max_model_len: int | None = None,
             on_query: Callable[[Any, int], None] | None = None) -> dict[str, Any]:
    """Run kvcore's :class:`~kvcore.runtime.KVCacheManager` on a seeded workload and
    return the vector as a JSON-ready dict (module docstring).

    The workload: ``num_requests`` prompts built from three shared prefixes (so
    prefixes repeat, partly and wholly) plus random suffixes, at most ``max_prompt``
    tokens, each generating 1 to ``max_tokens`` tokens; a step admits waiting requests
    up to ``max_num_seqs`` running and ``token_budget`` tokens (prefill chunked, each
    chunk capped by ``max_prefill_chunk_tokens``, as an engine does); a request whose
    slots do not fit preempts the newest running one (freed, recomputed later); every
    ``reset_every`` finished requests the prefix cache is reset when idle.  Events are
    drained before every admission (one batch each).  ``max_model_len``: tokens
    (default the plan's, else 128).  ``on_query(request, hit)`` sees each admission.
    """
    from kvcore.runtime.manager import KVCacheManager

    rng = random.Random(seed)
    if max_model_len is None and not getattr(kv_cache_config, "max_model_len", 0):
        max_model_len = 128
    mgr = KVCacheManager(kv_cache_config, enable_events=True, use_eagle=use_eagle,
                         hash=hash, max_num_batched_tokens=token_budget,
                         max_model_len=max_model_len)
    mml = mgr.max_model_len
    max_prompt = min(max_prompt, mml - max_tokens - num_lookahead - 1)
    prefixes = [[rng.randrange(1, 500) for _ in range(rng.randrange(4, max_prompt))]
                for _ in range(3)]
    prompts: list[list[int]] = []
    for _ in range(num_requests):
        p = list(rng.choice(prefixes))
        if rng.random() < 0.3 and prompts:
            p = list(rng.choice(prompts))  # an exact repeat
        else:
            p = p[:rng.randrange(1, len(p) + 1)]
            p += [rng.randrange(1, 500) for _ in range(rng.randrange(0, 12))]
        prompts.append(p[:max_prompt] or [1])
    waiting = [mgr.make_request(f"r{i}", p, max_tokens=rng.randrange(1, max_tokens + 1))
               for i, p in enumerate(prompts)]
    running: list[Any] = []
    records: list[dict[str, Any]] = []
    seq = 0
    finished = 0

    def drain() -> None:
        nonlocal seq
        evs = mgr.take_events()
        if evs:
            records.append({"op": "events", "seq": seq,
                            "events": [event_to_dict(e) for e in evs]})
            seq += 1

    steps = 0
    while (waiting or running) and steps < 20 * num_requests + 100:
        steps += 1
        budget = token_budget
        # running requests first (decode, or the next prefill chunk)
        for req in list(running):
            if budget <= 0:
                break
            if req not in running:  # preempted by an earlier one this step
                continue
            nc = req.num_computed_tokens
            n = len(req.all_token_ids) - nc
            n = min(n, budget)
            n = mgr.max_prefill_chunk_tokens(req, n) if n > 1 else n
            got = mgr.allocate_slots(req, n, num_lookahead_tokens=num_lookahead)
            while got is None and len(running) > 1:
                victim = running.pop()
                mgr.free(victim)
                victim.num_computed_tokens = 0
                waiting.insert(0, victim)
                if victim is req:
                    break
                got = mgr.allocate_slots(req, n, num_lookahead_tokens=num_lookahead)
            if got is None or req not in running:
                continue
            budget -= n
            req.num_computed_tokens = nc + n
        # admissions
        while waiting and len(running) < max_num_seqs and budget > 0:
            req = waiting[0]
            drain()
            blocks, hit = mgr.get_computed_blocks(req)
            q = {"op": "query", "request_id": req.request_id,
                 "num_tokens": len(req.all_token_ids),
                 "num_prompt_tokens": req.num_prompt_tokens,
                 "token_ids": list(req.all_token_ids),
                 "block_hashes": [hash_to_json(h) for h in req.block_hashes],
                 "hit": hit}
            records.append(q)
            if on_query is not None:
                on_query(req, hit)
            n = min(len(req.all_token_ids) - hit, budget)
            if n > 1:
                n = mgr.max_prefill_chunk_tokens(req, n, hit)
            got = mgr.allocate_slots(req, n, hit, blocks,
                                     num_lookahead_tokens=num_lookahead)
            if got is None:
                break
            waiting.pop(0)
            running.append(req)
            req.num_computed_tokens = hit + n
            budget -= n
        # outputs: a request whose prompt is computed samples one token
        for req in list(running):
            if req.num_computed_tokens < len(req.all_token_ids):
                continue
            if req.num_output_tokens >= req.max_tokens:
                running.remove(req)
                mgr.free(req)
                finished += 1
                if reset_every and finished % reset_every == 0 and not running:
                    mgr.reset_prefix_cache()
                continue
            req.append_output_token_ids(rng.randrange(1, 500))
        if not running and waiting and steps > 10 * num_requests:
            break
    drain()
    return {
        "format": FORMAT, "version": VERSION, "name": name, "seed": seed,
        "config": {"hash": hash, "hash_block_size": mgr.hash_block_size,
                   "use_eagle": use_eagle, **config_to_dict(kv_cache_config),
                   "max_model_len": mml},
        "records": records,
    }


def dump(vector: dict[str, Any], path: str | Path) -> None:
    """Write a vector compactly (one record per line)."""
    head = {k: v for k, v in vector.items() if k != "records"}
    lines = [json.dumps(r, separators=(",", ":")) for r in vector["records"]]
    text = json.dumps(head, separators=(",", ":"))[:-1] + ',"records":[\n' + \
        ",\n".join(lines) + "\n]}\n"
    Path(path).write_text(text)


# ---- reading and checking ----------------------------------------------------------
def load(src: str | Path | dict[str, Any]) -> Vector:
    """A vector from a file path or an already parsed dict.  Raises
    :class:`~kvcore.errors.ConfigError` for another format or version, a path that
    cannot be read, or a file that is not such a vector (naming the field)."""
    from kvcore.errors import ConfigError, KVCoreError

    try:
        return _load(src)
    except KVCoreError:
        raise
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise ConfigError(f"vector {str(src)[:80]!r}: cannot be read as a {FORMAT} "
                          f"v{VERSION} file ({type(e).__name__}: {e})"[:300],
                          field="src", value=str(src)[:80]) from e


def _load(src: Any) -> Vector:
    from kvcore.errors import ConfigError

    if not isinstance(src, (str, Path, dict)):
        raise ConfigError(f"src: expected a path or a dict, got {type(src).__name__}",
                          field="src", value=type(src).__name__)
    from kvcore.userfiles import read_json

    # a file: the shared reader (bounded; bad JSON or nesting too deep a ConfigError)
    d = src if isinstance(src, dict) else read_json(Path(src), f"a {FORMAT} file",
                                                    field="src")
    if not isinstance(d, dict):
        raise ConfigError(f"not a {FORMAT} file (a JSON {type(d).__name__})",
                          field="format", value=None)
    if d.get("format") != FORMAT or d.get("version") != VERSION:
        raise ConfigError(f"not a {FORMAT} v{VERSION} file (format {d.get('format')!r}, "
                          f"version {d.get('version')!r})", field="format",
                          value=d.get("format"))
    from kvcore.userfiles import check_keys

    check_keys(d, ("format", "version", "name", "seed", "config", "records"),
               f"{src}" if not isinstance(src, dict) else f"a {FORMAT} object")
    c = d.get("config")
    recs = d.get("records")
    if not isinstance(c, dict) or not isinstance(recs, list):
        raise ConfigError("a vector needs a 'config' object and a 'records' list",
                          field="config" if not isinstance(c, dict) else "records",
                          value=None)
    where = f"{src}" if not isinstance(src, dict) else f"a {FORMAT} object"
    check_keys(c, _VECTOR_CONFIG_FIELDS, f"{where}: config")
    cfg = config_from_dict(c)
    opts = {"hash": c.get("hash", "sha256"), "use_eagle": bool(c.get("use_eagle")),
            "max_model_len": c.get("max_model_len"),
            "hash_block_size": c.get("hash_block_size")}
    _check_records(recs, opts, where)
    return Vector(d.get("name", ""), int(d.get("seed", 0)), cfg, opts, d["records"])


#: the keys of a vector's config object and of its records, by op (what generate writes)
_VECTOR_CONFIG_FIELDS = ("hash", "hash_block_size", "use_eagle", "num_blocks", "max_model_len",
                "groups")
_RECORD_KEYS = {"events": ("op", "seq", "events"),
                "query": ("op", "request_id", "num_tokens", "num_prompt_tokens",
                          "token_ids", "block_hashes", "hit")}


def _check_records(recs: list[Any], opts: dict[str, Any], where: str) -> None:
    """Every record an object with a known op and only its keys (tester T17: a
    misspelled op was skipped, so a vector whose query was lost still passed), and a
    query's block_hashes the hashes of its token_ids under the vector's hash and hash
    block size (the file is a conformance contract for routers that hash tokens)."""
    from kvcore.errors import ConfigError
    from kvcore.units import shorten
    from kvcore.userfiles import check_keys

    hbs = opts.get("hash_block_size")
    for i, rec in enumerate(recs):
        if not isinstance(rec, dict):
            raise ConfigError(f"{where}: records[{i}] is a {type(rec).__name__}, not an "
                              f"object", field="records", record=i)
        op = rec.get("op")
        if op not in _RECORD_KEYS:
            raise ConfigError(f"{where}: records[{i}] has op {shorten(op)}; valid: "
                              f"{', '.join(_RECORD_KEYS)}", field="op", record=i,
                              value=shorten(op))
        check_keys(rec, _RECORD_KEYS[op], f"{where}: records[{i}]")
        tokens = rec.get("token_ids")
        if op != "query" or tokens is None or not hbs:
            continue
        from kvcore.runtime.hashing import Request

        try:
            want = [hash_to_json(h) for h in Request(
                "vector-check", tokens, block_size=hbs, hash=opts["hash"]).block_hashes]
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: records[{i}] token_ids cannot be hashed "
                              f"({type(e).__name__}: {e})"[:300], field="token_ids",
                              record=i) from None
        if rec.get("block_hashes") != want:
            raise ConfigError(f"{where}: records[{i}] (request "
                              f"{shorten(rec.get('request_id'))}): its block_hashes are not "
                              f"the {opts['hash']} hashes of its token_ids at "
                              f"hash_block_size {hbs}", field="block_hashes", record=i)


def check(vector: Any, index: Any = None, *, replica: str = "r") -> list[Mismatch]:
    """Replay ``vector`` (a :class:`Vector`, a path or a dict) into ``index`` (default:
    a fresh :class:`~kvcore.routing.ResidencyIndex` of the vector's config) on one
    replica, and return every query the index answers differently from ``hit``
    (empty: the index passes).  Raises :class:`~kvcore.errors.KVEventError` if an
    event is rejected and :class:`~kvcore.errors.ConfigError` if the index's
    ``hash_block_size`` differs from the vector's."""
    from kvcore.errors import ConfigError, KVCoreError, KVEventError
    from kvcore.routing.index import ResidencyIndex

    v = vector if isinstance(vector, Vector) else load(vector)
    if index is not None and not isinstance(index, ResidencyIndex):
        raise ConfigError(f"index: expected a ResidencyIndex or None, got "
                          f"{type(index).__name__}", field="index",
                          value=type(index).__name__)
    try:
        return _check(v, index, replica)
    except KVCoreError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise KVEventError(f"vector {v.name!r}: a malformed record ({type(e).__name__}: "
                           f"{e})"[:300], field="records", value=v.name) from e


def _check(v: Vector, index: Any, replica: Any) -> list[Mismatch]:
    from kvcore.errors import ConfigError
    from kvcore.routing.index import ResidencyIndex

    if index is None:
        index = ResidencyIndex(v.kv_cache_config, use_eagle=v.options["use_eagle"],
                               hash=v.options["hash"],
                               max_model_len=v.options["max_model_len"])
    hbs = v.options.get("hash_block_size")
    if hbs is not None and hbs != index.hash_block_size:
        raise ConfigError(f"vector {v.name!r} hashes {hbs}-token blocks, the index "
                          f"{index.hash_block_size}", field="hash_block_size", value=hbs)
    index.reset_replica(replica, next_seq=0)
    out = []
    for i, rec in enumerate(v.records):
        if rec["op"] == "events":
            index.apply(replica, rec["events"], rec["seq"])
        elif rec["op"] == "query":
            hashes = [hash_from_json(h) for h in rec["block_hashes"]]
            got = index.longest_prefix(hashes, rec["num_tokens"], replicas=[replica],
                                       num_prompt_tokens=rec.get("num_prompt_tokens")
                                       )[replica]
            if got != rec["hit"]:
                out.append(Mismatch(i, rec["request_id"], rec["hit"], got))
    return out
