"""The real HuggingFace configs embedded in the package (``kvcore models``).

Provenance of every file is in ``configs/SOURCES.md``.  A file's name is its model name
plus, for a copy that is not the plain HF file, a suffix saying where it came from
(``.aiconfigurator``, ``.nxdi-4layer`` ...); both the full stem and the short name
select it.  ``*.hf_quant_config.*`` files are companions read beside their config.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIG_DIR", "embedded_names", "embedded_config_path", "short_name",
           "provenance_note", "hf_model_id"]

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


def _hf_ids() -> dict[str, str]:
    """file name -> HF model id, from the ``| file | HF model | ...`` table of
    ``configs/SOURCES.md`` (rows whose model column is an ``owner/name`` id)."""
    out: dict[str, str] = {}
    try:
        text = (CONFIG_DIR / "SOURCES.md").read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].endswith(".json"):
            hf = cells[1].strip("` ")
            parts = hf.split("/")
            if len(parts) == 2 and all(parts) and " " not in hf:
                out[cells[0]] = hf
    return out


def hf_model_id(name: str) -> str | None:
    """The HuggingFace model id (``google/gemma-3-27b-it``) of an embedded config by
    short name or stem, as ``configs/SOURCES.md`` records it; None when the name is not
    embedded or its file is not an HF model's (a test fixture)."""
    p = embedded_config_path(name)
    return _hf_ids().get(p.name) if p is not None else None
