"""The real HuggingFace configs embedded in the package (``kvcore models``).

Provenance of every file is in ``configs/SOURCES.md``.  A file's name is its model name
plus, for a copy that is not the plain HF file, a suffix saying where it came from
(``.aiconfigurator``, ``.nxdi-4layer`` ...); both the full stem and the short name
select it.  ``*.hf_quant_config.*`` files are companions read beside their config.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIG_DIR", "embedded_names", "embedded_config_path", "short_name",
           "provenance_note"]

CONFIG_DIR = Path(__file__).parent / "configs"

#: provenance suffix -> (what replaces it in the short name, a note for `kvcore models`)
_SUFFIXES: dict[str, tuple[str, str]] = {
    ".aiconfigurator-trimmed": ("", "trimmed copy (text_config only)"),
    ".aiconfigurator": ("", "copy from aiconfigurator; may differ from the HF file"),
    # a test fixture must not take a real model's name
    ".nxdi-4layer": ("-4layer", "4-layer test fixture with the model's structure"),
    ".transformers-4.56-resaved": ("", "re-saved by transformers 4.56"),
}


def short_name(stem: str) -> str:
    """The model name of a file stem (provenance suffix dropped; a fixture keeps a
    marker, e.g. ``llama-4-scout-17b-16e-4layer``)."""
    for suffix, (replacement, _) in _SUFFIXES.items():
        if stem.endswith(suffix):
            return stem[: -len(suffix)] + replacement
    return stem


def provenance_note(stem: str) -> str:
    """A short note on where an embedded file came from ("" for an HF file)."""
    for suffix, (_, note) in _SUFFIXES.items():
        if stem.endswith(suffix):
            return note
    return ""


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
