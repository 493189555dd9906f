"""``vllm bench serve``'s datasets as ``--dataset-name`` names them (vLLM 0.32
``vllm/benchmarks/datasets/datasets.py``: ``add_dataset_parser``, ``get_samples`` and
the dataset classes), as :class:`~kvcore.sim.traces.TraceRequest` lists.

kvcore has no model server: it needs each request's prompt length, output length and
which prompts share which prefix (what the prefix cache sees).  Token ids are kvcore's
synthetic ones (:mod:`kvcore.sim.tokens`) except for ShareGPT, whose prompts are
tokenized: equal prefixes get equal ids, different ones different ids.

* ``random``: :func:`kvcore.sim.workload.random_dataset` (``RandomDataset``).
* ``prefix_repetition`` (:func:`prefix_repetition_dataset`,
  ``PrefixRepetitionRandomDataset``): ``num_prefixes`` prefixes of ``prefix_len``
  tokens, each followed by ``num_prompts // num_prefixes`` prompts of its own
  ``suffix_len`` tokens (prompt length ``prefix_len + suffix_len``; vLLM makes
  ``num_prefixes * (num_prompts // num_prefixes)`` requests, no more), all with
  ``output_len`` output tokens, generated prefix by prefix and then shuffled with
  Python's ``random`` seeded with ``--seed`` (``random.seed(seed)`` in the dataset's
  constructor, ``random.shuffle(requests)`` at the end of ``sample``; nothing between
  draws from ``random``), unless ``--disable-shuffle``.  vLLM re-tokenizes its random
  token ids, so a real tokenizer may shift a prompt by a token or two (vLLM logs the
  mismatch); kvcore's lengths are the exact ones vLLM aims at.
* ``burstgpt`` (:func:`burstgpt_dataset`, ``BurstGPTDataset``): the rows of the
  ``--dataset-path`` CSV whose ``Model`` is ``GPT-4`` and whose ``Response tokens`` is
  > 0, then ``DataFrame.sample(n=num_prompts, random_state=seed)`` (with
  ``replace=True`` when ``num_prompts`` exceeds the rows), which is
  ``numpy.random.RandomState(seed).choice(rows, num_prompts, replace)`` (pandas
  ``core/sample.py``); prompt length from ``Request tokens``, output length from
  ``Response tokens`` (vLLM reads the third and fourth columns by position: these two in
  BurstGPT's published header ``Timestamp,Model,Request tokens,Response tokens,Total
  tokens,Log Type``, https://github.com/HPMLL/BurstGPT; kvcore reads them by name).
  The trace's timestamps are not used (arrivals from ``--request-rate``, as vLLM).
  vLLM's prompt ``i`` is the token ids ``(i + j) % vocab_size``, so no two prompts share
  a prefix (below ``vocab_size`` prompts); kvcore gives each its own token stream.
  Without numpy the rows come from :mod:`random` (same distribution, other rows).
* ``sharegpt`` (:func:`sharegpt_dataset`, ``ShareGPTDataset``): the entries of the
  ``--dataset-path`` JSON with at least two ``conversations`` turns, shuffled with
  ``random.seed(seed); random.shuffle`` (unless ``--disable-shuffle``); for each, the
  first turn is the prompt and the second the completion, both tokenized with the
  model's tokenizer as ``tokenizer(text).input_ids`` (special tokens included: what the
  completions endpoint counts; a chat template's tokens are not modelled); an
  entry is kept when ``is_valid_sequence``: prompt >= 4 tokens, output >= 4 (not
  checked with ``--sharegpt-output-len``, which replaces the output length), prompt
  <= 1024 and prompt + output <= 2048; the first ``num_prompts`` kept, then, short of
  ``num_prompts``, oversampled with ``random.seed(seed); random.choice`` (unless
  ``--no-oversample``).  The tokenizer is ``--tokenizer PATH`` (a local folder with
  ``tokenizer.json``), loaded with ``transformers`` when it is importable, else with
  ``tokenizers``; neither installed: an error saying so.  Images and videos of
  multimodal entries are not modelled (their text tokens are).

:func:`dataset_requests` builds any of them from the flags' values; :data:`DATASET_FLAGS`
lists each dataset's flags with vLLM's defaults and :func:`check_dataset_flags` refuses
a flag the chosen dataset does not read (naming it).
"""

