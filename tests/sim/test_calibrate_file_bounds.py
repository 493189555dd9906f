"""The counts ``kvcore calibrate`` reads from a result file are bounded (tester A, F3).

The rule: a count in a file is bounded as the flag that sets it is (``completed``:
``--num-prompts``'s 1,000,000, "about an hour of CPU per candidate"; a mean request
length: kvcore's longest length, 2**32 tokens; ``max_concurrency``: its flag's bound);
above it the file is refused in one line naming the field (exit 2), never replayed for
hours (``completed`` 10**9 ran until killed, or ended in a MemoryError).

Result files are generated from a real ``vllm bench serve --save-result`` file by
setting one count at a time to a value drawn above its bound (hypothesis,
derandomized); the bound itself is accepted by the row builder (no replay).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kvcore_cli_support import assert_clean_error, run_cli

from kvcore.errors import ConfigError
from kvcore.sim.calibrate import bench_result_row

DATA = Path(__file__).parent.parent / "data" / "bench_results" / "do-solutions-phase0"
RESULT = json.loads((DATA / "rate-1.0.json").read_text())
MAX_NUM_PROMPTS = 1_000_000  # --num-prompts's bound (docs: ~1 h of CPU)
MAX_TOKENS = 1 << 32


def _mutant(draw: Any) -> tuple[dict[str, Any], str]:
    """(a result with one count above its bound, the field the error must name)."""
    d = {k: v for k, v in RESULT.items() if not isinstance(v, list)}
    which = draw(st.sampled_from(["completed", "total_input_tokens", "total_output_tokens",
                                  "max_concurrency"]))
    if which == "completed":
        n = draw(st.integers(MAX_NUM_PROMPTS + 1, (1 << 62) - 1))
        d.update(completed=n, num_prompts=n, total_input_tokens=200 * n,
                 total_output_tokens=200 * n, request_rate="inf")
    elif which == "max_concurrency":
        d["max_concurrency"] = draw(st.integers((1 << 40) + 1, (1 << 62) - 1))
    else:
        n = d["completed"]
        d[which] = draw(st.integers(n * (MAX_TOKENS + 1), (1 << 62) - 1))
    return d, which


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_count_above_its_bound_is_one_line(data: Any, tmp_path_factory: Any,
                                             capsys: Any) -> None:
    result, field = _mutant(data.draw)
    path = tmp_path_factory.mktemp("res") / "r.json"
    path.write_text(json.dumps(result))
    rc, _, err = run_cli(capsys, ["calibrate", "llama-3.1-8b", str(path), "--gpu", "H200",
                                  "--rounds", "1", "--terms", "step_s"])
    assert_clean_error(rc, err, field)
    rc, out, _ = run_cli(capsys, ["calibrate", "llama-3.1-8b", str(path), "--gpu", "H200",
                                  "--rounds", "1", "--terms", "step_s", "--json"])
    assert rc == 2 and json.loads(out)["error"]["field"] == field


@pytest.mark.parametrize("n", [MAX_NUM_PROMPTS + 1, 10**9, (1 << 62) - 1])
def test_the_api_row_builder_refuses_completed_above_the_bound(n: int) -> None:
    d = dict(RESULT, completed=n, total_input_tokens=200 * n, total_output_tokens=200 * n)
    for k in ("input_lens", "output_lens", "errors", "ttfts", "itls"):
        d.pop(k, None)
    with pytest.raises(ConfigError) as info:
        bench_result_row(d, model="llama-3.1-8b", gpu="H200")
    assert info.value.extra["field"] == "completed"
    assert f"{MAX_NUM_PROMPTS:,}" in info.value.message


def test_the_bound_itself_is_a_row() -> None:
    n = MAX_NUM_PROMPTS
    d = {k: v for k, v in RESULT.items() if not isinstance(v, list)}
    d.update(completed=n, total_input_tokens=200 * n, total_output_tokens=200 * n)
    row = bench_result_row(d, model="llama-3.1-8b", gpu="H200")
    assert row["num_prompts"] == n and row["input_len"] == 200


@pytest.mark.parametrize("key", ["input_lens", "output_lens"])
def test_a_per_request_length_above_the_bound_is_not_replayed(key: str) -> None:
    """One request longer than 2**32 tokens: the list is not used (the mean lengths
    replay, with a warning), as for any list that is not token counts."""
    n = RESULT["completed"]
    total = "total_input_tokens" if key == "input_lens" else "total_output_tokens"
    lens = [MAX_TOKENS + 1] + [1] * (n - 1)
    d = {k: v for k, v in RESULT.items() if not isinstance(v, list)}
    d.update({key: lens, total: sum(lens)})
    with pytest.warns(UserWarning, match=key):
        row = bench_result_row(d, model="llama-3.1-8b", gpu="H200",
                               max_model_len=1 << 32)
    assert key not in row
