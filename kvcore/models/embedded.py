"""The real HuggingFace configs embedded in the package (``kvcore models``).

Provenance of every file is in ``configs/SOURCES.md``.  A file's name is its model name
plus, for a copy that is not the plain HF file, a suffix saying where it came from
(``.aiconfigurator``, ``.nxdi-4layer`` ...); both the full stem and the short name
select it.  ``*.hf_quant_config.*`` files are companions read beside their config.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIG_DIR", "embedded_names", "embedded_config_path", "short_name"]

CONFIG_DIR = Path(__file__).parent / "configs"

_SUFFIXES = (".aiconfigurator-trimmed", ".aiconfigurator", ".nxdi-4layer",
             ".transformers-4.56-resaved")


def short_name(stem: str) -> str:
    """The model name of a file stem (provenance suffix dropped)."""
    for suffix in _SUFFIXES:
        if stem.endswith(suffix):
            return stem[: -len(suffix)]
    return stem


def _files() -> list[Path]:
    return sorted(p for p in CONFIG_DIR.glob("*.json") if ".hf_quant_config." not in p.name)


def embedded_names() -> list[str]:
    """Short names of the embedded configs, sorted."""
    return sorted(short_name(p.stem) for p in _files())


def embedded_config_path(name: str) -> Path | None:
    """The file of an embedded config by short name or full stem (case-insensitive)."""
    key = name.strip().lower()
    if key.endswith(".json"):
        key = key[:-5]
    for p in _files():
        if key in (p.stem.lower(), short_name(p.stem).lower()):
            return p
    return None