from __future__ import annotations

import csv
import math
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvcore.errors import ConfigError, shorten
from kvcore.sim.traces import TraceRequest
from kvcore.sim.workload import (
    _OUTPUT_BASE,
    MAX_NUM_PROMPTS,
    RANDOM_STREAM_BASE,
    _int,
    _np,
    random_dataset,
)
from kvcore.units import check_path

__all__ = ["DATASET_NAMES", "DATASET_FLAGS", "GENERAL_DATASET_FLAGS",
           "prefix_repetition_dataset",
           "burstgpt_dataset", "read_burstgpt", "sharegpt_dataset", "load_tokenizer",
           "dataset_requests", "check_dataset_flags", "PREFIX_REPETITION_STREAM_BASE"]

#: ``--dataset-name`` values kvcore reads (a subset of vLLM 0.32's choices)
DATASET_NAMES = ("random", "prefix_repetition", "burstgpt", "sharegpt")

#: token streams of the repeated prefixes (above the random dataset's unique streams,
#: below :data:`kvcore.sim.traces.UNIQUE_BASE`)
PREFIX_REPETITION_STREAM_BASE = (5 << 29) + (1 << 28)

#: each dataset's flags (argparse dest) and vLLM 0.32's defaults (``add_dataset_parser``,
#: ``PrefixRepetitionRandomDataset.DEFAULT_*``); ``--num-prompts`` (default 1000) and
#: ``--seed`` belong to every dataset
DATASET_FLAGS: dict[str, tuple[tuple[str, Any], ...]] = {
    "random": (("random_input_len", 1024), ("random_output_len", 128),
               ("random_prefix_len", 0), ("random_range_ratio", 0.0)),
    "prefix_repetition": (("prefix_repetition_prefix_len", 256),
                          ("prefix_repetition_suffix_len", 256),
                          ("prefix_repetition_num_prefixes", 10),
                          ("prefix_repetition_output_len", 128),
                          ("disable_shuffle", False)),
    "burstgpt": (("dataset_path", None),),
    "sharegpt": (("dataset_path", None), ("tokenizer", None),
                 ("sharegpt_output_len", None), ("disable_shuffle", False),
                 ("no_oversample", False)),
}

#: vLLM 0.32's general dataset flags (``add_dataset_parser``, datasets.py:1625-1643):
#: ``get_samples`` passes them to every dataset, so any ``--dataset-name`` takes them; only
#: the datasets listing them in :data:`DATASET_FLAGS` read them (vLLM's RandomDataset and
#: BurstGPTDataset neither shuffle nor oversample: there they are no-ops, as in vLLM)
GENERAL_DATASET_FLAGS: tuple[tuple[str, Any], ...] = (("disable_shuffle", False),
                                                      ("no_oversample", False))

