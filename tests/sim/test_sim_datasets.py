"""``--dataset-name`` (``--dataset``) as ``vllm bench serve`` spells it, and the
prefix_repetition / burstgpt / sharegpt datasets, against vLLM 0.32's definitions
(``vllm/benchmarks/datasets/datasets.py``: ``add_dataset_parser`` defaults,
``PrefixRepetitionRandomDataset.sample``: ``random.seed(seed)`` then
``random.shuffle``; ``BurstGPTDataset``: GPT-4 rows with ``Response tokens > 0``,
``DataFrame.sample(random_state=seed)`` = ``numpy.random.RandomState(seed).choice``
(pandas ``core/sample.py``); ``ShareGPTDataset`` + ``is_valid_sequence``) and vLLM's
prefix cache (only full blocks hit).  Differential checks against vLLM's own classes:
integrations/vllm/tests/test_sim_datasets_vs_vllm.py.
"""

from __future__ import annotations

import csv
import json
import math
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcore_cli_support import assert_clean_error as _clean_error  # noqa: E402
from kvcore_cli_support import run_cli as _run
from kvcore_cli_support import run_json as _t3_json

from kvcore.cli import build_parser, main
from kvcore.errors import ConfigError
from kvcore.sim.datasets import (
    burstgpt_dataset,
    load_tokenizer,
    prefix_repetition_dataset,
    read_burstgpt,
    sharegpt_dataset,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"
BURST = DATA / "burstgpt_sample.csv"
SHARE = DATA / "sharegpt_sample.json"
SIM = ["simulate", "llama-3.1-8b"]


# ---- 1. --dataset-name, --dataset an alias --------------------------------------------
@pytest.mark.parametrize("cmd", ["simulate", "tune"])
@pytest.mark.parametrize("name", ["random", "prefix_repetition", "burstgpt", "sharegpt"])
def test_dataset_name_and_its_alias_are_one_flag(cmd: str, name: str) -> None:
    p = build_parser()
    extra = ["--gpu", "H100"] if cmd == "tune" else []
    a = p.parse_args([cmd, "m", *extra, "--dataset-name", name])
    b = p.parse_args([cmd, "m", *extra, "--dataset", name])
    assert a.dataset == b.dataset == name


def test_unknown_dataset_name_is_refused(capsys: Any) -> None:
    rc, _, err = _run(capsys, [*SIM, "--dataset-name", "hf"])
    _clean_error(rc, err, "--dataset-name", "prefix_repetition", "burstgpt")


def test_alias_gives_the_same_run(capsys: Any) -> None:
    args = ["--num-prompts", "6", "--random-input-len", "40", "--random-output-len", "3",
            "--json"]
    runs = []
    for flag in ("--dataset", "--dataset-name"):
        rc, out, _ = _run(capsys, [*SIM, flag, "random", *args])
        assert rc == 0
        d = json.loads(out)
        d.pop("wall_seconds")
        runs.append(d)
    assert runs[0] == runs[1] and runs[0]["completed"] == 6


# ---- 2. prefix_repetition -------------------------------------------------------------
def test_prefix_repetition_defaults_are_vllms() -> None:
    ns = build_parser().parse_args([*SIM, "--dataset-name", "prefix_repetition"])
    from kvcore.sim.datasets import check_dataset_flags

    check_dataset_flags(ns)
    # vLLM 0.32 add_dataset_parser: 256 / 256 / 10 / 128, --num-prompts 1000
    assert (ns.prefix_repetition_prefix_len, ns.prefix_repetition_suffix_len,
            ns.prefix_repetition_num_prefixes, ns.prefix_repetition_output_len,
            ns.num_prompts) == (256, 256, 10, 128, 1000)
    reqs = prefix_repetition_dataset(1000)
    assert len(reqs) == 1000 and {(r.prompt_len, r.output_len) for r in reqs} == {(512, 128)}
    assert Counter(r.segments[0][0] for r in reqs).most_common()[-1][1] == 100


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), num=st.integers(1, 9), extra=st.integers(0, 60),
       pre=st.integers(0, 48), suf=st.integers(1, 24), out=st.integers(1, 50),
       shuffle=st.booleans())
