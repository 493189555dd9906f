"""kvcore's ``--dataset-name prefix_repetition | burstgpt | sharegpt`` against vLLM
0.32's own dataset classes (``vllm/benchmarks/datasets/datasets.py``:
``PrefixRepetitionRandomDataset``, ``BurstGPTDataset``, ``ShareGPTDataset``), called
with the arguments ``get_samples`` passes for the same ``--seed`` / ``--num-prompts``:
the same per-request lengths in the same order and, for prefix_repetition, the same
sharing structure (which requests share which prefix).

BurstGPTDataset reads its CSV with pandas (not a vLLM dependency): those tests skip
without it.  ShareGPT uses the fixture tokenizer (tests/data/datasets/tiny_tokenizer)
through ``transformers``, as ``vllm bench serve --tokenizer`` would.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

import pytest

from kvcore.sim.datasets import (
    burstgpt_dataset,
    load_tokenizer,
    prefix_repetition_dataset,
    sharegpt_dataset,
)

DATA = Path(__file__).resolve().parents[3] / "tests" / "data" / "datasets"


class _RoundTripTokenizer:
    """A tokenizer whose decode / encode round trip is exact (ids as text), so vLLM's
    gen_prompt_decode_to_target_len keeps its random ids and lengths."""

    vocab_size = 32000

    @staticmethod
    def decode(ids: list[int]) -> str:
        return " ".join(str(int(i)) for i in ids)

    @staticmethod
    def encode(text: str, add_special_tokens: bool = False) -> list[int]:
        return [int(t) for t in text.split()]


def _labels(keys: list[Any]) -> list[int]:
    """Each key replaced by the rank of its first appearance (a partition's shape)."""
    seen: dict[Any, int] = {}
    return [seen.setdefault(k, len(seen)) for k in keys]


def _vllm_prefix_repetition(seed: int, n: int, pre: int, suf: int, num: int, out: int,
                            disable_shuffle: bool = False) -> list[Any]:
    from vllm.benchmarks.datasets.datasets import PrefixRepetitionRandomDataset

    ds = PrefixRepetitionRandomDataset(random_seed=seed, dataset_path=None,
                                       disable_shuffle=disable_shuffle)
    return ds.sample(tokenizer=_RoundTripTokenizer(), num_requests=n, prefix_len=pre,
                     suffix_len=suf, num_prefixes=num, output_len=out,
                     request_id_prefix="", no_oversample=False)


def _prefix_cases() -> list[tuple[int, int, int, int, int, int]]:
    rng = random.Random(2026)  # a seeded driver over seeds and sizes
    cases = [(0, 1000, 256, 256, 10, 128)]  # vLLM's defaults (add_dataset_parser)
    for _ in range(14):
        num = rng.randint(1, 12)
        cases.append((rng.randint(0, 10_000), rng.randint(num, 150), rng.randint(0, 40),
                      rng.randint(1, 40), num, rng.randint(1, 64)))
    return cases


@pytest.mark.parametrize("case", _prefix_cases())
def test_prefix_repetition_equals_vllms(case: tuple[int, int, int, int, int, int]) -> None:
    seed, n, pre, suf, num, out = case
    ref = _vllm_prefix_repetition(seed, n, pre, suf, num, out)
    got = prefix_repetition_dataset(n, pre, suf, num, out, seed=seed)
    assert len(got) == len(ref) == num * (n // num)
    assert [g.prompt_len for g in got] == [r.prompt_len for r in ref]
    assert [g.output_len for g in got] == [r.expected_output_len for r in ref]
    ref_ids = [_RoundTripTokenizer.encode(r.prompt) for r in ref]
    got_ids = [g.prompt_token_ids() for g in got]
    # the same requests share a prefix, in the same (shuffled) order
    assert _labels([tuple(t[:pre]) for t in got_ids]) == \
        _labels([tuple(t[:pre]) for t in ref_ids])
    # and no two share more than the prefix (suffixes are their own)
    assert len({tuple(t[pre:pre + 8]) for t in got_ids}) == len(got)


def test_prefix_repetition_disable_shuffle_equals_vllms() -> None:
    ref = _vllm_prefix_repetition(3, 23, 16, 4, 4, 5, disable_shuffle=True)
    got = prefix_repetition_dataset(23, 16, 4, 4, 5, seed=3, disable_shuffle=True)
    assert _labels([tuple(g.prompt_token_ids()[:16]) for g in got]) == \
        _labels([tuple(_RoundTripTokenizer.encode(r.prompt)[:16]) for r in ref]) == \
        [i // 5 for i in range(20)]


def _write_burstgpt(path: Path, rng: random.Random, rows: int) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Timestamp", "Model", "Request tokens", "Response tokens",
                    "Total tokens", "Log Type"])
        for t in range(rows):
            req: Any = rng.randint(1, 4000)
            resp: Any = rng.choice([0, rng.randint(1, 900)])
            w.writerow([t, rng.choice(["GPT-4", "ChatGPT"]), req, resp, req + resp,
                        "Conversation log"])
            if rng.random() < 0.1:  # cells pandas reads as NaN, and float counts
                w.writerow([t, "GPT-4", f"{rng.uniform(1, 50):.2f}",
                            rng.choice(["NA", "", "nan", f"{rng.uniform(1, 9):.1f}"]), 0,
                            "API log"])


def _vllm_burstgpt(path: Path, seed: int, n: int) -> list[Any]:
    pytest.importorskip("pandas")
    from vllm.benchmarks.datasets.datasets import BurstGPTDataset

    ds = BurstGPTDataset(random_seed=seed, dataset_path=str(path), disable_shuffle=False)
    return ds.sample(tokenizer=_RoundTripTokenizer(), num_requests=n,
                     request_id_prefix="", no_oversample=False)


@pytest.mark.parametrize("seed,n", [(0, 10), (0, 1000), (5, 17), (123, 40)])
def test_burstgpt_fixture_equals_vllms(seed: int, n: int) -> None:
    path = DATA / "burstgpt_sample.csv"
    ref = _vllm_burstgpt(path, seed, n)
    got = burstgpt_dataset(path, n, seed=seed)
    assert [(g.prompt_len, g.output_len) for g in got] == \
        [(r.prompt_len, r.expected_output_len) for r in ref]
    assert [g.request_id for g in got] == [r.request_id for r in ref]


@pytest.mark.parametrize("case", range(6))
def test_burstgpt_generated_csvs_equal_vllms(case: int, tmp_path: Path) -> None:
    rng = random.Random(case)
    path = tmp_path / "burst.csv"
    _write_burstgpt(path, rng, rng.randint(5, 120))
    seed, n = rng.randint(0, 2**31 - 1), rng.randint(1, 200)  # below and above the rows
    ref = _vllm_burstgpt(path, seed, n)
    got = burstgpt_dataset(path, n, seed=seed)
    assert [(g.prompt_len, g.output_len) for g in got] == \
        [(r.prompt_len, r.expected_output_len) for r in ref]


def _hf_tokenizer() -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(DATA / "tiny_tokenizer"))