#: the BurstGPT columns kvcore reads
BURSTGPT_COLUMNS = ("Model", "Request tokens", "Response tokens")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def prefix_repetition_dataset(num_prompts: int, prefix_len: int = 256,
                              suffix_len: int = 256, num_prefixes: int = 10,
                              output_len: int = 128, seed: int = 0,
                              disable_shuffle: bool = False) -> list[TraceRequest]:
    """vLLM's ``prefix_repetition`` dataset (module docstring): ``num_prefixes *
    (num_prompts // num_prefixes)`` requests, ids ``"0"``, ``"1"``, ... in the shuffled
    order, all arriving at 0.  Request ``k`` from prefix ``p`` reads prefix stream
    ``PREFIX_REPETITION_STREAM_BASE + p`` (``prefix_len`` tokens) then a stream of its
    own (``suffix_len`` tokens).

    Lengths in tokens.  Raises ConfigError naming the field: a length < 0, a prompt of
    0 tokens, ``output_len`` or ``num_prefixes`` < 1, ``num_prompts`` outside [1,
    :data:`MAX_NUM_PROMPTS`], or ``num_prompts < num_prefixes`` (vLLM's ValueError).
    """
    _int("num_prompts", num_prompts, 1, MAX_NUM_PROMPTS)
    _int("prefix_repetition_prefix_len", prefix_len, 0)
    _int("prefix_repetition_suffix_len", suffix_len, 0)
    _int("prefix_repetition_num_prefixes", num_prefixes, 1)
    _int("prefix_repetition_output_len", output_len, 1)
    _int("seed", seed, 0)
    if prefix_len + suffix_len < 1:
        raise ConfigError("--prefix-repetition-prefix-len 0 with "
                          "--prefix-repetition-suffix-len 0 gives empty prompts; the "
                          "prompt (prefix + suffix) must be >= 1 token",
                          field="prefix_repetition_suffix_len", value=suffix_len)
    per_prefix = num_prompts // num_prefixes
    if per_prefix == 0:
        raise ConfigError(f"--num-prompts {num_prompts} is below "
                          f"--prefix-repetition-num-prefixes {num_prefixes}; vLLM makes "
                          f"num_prompts // num_prefixes prompts per prefix, which must be "
                          f">= 1", field="prefix_repetition_num_prefixes",
                          value=num_prefixes)
    order = list(range(num_prefixes * per_prefix))  # generation order: prefix-major
    if not disable_shuffle:
        random.Random(seed).shuffle(order)  # random.seed(seed); random.shuffle(...)
    out: list[TraceRequest] = []
    for k, g in enumerate(order):
        p = g // per_prefix
        segs = [(PREFIX_REPETITION_STREAM_BASE + p, 0, prefix_len)] if prefix_len else []
        if suffix_len:
            segs.append((RANDOM_STREAM_BASE + g, 0, suffix_len))
        out.append(TraceRequest(request_id=str(k), arrival_ms=0.0,
                                prompt_len=prefix_len + suffix_len, output_len=output_len,
                                output_stream=_OUTPUT_BASE + k, segments=segs))
    return out


#: the strings pandas' ``read_csv`` reads as NaN by default (``na_values``)
_PANDAS_NA = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN",
                        "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN",
                        "None", "n/a", "nan", "null"})


def _number(path: Path, line: int, column: str, text: str) -> float:
    """A CSV cell as pandas reads a numeric column (its NA strings: NaN)."""
    if text in _PANDAS_NA:
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{path}:{line}: column {column!r} must be a number, got "
                          f"{text[:40]!r}", field="dataset_path", value=str(path),
                          line=line) from None