def test_prefix_repetition_structure(seed: int, num: int, extra: int, pre: int, suf: int,
                                     out: int, shuffle: bool) -> None:
    n = num + extra
    per = n // num
    reqs = prefix_repetition_dataset(n, pre, suf, num, out, seed=seed,
                                     disable_shuffle=not shuffle)
    assert len(reqs) == num * per  # vLLM: num_prefixes * (num_prompts // num_prefixes)
    assert all(r.prompt_len == pre + suf and r.output_len == out for r in reqs)
    assert [r.request_id for r in reqs] == [str(i) for i in range(len(reqs))]
    # the prefix of each request, in vLLM's order: generation order (prefix-major), then
    # random.seed(seed); random.shuffle(requests)
    order = list(range(num * per))
    if shuffle:
        random.seed(seed)
        random.shuffle(order)
    groups = [g // per for g in order]
    toks = [r.prompt_token_ids() for r in reqs]
    assert all(len(t) == pre + suf for t in toks)
    by_group: dict[int, set[tuple[int, ...]]] = {}
    for g, t in zip(groups, toks):
        by_group.setdefault(g, set()).add(tuple(t[:pre]))
    assert all(len(v) == 1 for v in by_group.values())  # equal prefixes are equal
    if pre >= 4:  # and different ones different
        assert len({next(iter(v)) for v in by_group.values()}) == num
    assert len({tuple(t[pre:]) for t in toks}) == len(toks) or suf < 4
    again = prefix_repetition_dataset(n, pre, suf, num, out, seed=seed,
                                      disable_shuffle=not shuffle)
    assert [r.prompt_token_ids() for r in again] == toks


@pytest.mark.parametrize("n,num,pre,suf", [(20, 4, 40, 8), (30, 3, 64, 1), (12, 12, 33, 5)])
def test_prefix_repetition_hits_are_the_shared_full_blocks(capsys: Any, n: int, num: int,
                                                           pre: int, suf: int) -> None:
    """One request at a time: every request but the first of its prefix hits the
    prefix's full blocks (vLLM's prefix cache caches full blocks only), nothing else."""
    rc, out, err = _run(capsys, [
        *SIM, "--dataset-name", "prefix_repetition", "--num-prompts", str(n),
        "--prefix-repetition-num-prefixes", str(num), "--prefix-repetition-prefix-len",
        str(pre), "--prefix-repetition-suffix-len", str(suf),
        "--prefix-repetition-output-len", "2", "--max-concurrency", "1", "--json"])
    assert rc == 0, err
    d = json.loads(out)
    bs = d["block_size"]
    expected = (n - num) * (pre // bs) * bs / (n * (pre + suf))
    assert d["completed"] == n
    assert d["prefix_hit_ratio"] == pytest.approx(expected)


# ---- 3. burstgpt ----------------------------------------------------------------------
def _fixture_rows() -> list[tuple[int, int]]:
    with open(BURST, newline="") as f:
        return [(int(r["Request tokens"]), int(r["Response tokens"]))
                for r in csv.DictReader(f)
                if r["Model"] == "GPT-4" and int(r["Response tokens"]) > 0]


def test_burstgpt_keeps_vllms_rows() -> None:
    with open(BURST, newline="") as f:
        all_rows = list(csv.DictReader(f))
    kept = _fixture_rows()
    assert 0 < len(kept) < len(all_rows)  # the fixture exercises the filter
    assert any(r["Model"] == "GPT-4" and r["Response tokens"] == "0" for r in all_rows)
    assert [(a, b) for a, b, _ in read_burstgpt(BURST)] == kept


def test_burstgpt_reads_cells_as_pandas_does(tmp_path: Path) -> None:
    """pandas' NA strings are NaN (a NaN response fails ``> 0``: dropped) and a float
    count is truncated by ``int`` (vLLM's BurstGPTDataset gives the same on this file)."""
    path = _csv(tmp_path, "Timestamp,Model,Request tokens,Response tokens\n"
                          "1,GPT-4,12.7,NA\n2,GPT-4,30,\n3,ChatGPT,5,null\n"
                          "4,GPT-4,8.9,3.5\n")
    assert [(r.prompt_len, r.output_len) for r in burstgpt_dataset(path, 1)] == [(8, 3)]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80))
