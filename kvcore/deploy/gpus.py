"""A catalog of GPUs with their memory as the device reports it (``kvcore gpus``).

``memory_bytes`` is the total the driver reports: ``nvidia-smi --query-gpu=memory.total``
(MiB, times 2**20) for NVIDIA, ``rocm-smi --showmeminfo vram`` "VRAM Total Memory (B)" for
AMD.  Each entry cites where the figure was seen (public ``nvidia-smi`` / ``rocm-smi``
output).  Two AMD entries have no public device figure; they carry the vendor's
capacity and say so in ``source``.

CUDA's own total (``torch.cuda.mem_get_info()[1]``, what vLLM multiplies by
``gpu_memory_utilization``) is a few hundred MiB lower than ``nvidia-smi``'s on NVIDIA
parts (the driver's reserved memory, ``nvidia-smi -q -d MEMORY`` "Reserved"); for an
H100 80GB it is 79.19 GiB against 79.65 GiB.  kvcore budgets from ``memory_bytes`` and
keeps this difference inside its overhead estimate (see :mod:`kvcore.deploy.budget`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kvcore.errors import ConfigError

__all__ = ["GPU", "GPU_CATALOG", "get_gpu", "list_gpus"]

_MIB = 1 << 20


@dataclass(frozen=True)
class GPU:
    """One GPU model.

    Attributes
    ----------
    name:
        Catalog name (``H100-SXM``), the one ``--gpu`` takes.
    memory_bytes:
        Total device memory as the device reports it, in bytes.
    vendor:
        ``nvidia`` or ``amd``.
    device_name:
        The name the driver prints (``NVIDIA H100 80GB HBM3``).
    source:
        Where the figure comes from.
    aliases:
        Other names accepted by :func:`get_gpu` (case-insensitive; spaces, ``_`` and
        ``-`` are ignored).
    """

    name: str
    memory_bytes: int
    vendor: str
    device_name: str
    source: str
    aliases: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "memory_bytes": self.memory_bytes, "vendor": self.vendor,
                "device_name": self.device_name, "source": self.source,
                "aliases": list(self.aliases)}


def _smi(mib: int) -> int:
    return mib * _MIB


GPU_CATALOG: tuple[GPU, ...] = (
    GPU("H100-SXM", _smi(81559), "nvidia", "NVIDIA H100 80GB HBM3",
        "nvidia-smi memory.total 81559 MiB (public nvidia-smi output of H100 80GB HBM3 "
        "SXM5 nodes)", ("H100", "H100-80GB", "H100-SXM5", "H100 80GB HBM3")),
    GPU("H100-PCIe", _smi(81559), "nvidia", "NVIDIA H100 PCIe",
        "nvidia-smi 81559 MiB (TensorRT-LLM test report: 'NVIDIA H100 PCIe (81559 MiB)')",
        ("H100-PCIE-80GB",)),
    GPU("H100-NVL", _smi(95830), "nvidia", "NVIDIA H100 NVL",
        "nvidia-smi memory.total 95830 MiB (public nvidia-smi output of H100 NVL)",
        ("H100NVL", "H100-94GB")),
    GPU("H200", _smi(143771), "nvidia", "NVIDIA H200",
        "nvidia-smi memory.total 143771 MiB (public nvidia-smi output of H200 SXM)",
        ("H200-SXM", "H200-141GB")),
    GPU("B200", _smi(183359), "nvidia", "NVIDIA B200",
        "nvidia-smi 183359 MiB ('8x NVIDIA B200, Driver 570.172.08, 183359MiB each')",
        ("B200-180GB",)),
    GPU("GB200", _smi(189471), "nvidia", "NVIDIA GB200",
        "nvidia-smi memory.total 189471 MiB (public nvidia-smi output of GB200)",
        ("GB200-NVL72",)),
    GPU("A100-40GB", _smi(40960), "nvidia", "NVIDIA A100-SXM4-40GB",
        "nvidia-smi memory.total 40960 MiB (A100-SXM4-40GB and A100-PCIE-40GB outputs)",
        ("A100-SXM4-40GB", "A100-PCIE-40GB", "A100-40G")),
    GPU("A100-80GB", _smi(81920), "nvidia", "NVIDIA A100-SXM4-80GB",
        "nvidia-smi memory.total 81920 MiB (A100-SXM4-80GB and A100 80GB PCIe outputs)",
        ("A100", "A100-SXM4-80GB", "A100-80G", "A100 80GB PCIe")),
    GPU("L40S", _smi(46068), "nvidia", "NVIDIA L40S",
        "nvidia-smi memory.total 46068 MiB (public nvidia-smi output of L40S)", ()),
    GPU("L4", _smi(23034), "nvidia", "NVIDIA L4",
        "nvidia-smi memory.total 23034 MiB (public nvidia-smi output of L4)", ()),
    GPU("A10", _smi(23028), "nvidia", "NVIDIA A10",
        "nvidia-smi memory.total 23028 MiB (A10 and AWS A10G outputs)", ("A10G",)),
    GPU("RTX-4090", _smi(24564), "nvidia", "NVIDIA GeForce RTX 4090",
        "nvidia-smi memory.total 24564 MiB (public nvidia-smi output of RTX 4090)",
        ("4090", "RTX4090", "GeForce RTX 4090")),
    GPU("MI300X", 205_822_885_888, "amd", "AMD Instinct MI300X",
        "rocm-smi --showmeminfo vram: 'VRAM Total Memory (B): 205822885888'", ()),
    GPU("MI325X", 256 << 30, "amd", "AMD Instinct MI325X",
        "AMD specification 256 GB HBM3E; no public device-reported figure found (MI300X "
        "reports its 192 GB as 191.69 GiB, so expect about 0.2% less)", ()),
    GPU("MI355X", 288 << 30, "amd", "AMD Instinct MI355X",
        "AMD specification 288 GB HBM3E; no public device-reported figure found (MI300X "
        "reports its 192 GB as 191.69 GiB, so expect about 0.2% less)", ()),
)


def _key(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text.strip().lower()).removeprefix("nvidia").removeprefix(
        "amd").removeprefix("instinct")


def list_gpus() -> list[GPU]:
    """The catalog, in its order."""
    return list(GPU_CATALOG)


def get_gpu(name: str) -> GPU:
    """The catalog entry for ``name`` (catalog name, alias or device name; case, spaces,
    ``-`` and ``_`` ignored).

    Raises ConfigError (field ``gpu``) listing the catalog names for an unknown one.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"--gpu: expected a GPU name, got {name!r}; known: "
                          f"{', '.join(g.name for g in GPU_CATALOG)}", field="gpu",
                          value=repr(name))
    key = _key(name)
    for gpu in GPU_CATALOG:
        if key in {_key(n) for n in (gpu.name, gpu.device_name, *gpu.aliases)}:
            return gpu
    raise ConfigError(f"--gpu: unknown GPU {name!r}; known: "
                      f"{', '.join(g.name for g in GPU_CATALOG)} (or give --gpu-memory "
                      f"SIZE)", field="gpu", value=name)