def read_burstgpt(path: str | os.PathLike[str]) -> list[tuple[float, int, int]]:
    """The rows of a BurstGPT CSV that vLLM's ``BurstGPTDataset.load_data`` keeps
    (``Model == "GPT-4"`` and ``Response tokens > 0``) as ``(request_tokens,
    response_tokens, line)`` in file order (``line``: 1-based, the header is line 1;
    ``request_tokens`` NaN where the cell is empty, as pandas reads it).

    Raises ConfigError (``field="dataset_path"``) for a missing or unreadable file, a
    header without the columns of :data:`BURSTGPT_COLUMNS`, a non-numeric cell, or no
    row kept.
    """
    import io

    from kvcore.userfiles import MAX_DATA_BYTES, read_bytes

    p = check_path(path, "dataset_path")
    # bounded, whatever the path is (/dev/zero was read forever)
    raw = read_bytes(p, "the BurstGPT CSV of --dataset-path", limit=MAX_DATA_BYTES,
                     field="dataset_path", value=str(p))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--dataset-path {p}: not a readable CSV ({exc})",
                          field="dataset_path", value=str(p)) from None
    rows: list[tuple[float, int, int]] = []
    with io.StringIO(text, newline="") as fh:
        try:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in BURSTGPT_COLUMNS if c not in header]
            if missing:
                raise ConfigError(
                    f"--dataset-path {p}: a BurstGPT CSV needs the columns "
                    f"{', '.join(repr(c) for c in BURSTGPT_COLUMNS)} (BurstGPT's header: "
                    f"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log "
                    f"Type); missing {', '.join(repr(c) for c in missing)}",
                    field="dataset_path", value=str(p))
            for i, row in enumerate(reader):
                line = i + 2
                if row.get("Model") != "GPT-4":
                    continue
                resp = _number(p, line, "Response tokens", row.get("Response tokens") or "")
                if not resp > 0:  # NaN too, as pandas' comparison
                    continue
                req = _number(p, line, "Request tokens", row.get("Request tokens") or "")
                if math.isinf(resp):
                    raise ConfigError(f"{p}:{line}: 'Response tokens' must be a finite "
                                      f"number, got {resp}", field="dataset_path",
                                      value=str(p), line=line)
                rows.append((req, int(resp), line))
        except (csv.Error, UnicodeDecodeError) as exc:
            raise ConfigError(f"--dataset-path {p}: not a readable CSV ({exc})",
                              field="dataset_path", value=str(p)) from None
    if not rows:
        raise ConfigError(f"--dataset-path {p}: no row with Model 'GPT-4' and Response "
                          f"tokens > 0 (vLLM's BurstGPT filter)", field="dataset_path",
                          value=str(p))
    return rows


def burstgpt_dataset(path: str | os.PathLike[str], num_prompts: int = 1000,
                     seed: int = 0) -> list[TraceRequest]:
    """``num_prompts`` requests of vLLM's ``burstgpt`` dataset (module docstring), ids
    ``"0"``, ``"1"``, ..., all arriving at 0, each prompt its own token stream.

    Raises ConfigError as :func:`read_burstgpt`, and naming the CSV line when a drawn
    row's ``Request tokens`` is < 1 (vLLM would send an empty prompt) or empty (vLLM's
    ``int(nan)`` fails).
    """
    _int("num_prompts", num_prompts, 1, MAX_NUM_PROMPTS)
    _int("seed", seed, 0)
    rows = read_burstgpt(path)
    replace = num_prompts > len(rows)
    np = _np()
    if np is not None:
        idx = np.random.RandomState(seed).choice(len(rows), size=num_prompts,
                                                 replace=replace).tolist()
    else:  # pragma: no cover - numpy is optional
        prng = random.Random(seed)
        idx = (prng.choices(range(len(rows)), k=num_prompts) if replace
               else prng.sample(range(len(rows)), num_prompts))
    out: list[TraceRequest] = []
    for i, r in enumerate(idx):
        cell, resp, line = rows[r]
        if not math.isfinite(cell) or cell < 1:
            why = ("empty or NaN" if math.isnan(cell) else f"{cell:g}; vLLM would send an empty "
                   f"prompt")
            raise ConfigError(f"{path}:{line}: 'Request tokens' is {why} (drop the row or "
                              f"choose another --seed)", field="dataset_path",
                              value=str(path), line=line)
        req = int(cell)
        out.append(TraceRequest(request_id=str(i), arrival_ms=0.0, prompt_len=req,
                                output_len=resp, output_stream=_OUTPUT_BASE + i,
                                segments=[(RANDOM_STREAM_BASE + i, 0, req)]))
    return out


