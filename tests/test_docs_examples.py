"""README.md and docs/*.md examples run as tests (issue 22, item 6), so an example cannot
drift from the code again.

* ```` ```python ```` blocks run top to bottom (one namespace per block).  A statement
  followed by comment lines ``# ...`` is checked: an expression's ``repr`` must equal
  the comment text, a statement that prints must print exactly the comment lines (a
  comment after a statement that shows nothing is prose).
* ```` ``` ```` blocks whose first line is ``$ kvcore ...`` run that command (``python -m
  kvcore.cli``, ``COLUMNS=200``) and must print the lines that follow it (trailing
  spaces ignored); a command line ending in ``# no-output-check`` only has to succeed.
* ```` ```json ```` blocks must parse; a specs file (``options`` and ``layers``) must plan.

A block preceded by the line ``<!-- docs-test: skip -->`` is not run (for commands that
need what CI lacks, e.g. a GPU).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
SKIP = "<!-- docs-test: skip -->"


def _blocks(lang: str):
    out = []
    for path in DOCS:
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(1) != lang:
                continue
            before = text[:m.start()].rstrip().splitlines()[-1:] or [""]
            if before[0].strip() == SKIP:
                continue
            line = text[:m.start()].count("\n") + 1
            out.append(pytest.param(m.group(2), id=f"{path.name}:{line}"))
    return out


def _expected_after(lines: list[str], end: int) -> list[str]:
    """The ``# ...`` comment lines right after line ``end`` (1-based), stripped."""
    out = []
    for line in lines[end:]:
        s = line.strip()
        if not s.startswith("#"):
            break
        out.append(s[1:].strip())
    return out


@pytest.mark.parametrize("code", _blocks("python"))
def test_python_examples(code: str) -> None:
    tree = ast.parse(code)
    lines = code.splitlines()
    module = types.ModuleType("kvcore_docs_example")  # dataclasses look their module up
    sys.modules[module.__name__] = module
    ns = module.__dict__
    for node in tree.body:
        expected = _expected_after(lines, node.end_lineno)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            if isinstance(node, ast.Expr):
                value = eval(compile(ast.Expression(node.value), "<docs>", "eval"), ns)
            else:
                exec(compile(ast.Module([node], []), "<docs>", "exec"), ns)
                value = None
        if not expected:
            continue
        if isinstance(node, ast.Expr) and value is not None:
            assert repr(value) == " ".join(expected), ast.unparse(node)
        elif buf.getvalue() or isinstance(node, ast.Expr):
            assert buf.getvalue().splitlines() == expected, ast.unparse(node)
        # else: a statement that shows nothing; its comment is prose


def _commands():
    out = []
    for p in _blocks(""):
        text = p.values[0]
        if not text.startswith("$ kvcore "):
            continue
        out.append(pytest.param(text, id=p.id))
    return out


@pytest.mark.parametrize("text", _commands())
def test_command_examples(text: str) -> None:
    lines = text.rstrip("\n").splitlines()
    cmd = lines[0][2:]
    check = not cmd.rstrip().endswith("# no-output-check")
    args = cmd.split("#")[0].split()[1:]
    env = dict(os.environ, COLUMNS="200", NO_COLOR="1", TERM="dumb")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [
        str(p) for p in sorted((ROOT / "plugins").glob("*"))] + [
        str(ROOT / "integrations" / "vllm")] + [env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-m", "kvcore.cli", *args], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    if check:
        got = [x.rstrip() for x in r.stdout.rstrip("\n").splitlines()]
        want = [x.rstrip() for x in lines[1:]]
        assert got == want, "\n".join(got)


@pytest.mark.parametrize("text", _blocks("json"))
def test_json_examples(text: str) -> None:
    data = json.loads(text)
    if isinstance(data, dict) and "layers" in data and "options" in data:
        from kvcore.planning import plan_from_specs_file

        config = plan_from_specs_file(data)
        assert config.num_blocks is not None and config.num_blocks > 0