def test_burstgpt_sampling(seed: int, n: int) -> None:
    kept = _fixture_rows()
    reqs = burstgpt_dataset(BURST, n, seed=seed)
    got = [(r.prompt_len, r.output_len) for r in reqs]
    assert len(got) == n and [r.request_id for r in reqs] == [str(i) for i in range(n)]
    if n <= len(kept):  # sampled without replacement: no row twice
        assert not Counter(got) - Counter(kept)
    else:
        assert set(got) <= set(kept)
    np = pytest.importorskip("numpy")
    idx = np.random.RandomState(seed).choice(len(kept), size=n, replace=n > len(kept))
    assert got == [kept[i] for i in idx.tolist()]  # DataFrame.sample(random_state=seed)
    toks = [r.prompt_token_ids() for r in reqs]
    assert len({tuple(t[:4]) for t in toks}) == n  # vLLM's prompts share no prefix
    assert [(r.prompt_len, r.output_len) for r in burstgpt_dataset(BURST, n, seed)] == got


def test_burstgpt_simulate_reads_the_csv(capsys: Any) -> None:
    rc, out, err = _run(capsys, [*SIM, "--dataset-name", "burstgpt", "--dataset-path",
                                 str(BURST), "--num-prompts", "7", "--seed", "3", "--json"])
    assert rc == 0, err
    d = json.loads(out)
    np = pytest.importorskip("numpy")
    kept = _fixture_rows()
    rows = [kept[i] for i in np.random.RandomState(3).choice(len(kept), 7, False)]
    assert d["completed"] == 7
    assert d["total_input_tokens"] == sum(a for a, _ in rows)
    assert d["total_output_tokens"] == sum(b for _, b in rows)


# ---- 4. sharegpt ----------------------------------------------------------------------
def _words(text: str) -> list[int]:
    """A stand-in tokenizer: a BOS, then one token per word (as the fixture's)."""
    return [1] + [len(w) for w in text.split()]


def _vllm_sharegpt(path: Path, n: int, seed: int, output_len: int | None,
                   shuffle: bool) -> list[tuple[int, int]]:
    """vLLM 0.32 ShareGPTDataset.load_data + sample + maybe_oversample_requests."""
    data = [e for e in json.loads(path.read_text())
            if "conversations" in e and len(e["conversations"]) >= 2]
    random.seed(seed)
    if shuffle:
        random.shuffle(data)
    out: list[tuple[int, int]] = []
    for e in data:
        if len(out) >= n:
            break
        p = len(_words(e["conversations"][0]["value"]))
        o = len(_words(e["conversations"][1]["value"])) if output_len is None else output_len
        skip_o = output_len is not None
        if p < 4 or (not skip_o and o < 4) or p > 1024 or p + o > 2048:
            continue
        out.append((p, o))
    if len(out) < n:
        random.seed(seed)
        out += [random.choice(out) for _ in range(n - len(out))]
    return out


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 60),
       output_len=st.none() | st.integers(1, 300), shuffle=st.booleans())
def test_sharegpt_sampling(seed: int, n: int, output_len: int | None, shuffle: bool) -> None:
    reqs = sharegpt_dataset(SHARE, _words, n, seed=seed, output_len=output_len,
                            disable_shuffle=not shuffle)
    assert [(r.prompt_len, r.output_len) for r in reqs] == \
        _vllm_sharegpt(SHARE, n, seed, output_len, shuffle)
    assert all(4 <= r.prompt_len <= 1024 and r.prompt_len + r.output_len <= 2048
               for r in reqs)