def load_tokenizer(path: str | os.PathLike[str] | None) -> Callable[[str], list[int]]:
    """A function ``text -> token ids`` as vLLM's ShareGPT sampling calls the
    tokenizer (``tokenizer(text).input_ids``: special tokens added), from a local folder
    holding ``tokenizer.json`` (or that file): ``transformers.AutoTokenizer`` when
    ``transformers`` is importable, else ``tokenizers.Tokenizer.from_file``.

    Raises ConfigError (``field="tokenizer"``) when no path is given, the path has no
    ``tokenizer.json``, neither library is installed, or loading fails.
    """
    if path is None:
        raise ConfigError("--dataset-name sharegpt needs --tokenizer PATH (a local folder "
                          "with the model's tokenizer.json): ShareGPT's lengths are "
                          "token counts of its text", field="tokenizer", value=None)
    p = check_path(path, "tokenizer")
    folder = p.parent if p.is_file() else p
    file = p if p.is_file() else p / "tokenizer.json"
    if not file.is_file():
        raise ConfigError(f"--tokenizer {p}: no tokenizer.json there (give a local folder "
                          f"with the model's tokenizer.json)", field="tokenizer",
                          value=str(p))
    try:
        import transformers
    except ImportError:
        transformers = None
    try:
        if transformers is not None:
            hf = transformers.AutoTokenizer.from_pretrained(str(folder))
            return lambda text: list(hf(text).input_ids)
        try:
            import tokenizers
        except ImportError:
            raise ConfigError("--dataset-name sharegpt counts tokens with the model's "
                              "tokenizer: pip install transformers (or tokenizers)",
                              field="tokenizer", value=str(p)) from None
        tk = tokenizers.Tokenizer.from_file(str(file))
        return lambda text: list(tk.encode(text).ids)
    except ConfigError:
        raise
    except Exception as exc:  # the libraries raise many kinds for a bad file
        raise ConfigError(f"--tokenizer {p}: cannot load the tokenizer "
                          f"({type(exc).__name__}: {str(exc)[:120]})", field="tokenizer",
                          value=str(p)) from None


def _valid_sequence(prompt_len: int, output_len: int, skip_output_check: bool) -> bool:
    """vLLM's ``is_valid_sequence`` with its defaults (min_len 4, max_prompt_len 1024,
    max_total_len 2048)."""
    return not (prompt_len < 4 or (not skip_output_check and output_len < 4)
                or prompt_len > 1024 or prompt_len + output_len > 2048)


