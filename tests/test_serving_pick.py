"""The win rule of the layout search (kvcore.serving.pick), on generated candidates.

Issue #22: a layout that is not faster than vLLM's on the workload does not win, and a
layout that trades a structural figure (guarantee, steady capacity, block tables, hit
granularity) for time must buy more than the judge's error (MIN_GAIN): the measured
failures were collapsed windows and exploded groups chosen on sub-percent paper gains."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore.serving import MIN_GAIN, Candidate, ServingFigures, pick
from kvcore.specs import PlanContext


def _cand(i: int, t: float, g: float, cap: float, groups: int, align: int,
          vllm: bool) -> Candidate:
    fig = ServingFigures(num_groups=groups, block_sizes=(16,), prefix_hit_alignment_tokens=align,
                         guarantee=g, steady_blocks_per_request=1.0,
                         steady_bytes_per_request=1.0, steady_capacity_requests=cap,
                         prefix_hit_fraction=1.0, block_tables_per_request_step=groups,
                         cpu_seconds_per_request_step=0.0, time_s=t, judged_by="test")
    return Candidate(strategy=f"c{i}", groups=tuple, figures=fig, num_blocks=100,
                     ctx=PlanContext(max_model_len=1024), is_vllm_layout=vllm, index=i)


_fig = st.tuples(st.floats(1.0, 2.0), st.sampled_from([1.0, 2.0, 3.0]),
                 st.sampled_from([3.0, 4.0]), st.integers(1, 4), st.sampled_from([16, 32]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_fig, min_size=2, max_size=6), st.integers(0, 5))
def test_the_winner_is_vllms_or_faster_by_rule(figs, which):
    base = which % len(figs)
    cands = [_cand(i, *f, vllm=(i == base)) for i, f in enumerate(figs)]
    w = pick(cands)
    b = cands[base].figures
    win = cands[w].figures
    assert win.time_s <= b.time_s * (1 + 1e-9)  # never slower than vLLM's layout
    if w != base:
        no_worse = (win.guarantee >= b.guarantee
                    and win.steady_capacity_requests >= b.steady_capacity_requests
                    and win.num_groups <= b.num_groups
                    and win.prefix_hit_alignment_tokens <= b.prefix_hit_alignment_tokens)
        assert no_worse or win.time_s < b.time_s * (1 - MIN_GAIN)


def test_a_half_percent_gain_that_costs_steady_capacity_does_not_win():
    # the shape of the measured failure: all-as-full 0.7 % faster on the proxy, but it
    # holds fewer resident requests than vLLM's hybrid layout
    vllm = _cand(0, 100.0, 2.0, 4.0, 2, 16, vllm=True)
    full = _cand(1, 99.3, 3.0, 3.0, 1, 16, vllm=False)
    assert pick([full, vllm]) == 1
    # the same trade for a 5 % gain wins
    full5 = _cand(1, 95.0, 3.0, 3.0, 1, 16, vllm=False)
    assert pick([full5, vllm]) == 0


def test_a_faster_layout_no_worse_anywhere_wins_by_any_margin():
    vllm = _cand(0, 100.0, 2.0, 4.0, 2, 16, vllm=True)
    same_but_faster = _cand(1, 99.9, 2.0, 4.0, 2, 16, vllm=False)
    assert pick([vllm, same_but_faster]) == 1