def test_sharegpt_filter_bounds_and_no_oversample(tmp_path: Path) -> None:
    def conv(p: int, o: int) -> dict[str, Any]:
        return {"conversations": [{"value": " ".join(["a"] * p)},
                                  {"value": " ".join(["b"] * o)}]}
    # tokens (BOS included): prompt 4 / 3 / 1024 / 1025, prompt + output 2048 / 2049
    data = [conv(3, 3), conv(2, 10), conv(1023, 3), conv(1024, 10), conv(999, 1047),
            conv(999, 1048), {"conversations": [{"value": "x"}]}]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    reqs = sharegpt_dataset(path, _words, 10, disable_shuffle=True, no_oversample=True)
    assert [(r.prompt_len, r.output_len) for r in reqs] == [(4, 4), (1024, 4),
                                                            (1000, 1048)]
    assert reqs[0].prompt_token_ids() == [1, 1, 1, 1]


def test_sharegpt_without_tokenizer_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ConfigError) as e:
        load_tokenizer(DATA / "tiny_tokenizer")
    assert e.value.extra["field"] == "tokenizer"
    assert "pip install transformers" in e.value.message


def test_sharegpt_with_the_fixture_tokenizer() -> None:
    if importlib_missing("transformers") and importlib_missing("tokenizers"):
        pytest.skip("neither transformers nor tokenizers is installed")
    tok = load_tokenizer(DATA / "tiny_tokenizer")
    assert tok("hello world w3") == [1, 63, 64, 6]  # <s> + the words' vocabulary ids
    reqs = sharegpt_dataset(SHARE, tok, 20, seed=1)
    assert [(r.prompt_len, r.output_len) for r in reqs] == \
        _vllm_sharegpt(SHARE, 20, 1, None, True)  # one token per word, as _words


def importlib_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


