"""The published routing conformance vectors (tests/data/routing_vectors/): the index
passes every one, the files are what kvcore's manager produces (regenerated here), and
the reader rejects what is not a vector."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcore.errors import ConfigError
from kvcore.routing import vectors
from kvcore.routing.cases import CASES, available_cases

DIR = Path(__file__).resolve().parents[1] / "data" / "routing_vectors"
FILES = sorted(DIR.glob("*.json"))


def test_every_case_has_a_vector_and_the_files_are_small():
    assert {p.stem for p in FILES} == {c.name for c in CASES}
    assert sum(p.stat().st_size for p in FILES) < 2 * 2**20


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_index_passes_the_vector(path):
    case = next(c for c in CASES if c.name == path.stem)
    if case not in available_cases():
        pytest.skip(f"needs {case.needs}")
    v = vectors.load(path)
    assert v.queries and any(q["hit"] for q in v.queries)
    assert vectors.check(v) == []


@pytest.mark.parametrize("case", available_cases(["sliding+full", "mamba-align+full",
                                                  "chunked+full"]),
                         ids=lambda c: c.name)
def test_the_files_are_what_the_manager_produces(case):
    """Regenerated from kvcore's manager (the reference), a vector equals the file."""
    v = vectors.generate(case.name, case.build(), seed=0, **case.options)
    assert json.loads(json.dumps(v)) == json.loads((DIR / f"{case.name}.json").read_text())


def test_check_reports_a_wrong_answer():
    d = json.loads((DIR / "sliding+full.json").read_text())
    q = next(r for r in d["records"] if r["op"] == "query" and r["hit"] > 0)
    q["hit"] += 4
    bad = vectors.check(d)
    assert len(bad) == 1 and bad[0].expected == bad[0].got + 4


def test_reader_rejects_other_files():
    with pytest.raises(ConfigError):
        vectors.load({"format": "something-else", "version": 1})
    d = json.loads((DIR / "full.json").read_text())
    with pytest.raises(ConfigError):
        vectors.load(dict(d, version=99))
