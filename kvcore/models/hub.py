"""HuggingFace model ids: ``kvcore plan org/name[@revision]``.

Resolution order (:func:`resolve_model`):

1. a local path that exists (file or folder) always wins;
2. an id ``org/name`` with an optional ``@revision`` (branch, tag or commit) is read
   through ``huggingface_hub`` (optional extra ``kvcore[hf]``): the local HF cache first
   (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``), then
   the Hub unless ``HF_HUB_OFFLINE`` is set; ``HF_TOKEN`` is passed for gated repos.
   ``config.json`` is required; ``model.safetensors.index.json`` is fetched too when
   the repo has one (its ``total_size`` then sizes the weights, see
   :mod:`kvcore.deploy.weights`).  The config is named after the id;
3. offline (or unreachable) with nothing cached, an id whose name part equals an
   embedded config's name (case-insensitive; never a test fixture or a trimmed copy)
   falls back to that embedded config, and the returned note says so;
4. anything else is left to :func:`kvcore.models.config.load_model_config` (embedded
   names, its own error).

Errors are :class:`~kvcore.errors.ConfigError` naming the id: no ``huggingface_hub``
(``pip install kvcore[hf]``), not cached while offline, repo / revision / file not found,
gated without a token; each says how to get ``config.json`` and pass its path.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from kvcore.errors import ConfigError
from kvcore.models.config import ModelConfig, load_model_config

__all__ = ["HF_ID", "is_hf_id", "split_hf_id", "resolve_model", "hf_cache_dir",
           "offline"]

#: ``org/name`` with an optional ``@revision`` (HF's repo-id characters)
HF_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)"
                   r"(?:@(?P<rev>[A-Za-z0-9._/-]+))?$")

_NOT_FALLBACK = (".nxdi-4layer", ".aiconfigurator-trimmed")
_TRUE = ("1", "on", "yes", "true")


def is_hf_id(text: str) -> bool:
    """``org/name`` or ``org/name@revision`` (no local path check)."""
    return bool(HF_ID.match(text.strip()))


def split_hf_id(text: str) -> tuple[str, str | None]:
    """``(repo_id, revision or None)``; raises ConfigError for something else."""
    m = HF_ID.match(text.strip())
    if not m:
        raise ConfigError(f"{text!r} is not a HuggingFace id (org/name or "
                          f"org/name@revision)", field="model", value=text)
    return m.group("repo"), m.group("rev")


def offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set to a true value."""
    return any(os.environ.get(k, "").strip().lower() in _TRUE
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hf_cache_dir() -> Path:
    """The HF hub cache, read from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / \
        "huggingface" / "hub"


def _embedded_fallback(repo_id: str) -> Path | None:
    from kvcore.models.embedded import CONFIG_DIR, short_name

    name = repo_id.split("/", 1)[1].lower()
    for p in sorted(CONFIG_DIR.glob("*.json")):
        if ".hf_quant_config." in p.name or any(m in p.name for m in _NOT_FALLBACK):
            continue
        if name in (p.stem.lower(), short_name(p.stem).lower()):
            return p
    return None


def _how_to(repo_id: str, rev: str | None) -> str:
    return (f"download https://huggingface.co/{repo_id}/resolve/{rev or 'main'}/config.json "
            f"(and model.safetensors.index.json if the repo has one) into a folder and "
            f"pass the folder: kvcore plan path/to/folder")


def _fetch(hub: Any, repo_id: str, rev: str | None, filename: str, *, required: bool,
           local_only: bool) -> str | None:
    """A file of the repo from the cache, else (online) the Hub."""
    cache = hf_cache_dir()
    try:
        cached = hub.try_to_load_from_cache(repo_id, filename, cache_dir=str(cache),
                                            revision=rev)
    except ValueError as exc:  # HFValidationError: not a valid repo id (issue 15)
        from kvcore.units import shorten

        raise ConfigError(f"{shorten(repo_id)} is not a valid HuggingFace repo id "
                          f"({shorten(str(exc).split(':')[0], 120)}); give a config.json "
                          f"path, a folder holding one, or an embedded model name",
                          field="model", value=shorten(repo_id)) from None
    if isinstance(cached, str):
        return cached
    if cached is not None and not required:  # cached "this file does not exist"
        return None
    if local_only or not _hub_reachable():
        return None
    from huggingface_hub import errors

    try:
        return str(hub.hf_hub_download(repo_id, filename, revision=rev,
                                       cache_dir=str(cache),
                                       token=os.environ.get("HF_TOKEN") or None))
    except errors.GatedRepoError as exc:
        raise ConfigError(f"{repo_id}: the repo is gated; accept its license on "
                          f"huggingface.co and set HF_TOKEN, or {_how_to(repo_id, rev)}",
                          field="model", value=repo_id) from exc
    except errors.RevisionNotFoundError as exc:
        raise ConfigError(f"{repo_id}: revision {rev!r} not found on the Hub; "
                          f"{_how_to(repo_id, rev)}", field="model",
                          value=f"{repo_id}@{rev}") from exc
    except errors.RepositoryNotFoundError as exc:
        raise ConfigError(f"{repo_id}: no such model repo on the Hub (or it is private: "
                          f"set HF_TOKEN); {_how_to(repo_id, rev)}", field="model",
                          value=repo_id) from exc
    except errors.LocalEntryNotFoundError:  # (a subclass of EntryNotFoundError)
        return None  # no network: treated as offline
    except errors.EntryNotFoundError as exc:
        if not required:
            return None
        raise ConfigError(f"{repo_id}: the repo has no {filename}; "
                          f"{_how_to(repo_id, rev)}", field="model", value=repo_id) from exc
    except (OSError, errors.HfHubHTTPError):
        return None  # no network (or a transient failure): treated as offline


def _hub_reachable() -> bool:
    """The Hub's host resolves (a quick check so that a machine without network is
    treated as offline at once instead of after huggingface_hub's retries)."""
    import socket
    from urllib.parse import urlparse

    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY")):
        return True  # behind a proxy the host need not resolve here

    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname
    try:
        socket.getaddrinfo(host or "huggingface.co", 443)
    except OSError:
        return False
    return True


def resolve_model(model: str | Path | ModelConfig) -> tuple[str | Path | ModelConfig, str]:
    """What to plan for ``model`` (see the module docstring) and a note ("" or a line
    saying where the config came from).

    Returns ``(model, note)`` where ``model`` is unchanged for local paths, embedded names
    and ModelConfigs, or a :class:`ModelConfig` named after the HF id.
    Raises ConfigError (no huggingface_hub, not cached offline, not found, gated).
    """
    if isinstance(model, ModelConfig):
        return model, ""
    text = str(model)
    try:
        exists = Path(text).exists()
    except (OSError, ValueError):  # a name too long or with a NUL byte: no such path;
        return model, ""  # load_model_config says so in one ConfigError (issue 15)
    if exists or not is_hf_id(text) or text.lower().endswith(".json"):
        return model, ""  # a path (or a missing one: load_model_config says so)
    repo_id, rev = split_hf_id(text)
    try:
        import huggingface_hub as hub
    except ImportError:
        fallback = _embedded_fallback(repo_id)
        hint = (f"; the embedded {fallback.stem!r} has the same name: kvcore plan "
                f"{fallback.stem}" if fallback else "")
        raise ConfigError(f"{text}: reading HuggingFace ids needs huggingface_hub: pip "
                          f"install kvcore[hf]; or {_how_to(repo_id, rev)}{hint}",
                          field="model", value=text) from None
    local_only = offline()
    path = _fetch(hub, repo_id, rev, "config.json", required=True, local_only=local_only)
    if path is None:
        fallback = _embedded_fallback(repo_id)
        why = "HF_HUB_OFFLINE is set" if local_only else "huggingface.co could not be reached"
        if fallback is not None:
            cfg = load_model_config(fallback)
            note = (f"{text}: not in the HF cache and {why}; using the embedded config "
                    f"{fallback.stem} (kvcore models)")
            return dataclasses.replace(cfg, name=text), note
        raise ConfigError(f"{text}: no such local path, and as a HuggingFace id its "
                          f"config.json is not in the HF cache ({hf_cache_dir()}) and {why}; "
                          f"{_how_to(repo_id, rev)}", field="model", value=text)
    _fetch(hub, repo_id, rev, "model.safetensors.index.json", required=False,
           local_only=local_only)
    cfg = load_model_config(path)
    return dataclasses.replace(cfg, name=text), f"{text}: config.json from {path}"