# ---- 5. bad input: one line, exit 2, naming the flag ---------------------------------
def _csv(tmp_path: Path, text: str) -> str:
    p = tmp_path / "b.csv"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("argv,words", [
    (["--dataset-name", "burstgpt"], ["--dataset-path"]),
    (["--dataset-name", "sharegpt"], ["--dataset-path"]),
    (["--dataset-name", "random", "--dataset-path", "x.csv"], ["--dataset-path"]),
    (["--dataset-name", "burstgpt", "--dataset-path", "/nonexistent/b.csv"],
     ["--dataset-path", "/nonexistent/b.csv"]),
    (["--dataset-name", "prefix_repetition", "--random-input-len", "64"],
     ["--random-input-len", "prefix_repetition"]),
    (["--dataset-name", "random", "--prefix-repetition-prefix-len", "64"],
     ["--prefix-repetition-prefix-len", "--dataset-name"]),
    (["--prefix-repetition-num-prefixes", "3", "--trace", "t.jsonl"],
     ["--prefix-repetition-num-prefixes", "--dataset-name prefix_repetition"]),
    # vLLM's --disable-shuffle / --no-oversample are general dataset flags (any
    # --dataset-name takes them, datasets.py:1625-1643); a trace is no vLLM dataset
    (["--disable-shuffle", "--trace", "t.jsonl"], ["--disable-shuffle", "--dataset-name"]),
    (["--no-oversample", "--trace", "t.jsonl"], ["--no-oversample", "--dataset-name"]),
    (["--dataset-name", "prefix_repetition", "--num-prompts", "5"],
     ["--num-prompts 5", "--prefix-repetition-num-prefixes 10"]),
    (["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "0",
      "--prefix-repetition-suffix-len", "0"], ["--prefix-repetition-suffix-len"]),
    (["--dataset-name", "prefix_repetition", "--prefix-repetition-output-len", "0"],
     ["prefix_repetition_output_len"]),
    (["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "-1"],
     ["prefix_repetition_prefix_len"]),
    (["--dataset-name", "sharegpt", "--dataset-path", str(SHARE)], ["--tokenizer"]),
    (["--dataset-name", "sharegpt", "--dataset-path", str(SHARE), "--tokenizer",
      "/nonexistent"], ["--tokenizer", "tokenizer.json"]),
    (["--dataset-name", "sharegpt", "--dataset-path", str(SHARE), "--tokenizer",
      str(DATA / "tiny_tokenizer"), "--sharegpt-output-len", "0"],
     ["sharegpt_output_len"]),
])
def test_bad_dataset_flags(capsys: Any, argv: list[str], words: list[str]) -> None:
    rc, _, err = _run(capsys, [*SIM, *argv])
    _clean_error(rc, err, *words)


@pytest.mark.parametrize("text,words", [
    ("Timestamp,Model,Tokens\n1,GPT-4,5\n", ["'Request tokens'", "'Response tokens'"]),
    ("Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,5,5\n1,GPT-4,5,0\n",
     ["no row with Model 'GPT-4'"]),
    ("Timestamp,Model,Request tokens,Response tokens\n1,GPT-4,many,5\n",
     [":2:", "'Request tokens'"]),
    ("Timestamp,Model,Request tokens,Response tokens\n1,GPT-4,0,5\n",
     [":2:", "empty prompt"]),
    ("Timestamp,Model,Request tokens,Response tokens\n1,GPT-4,,5\n",
     [":2:", "'Request tokens' is empty"]),
    # pandas reads the text "nan" as NaN, as an empty cell: the message names both
    ("Timestamp,Model,Request tokens,Response tokens\n1,GPT-4,nan,5\n",
     [":2:", "'Request tokens' is empty or NaN"]),
])
def test_bad_burstgpt_csv(capsys: Any, tmp_path: Path, text: str, words: list[str]
                          ) -> None:
    rc, _, err = _run(capsys, [*SIM, "--dataset-name", "burstgpt", "--dataset-path",
                               _csv(tmp_path, text), "--num-prompts", "1"])
    _clean_error(rc, err, *words)


def test_sharegpt_without_libraries_is_one_line(capsys: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    rc, _, err = _run(capsys, [*SIM, "--dataset-name", "sharegpt", "--dataset-path",
                               str(SHARE), "--tokenizer", str(DATA / "tiny_tokenizer")])
    _clean_error(rc, err, "pip install transformers")


# ---- tune -----------------------------------------------------------------------------
TUNE = ["tune", "llama-3.1-8b", "--gpu", "H100", "--backend", "serial", "--tp", "1",
        "--max-model-len", "4096", "--kv-cache-dtype", "auto", "--max-num-batched-tokens",
        "2048", "--max-num-seqs", "16", "--json"]


def test_tune_on_prefix_repetition(capsys: Any) -> None:
    rc, out, err = _run(capsys, [*TUNE, "--dataset-name", "prefix_repetition",
                                 "--num-prompts", "12", "--prefix-repetition-num-prefixes",
                                 "3", "--prefix-repetition-prefix-len", "64",
                                 "--prefix-repetition-suffix-len", "16",
                                 "--prefix-repetition-output-len", "4"])
    assert rc == 0, err
    d = json.loads(out)
    assert d["candidates"] == 2  # a shared prefix: prefix caching on and off are tried
    assert d["best"]["vllm_serve"].startswith("vllm serve meta-llama/Llama-3.1-8B")


def test_tune_on_burstgpt_and_its_errors(capsys: Any) -> None:
    rc, out, err = _run(capsys, [*TUNE, "--dataset", "burstgpt", "--dataset-path",
                                 str(BURST), "--num-prompts", "6"])
    assert rc == 0, err
    assert json.loads(out)["candidates"] == 1
    plain = [a for a in TUNE if a != "--json"]
    rc, _, err = _run(capsys, [*plain, "--dataset-name", "burstgpt"])
    _clean_error(rc, err, "--dataset-path")
    rc, _, err = _run(capsys, [*plain, "--dataset-name", "burstgpt", "--dataset-path",
                               str(BURST), "--random-input-len", "5"])
    _clean_error(rc, err, "--random-input-len")
    rc, out, _ = _run(capsys, [*TUNE, "--dataset-name", "burstgpt"])  # --json: an object
    assert rc == 2 and json.loads(out)["error"]["field"] == "dataset_path"


def test_sharegpt_tokenizer_defaults_to_the_models_folder(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's --tokenizer defaults to the model: a model folder holding tokenizer.json
    is used; an embedded model name has none, so --tokenizer is asked for."""
    import argparse

    from kvcore.sim.datasets import dataset_requests

    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    base = {"dataset": "sharegpt", "dataset_path": str(SHARE), "num_prompts": 3,
            "seed": 0, "tokenizer": None, "sharegpt_output_len": None}
    with pytest.raises(ConfigError) as e:  # found the folder's tokenizer, no library
        dataset_requests(argparse.Namespace(**base, model=str(DATA / "tiny_tokenizer")))
    assert "pip install transformers" in e.value.message
    with pytest.raises(ConfigError) as e:
        dataset_requests(argparse.Namespace(**base, model="llama-3.1-8b"))
    assert e.value.extra["field"] == "tokenizer" and "--tokenizer PATH" in e.value.message


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 30), st.integers(0, 2**20), st.booleans(), st.booleans())
def test_general_dataset_flags_are_noops_where_vllm_ignores_them(
        n: int, seed: int, shuffle_off: bool, no_over: bool) -> None:
    """vLLM's get_samples passes --disable-shuffle / --no-oversample to every dataset
    (datasets.py:2315-2335), but RandomDataset and BurstGPTDataset read neither (no
    shuffle, exact counts / pandas sampling with replacement): accepted, same requests
    (tester 3, finding 9)."""
    import argparse

    from kvcore.sim.datasets import check_dataset_flags, dataset_requests

    def reqs(**flags: Any) -> list[Any]:
        ns = argparse.Namespace(dataset="random", num_prompts=n, seed=seed,
                                random_input_len=32, random_output_len=4, **flags)
        check_dataset_flags(ns)
        return dataset_requests(ns)[0]

    given_flags = {k: True for k, on in (("disable_shuffle", shuffle_off),
                                          ("no_oversample", no_over)) if on}
    assert reqs(**given_flags) == reqs()


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(0, 99))
def test_result_num_prompts_is_the_flag(n: int, prefixes: int, seed: int) -> None:
    """vLLM writes result_json["num_prompts"] = args.num_prompts (benchmarks/serve.py
    :2264) while prefix_repetition makes num_prefixes * (n // num_prefixes) requests
    (datasets.py:4210-4251): completed is the requests made, num_prompts the flag
    (tester 3, finding 6)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main([*SIM, "--gpu", "H100", "--dataset-name", "prefix_repetition",
                   "--num-prompts", str(n), "--prefix-repetition-num-prefixes",
                   str(prefixes), "--prefix-repetition-prefix-len", "16",
                   "--prefix-repetition-suffix-len", "4", "--prefix-repetition-output-len",
                   "2", "--seed", str(seed), "--json"])
    if n < prefixes:  # vLLM: num_prompts // num_prefixes == 0 prompts per prefix
        assert rc == 2
        return
    assert rc == 0, out.getvalue()
    d = json.loads(out.getvalue())
    assert d["num_prompts"] == n
    assert d["completed"] == prefixes * (n // prefixes)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["random", "prefix_repetition", "burstgpt", "sharegpt", None]),
       st.sampled_from([None, 0.5, 4.0, math.inf]),
       st.sampled_from([None, 0.5, 1.0, math.inf]),
       st.sampled_from([None, "linear"]))
def test_prefix_repetition_send_times_note(dataset: str | None, rate: float | None,
                                           burst: float | None, ramp: str | None) -> None:
    """vLLM's get_request draws np.random.gamma from the global stream that
    PrefixRepetitionRandomDataset has advanced by its tokenizer-dependent
    np.random.randint prompt draws (datasets.py:4194-4221; serve.py:2013, 491); the
    other datasets leave that stream alone (RandomDataset: default_rng; BurstGPT:
    pandas random_state; ShareGPT: random).  So only prefix_repetition with gamma gaps
    (finite rate or a ramp-up, finite burstiness) is another draw: noted (suspicion 1)."""
    import argparse

    from kvcore.sim.command import prefix_repetition_arrivals_note

    ns = argparse.Namespace(dataset=dataset, request_rate=rate, burstiness=burst,
                            ramp_up_strategy=ramp)
    gamma = (ramp is not None or (rate is not None and not math.isinf(rate))) and \
        not (burst is not None and math.isinf(burst))
    note = prefix_repetition_arrivals_note(ns)
    assert (note is not None) == (dataset == "prefix_repetition" and gamma)


# ---- moved from tests/test_tester3_findings.py (tester 3's findings, fixed) -----------


T3_BASE = ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset", "random",
           "--num-prompts", "8", "--random-input-len", "64", "--random-output-len", "4"]


# 6 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n,prefixes", [(25, 10), (7, 3), (11, 2)])
def test_f6_result_num_prompts_is_the_flag(capsys: Any, tmp_path: Path, n: int,
                                           prefixes: int) -> None:
    """vLLM writes result_json["num_prompts"] = args.num_prompts (benchmarks/serve.py
    :2264) even when prefix_repetition makes num_prefixes * (n // num_prefixes) requests
    (datasets.py:4210-4251).  kvcore's --json and --save-result report the requests
    made (20 for --num-prompts 25 --prefix-repetition-num-prefixes 10), so a simulated
    result does not carry the command line's value."""
    argv = ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset-name",
            "prefix_repetition", "--num-prompts", str(n),
            "--prefix-repetition-num-prefixes", str(prefixes),
            "--prefix-repetition-prefix-len", "32", "--prefix-repetition-suffix-len", "8",
            "--prefix-repetition-output-len", "2", "--save-result", "--result-dir",
            str(tmp_path)]
    d = _t3_json(capsys, argv)
    assert d["completed"] == prefixes * (n // prefixes)  # vLLM's request count
    saved = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert saved["num_prompts"] == n
    assert d["num_prompts"] == n


# 9 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [["--disable-shuffle"], ["--no-oversample"]])
@pytest.mark.parametrize("dataset", ["random", "burstgpt"])
def test_f9_general_dataset_flags_accepted(capsys: Any, tmp_path: Path, dataset: str,
                                           extra: list[str]) -> None:
    """--disable-shuffle and --no-oversample are general flags of vLLM 0.32's dataset
    parser (benchmarks/datasets/datasets.py:1625-1643), passed to every dataset
    (get_samples: RandomDataset(..., disable_shuffle=...), BurstGPTDataset(...),
    .sample(no_oversample=...)).  kvcore refuses them outside prefix_repetition /
    sharegpt ('shapes the prefix_repetition / sharegpt dataset ...; drop it'), so a
    vllm bench serve line carrying them is refused."""
    if dataset == "random":
        argv = [*T3_BASE, *extra]
    else:
        csv = tmp_path / "b.csv"
        csv.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,"
                       "Log Type\n1,GPT-4,100,5,105,x\n2,GPT-4,120,4,124,x\n")
        argv = ["simulate", "llama-3.1-8b", "--gpu", "H100", "--dataset-name",
                "burstgpt", "--dataset-path", str(csv), "--num-prompts", "2", *extra]
    d = _t3_json(capsys, argv)
    assert d["completed"] >= 2
