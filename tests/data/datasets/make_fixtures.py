"""Write the dataset fixtures of this folder (run once with the vLLM venv, which has
``tokenizers``: ``kvpy-vllm tests/data/datasets/make_fixtures.py``); tests only read the
files.  Deterministic (seeded); the rows are synthetic, in the published formats:

* ``burstgpt_sample.csv``: BurstGPT's header ``Timestamp,Model,Request
  tokens,Response tokens,Total tokens,Log Type`` (https://github.com/HPMLL/BurstGPT,
  README and data/BurstGPT_1.csv), ``Model`` ChatGPT or GPT-4, ``Log Type``
  ``Conversation log`` or ``API log``, some failed requests (``Response tokens`` 0, as
  BurstGPT_1.csv holds).
* ``sharegpt_sample.json``: ShareGPT's layout as vLLM reads it (a list of
  ``{"id", "conversations": [{"from": "human"|"gpt", "value": text}, ...]}``,
  ShareGPT_V3_unfiltered_cleaned_split.json), including entries of one turn and
  conversations outside vLLM's length filters.
* ``tiny_tokenizer/``: a word-level ``tokenizer.json`` (whitespace split, 64 words,
  ``[UNK]``, a ``<s>`` BOS added by its post-processor) and a
  ``tokenizer_config.json`` for ``transformers``.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

HERE = Path(__file__).parent
WORDS = [f"w{i}" for i in range(60)] + ["hello", "world", "kv", "cache"]


def burstgpt() -> None:
    rng = random.Random(21)
    with open(HERE / "burstgpt_sample.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Timestamp", "Model", "Request tokens", "Response tokens",
                    "Total tokens", "Log Type"])
        t = 0
        for _ in range(48):
            t += rng.randint(0, 40)
            model = rng.choice(["ChatGPT", "GPT-4", "GPT-4"])
            req = rng.randint(1, 3000)
            resp = 0 if rng.random() < 0.15 else rng.randint(1, 800)
            w.writerow([t, model, req, resp, req + resp,
                        rng.choice(["Conversation log", "API log"])])


def sharegpt() -> None:
    rng = random.Random(22)

    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    data = []
    special = {7: (1100, 8), 23: (1100, 8),  # prompt above max_prompt_len 1024
               11: (900, 1200),  # prompt + output above max_total_len 2048
               12: (1023, 3),  # 1024 prompt tokens with the BOS, 4 output: kept
               13: (3, 3), 14: (2, 60)}  # 4 prompt tokens: kept; 3: dropped
    for i in range(40):
        turns = 1 if i % 13 == 5 else rng.choice([2, 2, 3, 4])
        first, second = special.get(i, (rng.choice([1, 2, 3, 5, 40, 120, 300]),
                                        rng.choice([1, 2, 3, 8, 60, 250])))
        conv = []
        for k in range(turns):
            n = first if k == 0 else second if k == 1 else rng.choice([5, 30])
            conv.append({"from": "human" if k % 2 == 0 else "gpt", "value": text(n)})
        data.append({"id": f"fixture_{i}", "conversations": conv})
    (HERE / "sharegpt_sample.json").write_text(json.dumps(data) + "\n")


def tokenizer() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
    for w in WORDS:
        vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    out = HERE / "tiny_tokenizer"
    out.mkdir(exist_ok=True)
    tk.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
        "eos_token": "</s>", "unk_token": "[UNK]", "model_max_length": 1000000}) + "\n")


if __name__ == "__main__":
    burstgpt()
    sharegpt()
    tokenizer()