@pytest.mark.parametrize("seed,n,output_len,no_oversample,disable_shuffle", [
    (0, 10, None, False, False), (0, 1000, None, False, False), (7, 25, None, True, False),
    (3, 12, 64, False, False), (11, 60, 5, False, True), (42, 8, None, False, True)])
def test_sharegpt_equals_vllms(seed: int, n: int, output_len: int | None,
                               no_oversample: bool, disable_shuffle: bool) -> None:
    from vllm.benchmarks.datasets.datasets import ShareGPTDataset

    tok = _hf_tokenizer()
    path = DATA / "sharegpt_sample.json"
    ref = ShareGPTDataset(random_seed=seed, dataset_path=str(path),
                          disable_shuffle=disable_shuffle).sample(
        tokenizer=tok, num_requests=n, output_len=output_len, enable_multimodal_chat=False,
        request_id_prefix="", no_oversample=no_oversample)
    got = sharegpt_dataset(path, load_tokenizer(DATA / "tiny_tokenizer"), n, seed=seed,
                           output_len=output_len, disable_shuffle=disable_shuffle,
                           no_oversample=no_oversample)
    assert [(g.prompt_len, g.output_len) for g in got] == \
        [(r.prompt_len, r.expected_output_len) for r in ref]
    assert [g.prompt_token_ids() for g in got] == [tok(r.prompt).input_ids for r in ref]


def test_tokenizers_only_path_counts_as_transformers(monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    import sys

    pytest.importorskip("tokenizers")
    hf = _hf_tokenizer()
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    tk = load_tokenizer(DATA / "tiny_tokenizer")
    for text in ("hello world", "w1 w2 unknownword w3", ""):
        assert tk(text) == hf(text).input_ids


def test_simulate_sharegpt_serves_vllms_requests(capsys: pytest.CaptureFixture[str]
                                                 ) -> None:
    """``kvcore simulate --dataset-name sharegpt`` end to end: the served tokens are
    those of vLLM's ShareGPTDataset for the same seed and tokenizer."""
    import json

    from vllm.benchmarks.datasets.datasets import ShareGPTDataset

    from kvcore.cli import main

    tok = _hf_tokenizer()
    path = DATA / "sharegpt_sample.json"
    ref = ShareGPTDataset(random_seed=4, dataset_path=str(path)).sample(
        tokenizer=tok, num_requests=9, output_len=None)
    rc = main(["simulate", "llama-3.1-8b", "--dataset-name", "sharegpt", "--dataset-path",
               str(path), "--tokenizer", str(DATA / "tiny_tokenizer"), "--num-prompts",
               "9", "--seed", "4", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    d = json.loads(out.out)
    assert d["completed"] == 9
    assert d["total_input_tokens"] == sum(r.prompt_len for r in ref)
    assert d["total_output_tokens"] == sum(r.expected_output_len for r in ref)