def sharegpt_dataset(path: str | os.PathLike[str], tokenize: Callable[[str], Sequence[int]],
                     num_prompts: int = 1000, seed: int = 0, output_len: int | None = None,
                     disable_shuffle: bool = False, no_oversample: bool = False
                     ) -> list[TraceRequest]:
    """vLLM's ``sharegpt`` requests (module docstring) from the JSON at ``path``, with
    ``tokenize`` (``text -> token ids``, :func:`load_tokenizer`); the prompt's token ids
    are the tokenizer's.  Ids ``"0"``, ``"1"``, ... (oversampled copies get the next
    ones), all arriving at 0; fewer than ``num_prompts`` with ``no_oversample``.

    Raises ConfigError (``field="dataset_path"``) for an unreadable file, JSON that is
    not a list of entries, or no entry passing vLLM's filters; ``output_len`` < 1
    (``field="sharegpt_output_len"``).
    """
    _int("num_prompts", num_prompts, 1, MAX_NUM_PROMPTS)
    _int("seed", seed, 0)
    if output_len is not None:
        _int("sharegpt_output_len", output_len, 1)
    if not callable(tokenize):
        raise ConfigError(f"tokenize must be a callable text -> token ids "
                          f"(load_tokenizer's), got {shorten(tokenize)}", field="tokenize",
                          value=shorten(tokenize))
    for nm, flag in (("disable_shuffle", disable_shuffle), ("no_oversample", no_oversample)):
        if not isinstance(flag, bool):
            raise ConfigError(f"{nm} must be True or False, got {shorten(flag)}", field=nm,
                              value=shorten(flag))
    from kvcore.userfiles import MAX_DATA_BYTES, loads_json, read_bytes

    p = check_path(path, "dataset_path")
    # the shared readers: bounded bytes; bad JSON, nesting too deep, non-UTF-8 named
    raw = read_bytes(p, "the ShareGPT JSON of --dataset-path", limit=MAX_DATA_BYTES,
                     field="dataset_path", value=str(p))
    data = loads_json(raw, f"--dataset-path {p}", field="dataset_path", value=str(p))
    if not isinstance(data, list):
        raise ConfigError(f"--dataset-path {p}: a ShareGPT file is a JSON list of entries "
                          f"with 'conversations', got {type(data).__name__}",
                          field="dataset_path", value=str(p))
    data = [e for e in data if isinstance(e, dict) and "conversations" in e
            and isinstance(e["conversations"], list) and len(e["conversations"]) >= 2]
    if not disable_shuffle:
        random.Random(seed).shuffle(data)  # random.seed(seed); random.shuffle(self.data)
    kept: list[tuple[list[int], int]] = []
    for entry in data:
        if len(kept) >= num_prompts:
            break
        turns = entry["conversations"]
        try:
            prompt, completion = str(turns[0]["value"]), str(turns[1]["value"])
        except (TypeError, KeyError):
            raise ConfigError(f"--dataset-path {p}: a conversation turn without 'value' "
                              f"({str(turns[:2])[:80]})", field="dataset_path",
                              value=str(p)) from None
        ids = list(tokenize(prompt))
        out_len = len(tokenize(completion)) if output_len is None else output_len
        if not _valid_sequence(len(ids), out_len, output_len is not None):
            continue
        kept.append((ids, out_len))
    if not kept:
        raise ConfigError(f"--dataset-path {p}: no conversation passes vLLM's ShareGPT "
                          f"filters (prompt 4..1024 tokens, output >= 4, prompt + output "
                          f"<= 2048)", field="dataset_path", value=str(p))
    order = list(range(len(kept)))
    if len(kept) < num_prompts and not no_oversample:
        prng = random.Random(seed)  # random.seed(seed); random.choice(requests)
        pool = list(order)
        order += [prng.choice(pool) for _ in range(num_prompts - len(kept))]
    out: list[TraceRequest] = []
    for i, k in enumerate(order):
        ids, out_len = kept[k]
        out.append(TraceRequest(request_id=str(i), arrival_ms=0.0, prompt_len=len(ids),
                                output_len=out_len, output_stream=_OUTPUT_BASE + i,
                                token_ids=ids))
    return out


def check_dataset_flags(args: Any, *, defaults: dict[str, Any] | None = None) -> None:
    """Refuse a dataset flag the chosen ``args.dataset`` does not read (or any, with no
    dataset), naming it; then fill the chosen dataset's defaults (vLLM's, or
    ``defaults``) and ``num_prompts`` (1000).  ``args`` is an argparse namespace;
    missing attributes count as not given.  Raises ConfigError.
    """
    name = getattr(args, "dataset", None)
    mine = {k for k, _ in DATASET_FLAGS.get(name or "", ())}
    if name is not None:  # vLLM's general dataset flags: every dataset takes them
        mine |= {k for k, _ in GENERAL_DATASET_FLAGS}
    owners: dict[str, list[str]] = {}
    for ds_name, flags in DATASET_FLAGS.items():
        for k, _ in flags:
            owners.setdefault(k, []).append(ds_name)
    for k, ds in owners.items():
        v = getattr(args, k, None)
        if v is None or v is False or k in mine:
            continue
        shown = "" if v is True else f" {v}"
        if name is None:
            raise ConfigError(f"{_flag(k)}{shown}: shapes vllm bench serve's "
                              f"{' / '.join(ds)} dataset; give --dataset-name {ds[0]} "
                              f"(--dataset {ds[0]}; a trace's requests have their own "
                              f"lengths)", field=k, value=v if v is not True else True)
        raise ConfigError(f"{_flag(k)}{shown}: shapes the {' / '.join(ds)} dataset, not "
                          f"--dataset-name {name}; drop it", field=k,
                          value=v if v is not True else True)
    if name is None:
        if getattr(args, "num_prompts", None) is not None:
            raise ConfigError(f"--num-prompts {args.num_prompts}: sizes vllm bench serve's "
                              f"datasets; give --dataset-name random (--dataset random; a "
                              f"trace has its own requests, --limit takes its first N)",
                              field="num_prompts", value=args.num_prompts)
        return
    fill = dict(GENERAL_DATASET_FLAGS)
    fill.update(DATASET_FLAGS[name])
    fill["num_prompts"] = 1000
    fill.update(defaults or {})
    for k, default in fill.items():
        if getattr(args, k, None) is None:
            setattr(args, k, default)
    if name in ("burstgpt", "sharegpt") and not getattr(args, "dataset_path", None):
        what = "BurstGPT CSV" if name == "burstgpt" else "ShareGPT JSON"
        raise ConfigError(f"--dataset-name {name} needs --dataset-path FILE (the {what})",
                          field="dataset_path", value=None)


