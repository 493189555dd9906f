"""One reader for config values (issue #24 item 1): every read of a config field goes
through kvcore.models.config's typed readers (ConfigView / ModelConfig.get_* /
field_*), which check types and bounds and name the field.

The rule is checked on the source (AST) of kvcore/ and the plugins:

* no ``<expr>.raw`` (the raw config dict of a ModelConfig) outside the reader module;
* no subscript, ``.get()``, ``.items()/.keys()/.values()`` or ``in`` test on a raw config
  dict: a name bound (in the same function) to ``X.raw``, ``dict(X.raw)``,
  ``X.get_dict(...)``, ``field_dict(...)``, ``read_json_file(...)`` or
  ``json.load(s)(...)``, or a parameter or variable whose name is one the code base uses
  for raw config dicts (``raw``, ``hf_config``, ``vc``, ``ac`` ...);
* no unchecked ``ModelConfig.get`` (it is removed: the names ``mc``, ``cfg``,
  ``model_config`` ... never call ``.get``).

The scanner is tested on snippets that break each rule, so that it cannot pass by
matching nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kvcore

ROOT = Path(__file__).resolve().parents[1]
#: kvcore's own source (the checkout's, or the installed package's where tests/ runs as a
#: copy, as in tests/packaging); plugin sources only where the checkout has them
KVCORE_DIR = Path(kvcore.__file__).resolve().parent
READER = KVCORE_DIR / "models" / "config.py"
HAS_PLUGINS = (ROOT / "plugins").is_dir()

#: folders whose code holds no config dicts (tensors named ``raw`` in ops; runtime state;
#: trace rows, which kvcore.sim.traces reads with its own checked row reader)
#: and the published-measurement table kvcore.sim.accuracy reads (its own data file, not
#: a model config)
EXEMPT = ("kvcore/ops/", "kvcore/runtime/", "kvcore/sim/traces.py", "kvcore/ops.py",
          "kvcore/sim/accuracy.py",
          # parses the user's --speculative-config JSON, not a model config
          "kvcore/sim/speculative.py",
          # parses vllm bench serve result files and its own coefficient files, as
          # accuracy.py parses measurement rows: no model config
          "kvcore/sim/calibrate.py")

#: names the code base gives raw config dicts (and JSON objects read from config files)
RAW_NAMES = {"raw", "hf_config", "config_dict", "vc", "ac", "ssm", "ssm_cfg", "attn_cfg",
             "lin", "qcfg", "lang"}
#: names the code base gives ModelConfig objects
CONFIG_NAMES = {"mc", "cfg", "model_config", "config", "m", "model"}
_TAINT_CALLS = {"field_dict", "read_json_file", "get_dict"}


def _rel(f: Path) -> str:
    """``kvcore/...`` or ``plugins/...``: the path the rule and the messages use."""
    if f.is_relative_to(KVCORE_DIR):
        return "kvcore/" + f.relative_to(KVCORE_DIR).as_posix()
    return f.relative_to(ROOT).as_posix()


def _sources() -> list[Path]:
    files = sorted(KVCORE_DIR.rglob("*.py"))
    for plugin in sorted((ROOT / "plugins").glob("*/kvcore_*")):
        files += sorted(plugin.rglob("*.py"))
    out = []
    for f in files:
        rel = _rel(f)
        if f == READER or any(rel.startswith(e) for e in EXEMPT):
            continue
        out.append(f)
    return out


def _taints(value: ast.expr) -> bool:
    """Whether an assigned expression yields a raw config dict."""
    if isinstance(value, ast.Attribute) and value.attr == "raw":
        return True
    if isinstance(value, ast.Call):
        fn = value.func
        name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
        if name in _TAINT_CALLS:
            return True
        if name in ("load", "loads") and isinstance(fn, ast.Attribute) and \
                isinstance(fn.value, ast.Name) and fn.value.id == "json":
            return True
        if name == "dict" and value.args and _taints(value.args[0]):
            return True
    if isinstance(value, ast.BoolOp):
        return any(_taints(v) for v in value.values)
    return False


class _Scanner(ast.NodeVisitor):
    def __init__(self, rel: str) -> None:
        self.rel = rel
        self.errors: list[str] = []
        self.tainted: list[set[str]] = [set()]

    def _err(self, node: ast.AST, what: str) -> None:
        self.errors.append(f"{self.rel}:{getattr(node, 'lineno', 0)}: {what}")

    def _is_raw(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in RAW_NAMES or node.id in self.tainted[-1]
        if isinstance(node, ast.Attribute) and node.attr == "raw":
            return True
        return _taints(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.tainted.append(set(self.tainted[-1]))
        self.generic_visit(node)
        self.tainted.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Assign(self, node: ast.Assign) -> None:
        if _taints(node.value):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        self.tainted[-1].add(n.id)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None and _taints(node.value) and \
                isinstance(node.target, ast.Name):
            self.tainted[-1].add(node.target.id)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr == "raw":
            self._err(node, "`.raw` (a raw config dict) read outside the reader module")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and self._is_raw(node.value):
            self._err(node, f"subscript of a raw config dict "
                            f"({ast.unparse(node.value)}[...])")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        fn = node.func
        if isinstance(fn, ast.Attribute) and fn.attr in ("get", "items", "keys", "values",
                                                           "pop", "setdefault"):
            if self._is_raw(fn.value):
                self._err(node, f"{ast.unparse(fn)}() on a raw config dict")
            elif fn.attr == "get" and isinstance(fn.value, ast.Name) and \
                    fn.value.id in CONFIG_NAMES and node.args:
                self._err(node, f"unchecked {ast.unparse(fn)}({ast.unparse(node.args[0])})")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)) and self._is_raw(right):
                self._err(node, f"`in` test on a raw config dict ({ast.unparse(right)})")
        self.generic_visit(node)


def scan(source: str, rel: str = "<snippet>") -> list[str]:
    scanner = _Scanner(rel)
    scanner.visit(ast.parse(source))
    return scanner.errors


# ---- the scanner catches each kind of access ----------------------------------------------

@pytest.mark.parametrize("snippet", [
    "def f(cfg):\n    return cfg.raw.get('num_experts')\n",
    "def f(cfg):\n    r = cfg.raw\n    return r['x']\n",
    "def f(cfg):\n    d = dict(cfg.raw)\n    return d.get('x')\n",
    "def f(cfg):\n    vc = cfg.get_dict('vision_config')\n    return vc['depth']\n",
    "def f(cfg):\n    q = cfg.get_dict('quantization_config')\n    return 'bits' in q\n",
    "def f(p):\n    data = read_json_file(p)\n    return data['metadata']\n",
    "def f(p):\n    import json\n    data = json.loads(p)\n    return data.get('x')\n",
    "def f(raw):\n    return raw.get('n_layer')\n",
    "def f(hf_config):\n    return hf_config['hidden_size']\n",
    "def f(mc):\n    return mc.get('kv_lora_rank')\n",
    "def f(vc):\n    return list(vc.items())\n",
])
def test_scanner_flags_raw_access(snippet: str) -> None:
    assert scan(snippet), snippet


@pytest.mark.parametrize("snippet", [
    "def f(cfg):\n    return cfg.get_int('num_experts', 0, minimum=0)\n",
    "def f(cfg):\n    return cfg.section('vision_config').get_int('depth', 0)\n",
    "def f(opts):\n    return opts['gpu']\n",
    "def f(kwargs):\n    return kwargs.get('tensor_parallel_size', 1)\n",
])
def test_scanner_allows_typed_reads(snippet: str) -> None:
    assert scan(snippet) == []


def test_scanner_fails_when_an_access_is_added(tmp_path: Path) -> None:
    """Adding one raw access to a real module makes the scan fail."""
    path = KVCORE_DIR / "deploy" / "weights.py"
    text = path.read_text()
    assert scan(text, "weights.py") == []
    bad = text + "\n\ndef _added(cfg):\n    return cfg.raw.get('hidden_size')\n"
    assert scan(bad, "weights.py")


# ---- the code base follows the rule -------------------------------------------------------

def test_sources_exist() -> None:
    rels = {_rel(f) for f in _sources()}
    musts = ["kvcore/deploy/weights.py", "kvcore/deploy/budget.py",
             "kvcore/models/adapters.py", "kvcore/models/planner.py"]
    if HAS_PLUGINS:
        musts += ["plugins/mamba/kvcore_mamba/adapters.py",
                  "plugins/mla/kvcore_mla/adapters.py"]
    for must in musts:
        assert must in rels


def test_no_raw_config_access_outside_the_reader() -> None:
    errors: list[str] = []
    for f in _sources():
        errors += scan(f.read_text(), _rel(f))
    assert errors == [], "\n".join(errors)