# ---- `kvcore gpus` -------------------------------------------------------------------------

def add_subparser(sub: object) -> None:
    """Register ``kvcore gpus [--json]`` on the CLI's subparsers."""
    p = sub.add_parser("gpus", help="list the GPU catalog (kvcore plan --gpu NAME)",  # type: ignore[attr-defined]
                       description="The GPU catalog: memory as the device reports it "
                       "(nvidia-smi / rocm-smi), with the source of each figure.")
    p.add_argument("--json", action="store_true", help="print the catalog as JSON")
    p.set_defaults(func=_cmd_gpus)


def _cmd_gpus(args: object) -> int:
    import json

    from kvcore.planning import format_bytes

    if getattr(args, "json", False):
        print(json.dumps({"gpus": [g.to_dict() for g in GPU_CATALOG]}, indent=2))
        return 0
    rows = [[g.name, f"{g.memory_bytes:,}", format_bytes(g.memory_bytes), g.vendor,
             ", ".join(g.aliases) or "-", g.source] for g in GPU_CATALOG]
    headers = ["name", "memory (B)", "memory", "vendor", "also", "source"]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for r in [headers, *rows]:
            print("  ".join(r))
        return 0
    table = Table(title="GPU catalog (kvcore plan MODEL --gpu NAME)", title_justify="left")
    for i, h in enumerate(headers):
        table.add_column(h, justify="right" if i in (1, 2) else "left", overflow="fold",
                         no_wrap=i in (0, 1, 2))
    for r in rows:
        table.add_row(*r)
    console = Console(highlight=False)
    if not console.is_terminal:  # a file or pipe: as wide as the table, nothing cut
        need = sum(max(len(h), *(len(r[i]) for r in rows)) + 3
                   for i, h in enumerate(headers)) + 1
        console = Console(highlight=False, width=max(need, 80))
    console.print(table)
    return 0
