"""kvcore.models.hub: HuggingFace ids through a real huggingface_hub cache layout written
by the test, under HF_HUB_OFFLINE=1."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest

from kvcore.errors import ConfigError
from kvcore.models.embedded import CONFIG_DIR
from kvcore.models.hub import is_hf_id, resolve_model, split_hf_id
from kvcore.models.planner import plan_model

pytest.importorskip("huggingface_hub")

LLAMA = json.loads((CONFIG_DIR / "llama-3.1-8b.json").read_text())


def _write_cache(root, repo_id, files, *, ref="main", commit=None):
    """The layout huggingface_hub writes: blobs/<sha256>, snapshots/<commit>/<file> as a
    relative symlink to the blob, refs/<ref> holding the commit."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    commit = commit or hashlib.sha1(json.dumps(files, sort_keys=True).encode()).hexdigest()
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        data = json.dumps(content).encode()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(f"../../blobs/{blob.name}")
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    return commit


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return cache


def test_cached_id_plans_and_is_named_after_the_id(hub_cache):
    _write_cache(hub_cache, "meta-llama/Llama-3.1-8B", {"config.json": LLAMA})
    config = plan_model("meta-llama/Llama-3.1-8B", kv_cache_memory_bytes=20 << 30,
                        max_model_len=8192)
    assert config.stats.model == "meta-llama/Llama-3.1-8B"
    assert config.stats.model_type == "llama"
    assert any("config.json from" in n for n in config.stats.notes)


def test_revision_selects_the_ref_or_commit(hub_cache):
    short = dict(LLAMA, max_position_embeddings=4096)
    _write_cache(hub_cache, "acme/tiny", {"config.json": LLAMA})
    commit = _write_cache(hub_cache, "acme/tiny", {"config.json": short}, ref="v2")
    assert plan_model("acme/tiny").max_model_len == 131072
    assert plan_model("acme/tiny@v2").max_model_len == 4096
    assert plan_model(f"acme/tiny@{commit}").max_model_len == 4096
    with pytest.raises(ConfigError, match="not in the HF cache"):
        plan_model("acme/tiny@v3")


def test_safetensors_index_in_the_cache_sizes_the_weights(hub_cache):
    from kvcore.deploy.budget import plan_on_gpu

    _write_cache(hub_cache, "meta-llama/Llama-3.1-8B", {
        "config.json": LLAMA,
        "model.safetensors.index.json": {"metadata": {"total_size": 16_060_522_496},
                                         "weight_map": {}}})
    config = plan_on_gpu("meta-llama/Llama-3.1-8B", gpu="H100-SXM", max_model_len=8192)
    assert config.stats.weights_source == "safetensors-index"
    assert config.stats.weights_bytes_total == 16_060_522_496


def test_offline_without_cache_falls_back_to_the_embedded_config(hub_cache):
    model, note = resolve_model("meta-llama/Llama-3.1-8B")
    assert model.name == "meta-llama/Llama-3.1-8B" and "embedded config" in note
    config = plan_model("Qwen/qwen3-8b", kv_cache_memory_bytes=10 << 30, max_model_len=4096)
    assert any("embedded config qwen3-8b" in n for n in config.stats.notes)


@pytest.mark.parametrize("repo", ["meta-llama/Llama-4-Scout-17B-16E-Instruct",
                                  "aws/llama-4-scout-17b-16e-4layer", "acme/no-such-model"])
def test_offline_without_cache_and_no_full_embedded_copy_is_an_error(hub_cache, repo):
    with pytest.raises(ConfigError) as exc:
        resolve_model(repo)
    msg = exc.value.message
    assert "HF_HUB_OFFLINE" in msg and "config.json" in msg and "kvcore plan path" in msg
    assert exc.value.extra["field"] == "model"


def test_local_path_wins_over_the_id(hub_cache, tmp_path, monkeypatch):
    _write_cache(hub_cache, "org/name", {"config.json": LLAMA})
    local = tmp_path / "org" / "name"
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps(dict(LLAMA, max_position_embeddings=2048)))
    monkeypatch.chdir(tmp_path)
    model, note = resolve_model("org/name")
    assert model == "org/name" and note == ""
    assert plan_model("org/name").max_model_len == 2048


def test_without_huggingface_hub_the_error_names_the_extra(hub_cache, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(ConfigError, match=r"pip install kvcore\[hf\]"):
        resolve_model("acme/anything")
    # embedded names and local paths need no library
    assert resolve_model("llama-3.1-8b") == ("llama-3.1-8b", "")


def test_online_download_passes_hf_token(hub_cache, monkeypatch):
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    seen = {}

    def fake_download(repo_id, filename, **kw):
        seen[filename] = kw
        if filename != "config.json":
            from huggingface_hub.errors import EntryNotFoundError
            raise EntryNotFoundError("no index")
        path = hub_cache / "cfg.json"
        path.write_text(json.dumps(LLAMA))
        return str(path)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr("kvcore.models.hub._hub_reachable", lambda: True)
    model, note = resolve_model("gated/model@v1")
    assert seen["config.json"]["token"] == "hf_test_token"
    assert seen["config.json"]["revision"] == "v1"
    assert model.name == "gated/model@v1"


@pytest.mark.parametrize("text,ok", [("org/name", True), ("org/name@main", True),
                                     ("org/na.me-1_2@v1.0", True), ("name", False),
                                     ("a/b/c", False), ("/abs/path", False),
                                     ("org/", False)])
def test_id_syntax(text, ok):
    assert is_hf_id(text) is ok
    if ok:
        assert split_hf_id(text)[0] == text.split("@")[0]


def test_unreachable_hub_is_treated_as_offline(hub_cache, monkeypatch):
    """No network (the host does not resolve): no retries, the same fallback and error."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr("kvcore.models.hub._hub_reachable", lambda: False)
    model, note = resolve_model("mistralai/Mistral-7B-v0.1")
    assert "could not be reached" in note and model.model_type == "mistral"
    with pytest.raises(ConfigError, match="could not be reached"):
        resolve_model("acme/unknown")


def test_a_missing_json_path_is_not_taken_for_an_id(hub_cache):
    with pytest.raises(ConfigError, match="configs/missing.json: no such file"):
        plan_model("configs/missing.json")
    with pytest.raises(ConfigError, match="no such local path"):
        plan_model("configs/missing")
