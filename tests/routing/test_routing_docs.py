"""The examples of docs/ROUTING.md run (house rule: docs examples are tests)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ROUTING.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text() if DOC.exists() else "",
                    re.S)


@pytest.mark.skipif(not DOC.exists(), reason="docs/ absent (packaging copy of tests/)")
@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_routing_doc_example_runs(i, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setitem(os.environ, "KVCORE_CHECK_INVARIANTS", "0")
    exec(compile(BLOCKS[i], f"ROUTING.md block {i}", "exec"), {})
