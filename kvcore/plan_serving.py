"""``kvcore plan``'s serving side: ``--workload FILE`` (a trace, read by
:mod:`kvcore.sim.traces`), the judge (``--judge``), and the printed comparison of the
chosen layout with vLLM's own layout (``--explain``: the Pareto front).

This is the CLI layer: it may import :mod:`kvcore.sim` (planning never does; it takes
a :class:`kvcore.serving.Workload` and a judge callable).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kvcore.serving import Judge, LayoutReport, ServingFigures, Workload, workload_from_requests

__all__ = ["load_workload", "shared_prefix_lengths", "make_judge", "print_serving",
           "serving_json", "TRACE_BLOCK_TOKENS"]

#: granularity (tokens) at which prompts given as token ids are compared for shared
#: prefixes
TRACE_BLOCK_TOKENS = 16


def shared_prefix_lengths(requests: Sequence[Any]) -> list[int]:
    """Per request (in order), the leading prompt tokens it shares with an earlier
    request: Mooncake ``hash_ids`` (512-token blocks, the last possibly partial),
    else the prompt's ``segments`` (runs of one token stream), else its token ids in
    blocks of :data:`TRACE_BLOCK_TOKENS`."""
    from kvcore.sim.traces import MOONCAKE_BLOCK_TOKENS

    seen: set[Any] = set()
    out = []
    for r in requests:
        keys: list[tuple[Any, int]] = []  # (prefix key, tokens up to it)
        if r.hash_ids is not None:
            acc: tuple[Any, ...] = ()
            for i, h in enumerate(r.hash_ids):
                acc = acc + (h,)
                keys.append((("h",) + acc, min(r.prompt_len, (i + 1) * MOONCAKE_BLOCK_TOKENS)))
        elif r.segments:
            acc, n = (), 0
            for seg in r.segments:
                acc, n = acc + (tuple(seg),), n + seg[2]
                keys.append((("s",) + acc, n))
        else:
            toks = list(r.token_ids or ())
            for end in range(TRACE_BLOCK_TOKENS, len(toks) + 1, TRACE_BLOCK_TOKENS):
                keys.append((("t", hash(tuple(toks[:end]))), end))
        shared = 0
        for key, n in keys:
            if key in seen:
                shared = n
            else:
                break
        seen.update(k for k, _ in keys)
        out.append(min(shared, r.prompt_len))
    return out


def load_workload(path: str, max_num_seqs: int = 256) -> Workload:
    """A trace file (Mooncake JSONL, Azure CSV, kvcore JSONL; :func:`read_trace`) as a
    :class:`Workload`.  Raises ConfigError naming the file and line of a bad row."""
    from kvcore.sim.traces import read_trace

    reqs = read_trace(path)
    shared = shared_prefix_lengths(reqs)
    return workload_from_requests(
        [(r.prompt_len, max(1, r.output_len), s) for r, s in zip(reqs, shared)],
        max_num_seqs=max_num_seqs, source=f"trace {path} ({len(reqs):,} requests)")


def make_judge(name: str) -> Judge | None:
    """``analytic`` (None: planning's own proxy) or ``sim`` (the clocked simulator's
    judge, :func:`kvcore.sim.judge.sim_judge`, when the simulator is installed)."""
    if name == "analytic":
        return None
    try:
        from kvcore.sim.judge import sim_judge  # type: ignore[import-not-found]
    except ImportError:
        from kvcore.errors import ConfigError

        raise ConfigError("--judge sim needs kvcore.sim.judge (the clocked simulator); "
                          "use --judge analytic", field="judge", value=name) from None
    return sim_judge  # type: ignore[no-any-return]


def _fmt_time(t: float) -> str:
    return "n/a" if math.isinf(t) else f"{t:,.3f}"


def _row(f: ServingFigures) -> list[str]:
    return [f"{f.num_groups}", ", ".join(f"{b:,}" for b in f.block_sizes),
            "-" if f.prefix_hit_alignment_tokens is None
            else f"{f.prefix_hit_alignment_tokens:,}",
            "-" if f.guarantee is None else f"{f.guarantee:.2f}",
            "-" if f.steady_capacity_requests is None
            else f"{f.steady_capacity_requests:.1f}",
            f"{f.prefix_hit_fraction:.0%}", _fmt_time(f.time_s)]


HEADERS = ["groups", "block sizes", "hit alignment", "guarantee", "steady capacity",
           "prefix hits", "time (s)"]


def print_serving(stats: Any, table: Any, explain: bool = False) -> None:
    """The chosen layout beside vLLM's (``table(title, headers, rows)`` prints one)."""
    won, base = stats.serving, stats.vllm_layout
    if won is None:
        return
    rows = [["kvcore (chosen)"] + _row(won)]
    if base is not None:
        rows.append(["vLLM's layout"] + _row(base.figures))
    wl = stats.workload or {}
    table(f"serving: the chosen layout and vLLM's on the workload "
          f"({wl.get('source', 'default')}; judged by {won.judged_by})",
          ["layout"] + HEADERS, rows)
    gain = stats.gain_over_vllm
    if gain is not None:
        print(f"gain over vLLM's layout: {gain:+.1%} time to serve"
              + (" (vLLM's layout kept: no candidate was faster)" if gain == 0 else ""))
    if explain and stats.pareto_front:
        table("Pareto front of the judged layouts (guarantee, steady capacity, groups, "
              "hit alignment, time)", ["layout"] + HEADERS,
              [[("* " if p.is_vllm_layout else "") + p.strategy] + _row(p.figures)
               for p in stats.pareto_front])


def serving_json(stats: Any) -> dict[str, Any] | None:
    """The ``serving`` object of ``kvcore plan --json``."""
    won, base = stats.serving, stats.vllm_layout
    if won is None:
        return None
    front: list[LayoutReport] = stats.pareto_front or []
    return {"chosen": won.to_dict(), "vllm_layout": base.to_dict() if base else None,
            "gain_over_vllm": stats.gain_over_vllm, "workload": stats.workload,
            "pareto_front": [p.to_dict() for p in front]}