def dataset_requests(args: Any) -> tuple[list[TraceRequest], str]:
    """The requests of ``args.dataset`` from the (already checked,
    :func:`check_dataset_flags`) flags' values, and the workload's name for reports.
    Raises ConfigError as the dataset's function (``args`` when it is not the parsed
    flags)."""
    if not all(hasattr(args, a) for a in ("dataset", "num_prompts", "seed")):
        raise ConfigError(f"args must be kvcore simulate's parsed flags (an "
                          f"argparse.Namespace with dataset, num_prompts, seed), got "
                          f"{type(args).__name__} {shorten(args)}", field="args",
                          value=shorten(args))
    name = args.dataset
    n, seed = args.num_prompts, args.seed
    if name == "random":
        reqs = random_dataset(n, args.random_input_len, args.random_output_len,
                              args.random_prefix_len, args.random_range_ratio or 0.0, seed)
        return reqs, (f"random (input {args.random_input_len}, output "
                      f"{args.random_output_len}, prefix {args.random_prefix_len}, range "
                      f"ratio {args.random_range_ratio or 0.0})")
    if name == "prefix_repetition":
        reqs = prefix_repetition_dataset(
            n, args.prefix_repetition_prefix_len, args.prefix_repetition_suffix_len,
            args.prefix_repetition_num_prefixes, args.prefix_repetition_output_len, seed,
            bool(getattr(args, "disable_shuffle", False)))
        return reqs, (f"prefix_repetition (prefix {args.prefix_repetition_prefix_len}, "
                      f"suffix {args.prefix_repetition_suffix_len}, "
                      f"{args.prefix_repetition_num_prefixes} prefixes, output "
                      f"{args.prefix_repetition_output_len})")
    if name == "burstgpt":
        return burstgpt_dataset(args.dataset_path, n, seed), \
            f"burstgpt ({args.dataset_path})"
    if name == "sharegpt":
        tok = _default_tokenizer(args)
        reqs = sharegpt_dataset(args.dataset_path, load_tokenizer(tok), n, seed,
                                args.sharegpt_output_len,
                                bool(getattr(args, "disable_shuffle", False)),
                                bool(getattr(args, "no_oversample", False)))
        return reqs, f"sharegpt ({args.dataset_path}, tokenizer {tok})"
    raise ConfigError(f"--dataset-name {name!r}: kvcore reads {', '.join(DATASET_NAMES)}",
                      field="dataset", value=name)


def _default_tokenizer(args: Any) -> str | None:
    """``--tokenizer``, else the model's folder when it holds ``tokenizer.json`` (vLLM's
    default: the model's own tokenizer)."""
    tok = getattr(args, "tokenizer", None)
    if tok is not None:
        return str(tok)
    model = str(getattr(args, "model", "") or "")
    folder = Path(model).parent if os.path.isfile(model) else Path(model)
    if model and (folder / "tokenizer.json").is_file():
        return str(folder)
    return None
