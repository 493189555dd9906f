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
from dataclasses import dataclass, field, replace

from kvcore.errors import ConfigError
from kvcore.userfiles import dumps_json

__all__ = ["GPU", "GPUPerf", "GPU_CATALOG", "get_gpu", "list_gpus",
           "check_attention_block_size", "ATTENTION_BLOCK_SIZE_MULTIPLE"]

#: every attention backend vLLM 0.32 picks on the catalog's GPUs takes kernel block sizes
#: that are multiples of 16 (vllm/v1/attention/backends/flash_attn.py, triton_attn.py,
#: flex_attention.py, rocm_aiter_unified_attn.py ``get_supported_kernel_block_sizes`` ->
#: ``[MultipleOf(16)]``; flashinfer.py 16 / 32 / 64; rocm_attn.py 16 / 32 or the Triton
#: path's multiples of 16)
ATTENTION_BLOCK_SIZE_MULTIPLE = 16

_MIB = 1 << 20


@dataclass(frozen=True)
class GPUPerf:
    """Peak figures of one GPU from its vendor's datasheet, for the step-time model
    (:mod:`kvcore.sim.timing`).  Dense (no 2:4 sparsity) tensor-core rates.

    Attributes
    ----------
    bf16_flops, fp8_flops, fp4_flops:
        Dense tensor-core FLOP/s in bf16, fp8 (FP32 accumulate) and fp4 (NVFP4 / MXFP4);
        None where the part has no such tensor-core format.
    hbm_bytes_per_s:
        Device memory bandwidth, bytes/s.
    interconnect_bytes_per_s:
        GPU-to-GPU bandwidth per GPU as the datasheet states it (NVLink / Infinity
        Fabric: both directions together; PCIe parts: the x16 link, both directions),
        bytes/s.  The time model uses half of it (one direction) for all-reduces.
    interconnect:
        ``nvlink``, ``pcie`` or ``infinity-fabric``.
    memory_type:
        ``hbm`` (HBM2 / HBM2e: A100, H100 PCIe), ``hbm3`` (HBM3 / HBM3e: H100 SXM and
        NVL, H200, B200, GB200, MI300X and later) or ``gddr`` (GDDR6 / GDDR6X): the
        fraction of the peak bandwidth kernels reach differs by memory generation
        (``kvcore.sim.timing.Efficiency.memory`` / ``memory_hbm3`` / ``memory_gddr``).
    source:
        The datasheet(s) the figures come from.
    """

    bf16_flops: float
    fp8_flops: float | None
    fp4_flops: float | None
    hbm_bytes_per_s: float
    interconnect_bytes_per_s: float
    interconnect: str
    source: str
    memory_type: str = "hbm"

    def to_dict(self) -> dict[str, object]:
        return {"bf16_flops": self.bf16_flops, "fp8_flops": self.fp8_flops,
                "fp4_flops": self.fp4_flops, "hbm_bytes_per_s": self.hbm_bytes_per_s,
                "interconnect_bytes_per_s": self.interconnect_bytes_per_s,
                "interconnect": self.interconnect, "memory_type": self.memory_type,
                "source": self.source}


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
    perf:
        Peak compute and bandwidth figures (:class:`GPUPerf`), with their source.
    """

    name: str
    memory_bytes: int
    vendor: str
    device_name: str
    source: str
    aliases: tuple[str, ...] = field(default=())
    perf: GPUPerf | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name, "memory_bytes": self.memory_bytes, "vendor": self.vendor,
            "device_name": self.device_name, "source": self.source,
            "aliases": list(self.aliases)}
        if self.perf is not None:
            out["perf"] = self.perf.to_dict()
        return out


def _smi(mib: int) -> int:
    return mib * _MIB


_BASE_CATALOG: tuple[GPU, ...] = (
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

_T = 1e12
_G = 1e9
_NV_H100 = ("NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100): "
            "dense = half the sparsity figures")
#: name -> peak figures (dense tensor-core FLOP/s; bytes/s); each with its datasheet
_PERF: dict[str, GPUPerf] = {
    "H100-SXM": GPUPerf(989.4 * _T, 1978.9 * _T, None, 3.35 * _T, 900 * _G, "nvlink",
                        _NV_H100 + " (SXM: BF16 1,979 / FP8 3,958 TFLOPS sparse, 3.35 "
                        "TB/s HBM3, NVLink 900 GB/s)", "hbm3"),
    "H100-PCIe": GPUPerf(756.5 * _T, 1513 * _T, None, 2.0 * _T, 128 * _G, "pcie",
                         _NV_H100 + " (PCIe: BF16 1,513 / FP8 3,026 TFLOPS sparse, 2 TB/s "
                         "HBM2e, PCIe Gen5 128 GB/s)"),
    "H100-NVL": GPUPerf(835.5 * _T, 1671 * _T, None, 3.9 * _T, 600 * _G, "nvlink",
                        _NV_H100 + " (NVL: BF16 1,671 / FP8 3,341 TFLOPS sparse, 3.9 TB/s, "
                        "NVLink bridge 600 GB/s)", "hbm3"),
    "H200": GPUPerf(989.4 * _T, 1978.9 * _T, None, 4.8 * _T, 900 * _G, "nvlink",
                    "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/"
                    "h200): SXM BF16 1,979 / FP8 3,958 TFLOPS sparse, 4.8 TB/s HBM3e, "
                    "NVLink 900 GB/s", "hbm3"),
    "B200": GPUPerf(2.25e15, 4.5e15, 9e15, 8 * _T, 1800 * _G, "nvlink",
                    "NVIDIA DGX B200 datasheet (8 GPUs: FP8 72 PFLOPS, FP4 144 PFLOPS "
                    "sparse, 64 TB/s HBM3e, NVLink 5 1.8 TB/s per GPU): per GPU dense "
                    "BF16 2.25 / FP8 4.5 / FP4 9 PFLOPS", "hbm3"),
    "GB200": GPUPerf(2.5e15, 5e15, 10e15, 8 * _T, 1800 * _G, "nvlink",
                     "NVIDIA GB200 NVL72 datasheet (72 GPUs: BF16 360 / FP8 720 / FP4 "
                     "1,440 PFLOPS sparse, 576 TB/s HBM3e, NVLink 1.8 TB/s per GPU): per "
                     "GPU dense BF16 2.5 / FP8 5 / FP4 10 PFLOPS", "hbm3"),
    "A100-40GB": GPUPerf(312 * _T, None, None, 1.555 * _T, 600 * _G, "nvlink",
                         "NVIDIA A100 Tensor Core GPU datasheet: BF16 312 TFLOPS dense "
                         "(624 sparse), 40GB HBM2 1,555 GB/s, NVLink 600 GB/s"),
    "A100-80GB": GPUPerf(312 * _T, None, None, 2.039 * _T, 600 * _G, "nvlink",
                         "NVIDIA A100 Tensor Core GPU datasheet: BF16 312 TFLOPS dense "
                         "(624 sparse), 80GB SXM HBM2e 2,039 GB/s, NVLink 600 GB/s"),
    "L40S": GPUPerf(362.05 * _T, 733 * _T, None, 864 * _G, 64 * _G, "pcie",
                    "NVIDIA L40S datasheet: BF16 362.05 / FP8 733 TFLOPS dense (733 / "
                    "1,466 sparse), 864 GB/s GDDR6, PCIe Gen4 x16 64 GB/s", "gddr"),
    "L4": GPUPerf(121 * _T, 242.5 * _T, None, 300 * _G, 64 * _G, "pcie",
                  "NVIDIA L4 datasheet: BF16 242 / FP8 485 TFLOPS sparse (dense half), "
                  "300 GB/s GDDR6, PCIe Gen4 x16 64 GB/s", "gddr"),
    "A10": GPUPerf(125 * _T, None, None, 600 * _G, 64 * _G, "pcie",
                   "NVIDIA A10 datasheet: BF16 125 TFLOPS dense (250 sparse), 600 GB/s "
                   "GDDR6, PCIe Gen4 64 GB/s", "gddr"),
    "RTX-4090": GPUPerf(165.2 * _T, 330.3 * _T, None, 1008 * _G, 64 * _G, "pcie",
                        "NVIDIA Ada Lovelace architecture whitepaper, RTX 4090: BF16 165.2"
                        " / FP8 330.3 TFLOPS dense with FP32 accumulate, 1,008 GB/s "
                        "GDDR6X, PCIe Gen4 x16 64 GB/s", "gddr"),
    "MI300X": GPUPerf(1307.4 * _T, 2614.9 * _T, None, 5.3 * _T, 896 * _G,
                      "infinity-fabric",
                      "AMD Instinct MI300X datasheet: BF16 1,307.4 / FP8 2,614.9 TFLOPS "
                      "dense, 5.3 TB/s HBM3, Infinity Fabric 896 GB/s peak aggregate",
                      "hbm3"),
    "MI325X": GPUPerf(1307.4 * _T, 2614.9 * _T, None, 6.0 * _T, 896 * _G,
                      "infinity-fabric",
                      "AMD Instinct MI325X datasheet: BF16 1,307.4 / FP8 2,614.9 TFLOPS "
                      "dense, 6 TB/s HBM3E, Infinity Fabric 896 GB/s", "hbm3"),
    "MI355X": GPUPerf(2516.6 * _T, 5033.2 * _T, 10066.3 * _T, 8.0 * _T, 1075.2 * _G,
                      "infinity-fabric",
                      "AMD Instinct MI355X datasheet: BF16 2.5 / FP8 5.0 / MXFP4 10.1 "
                      "PFLOPS dense, 8 TB/s HBM3E, Infinity Fabric 1,075 GB/s", "hbm3"),
}

GPU_CATALOG: tuple[GPU, ...] = tuple(replace(g, perf=_PERF.get(g.name))
                                     for g in _BASE_CATALOG)


def _key(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text.strip().lower()).removeprefix("nvidia").removeprefix(
        "amd").removeprefix("instinct")


def list_gpus() -> list[GPU]:
    """The catalog, in its order."""
    return list(GPU_CATALOG)


def check_attention_block_size(block_size: int | None, gpu: object = None) -> None:
    """Refuse a ``--block-size`` the attention backends vLLM 0.32 runs on a catalog GPU
    (NVIDIA or AMD, ``gpu`` for the message) cannot split into kernel blocks: vLLM's
    ``select_common_block_size`` (vllm/v1/worker/utils.py) needs a kernel block size
    that divides ``block_size`` and every backend takes only multiples of
    :data:`ATTENTION_BLOCK_SIZE_MULTIPLE` (16), so ``block_size % 16 != 0`` raises
    "No common block size for 7" and the engine does not start.  ``None`` (vLLM picks
    the size) passes.  Raises ConfigError naming ``block_size``."""
    from kvcore.errors import ConfigError
    from kvcore.units import as_int

    number = None if block_size is None else as_int(block_size)  # numpy ints too
    if number is None:
        return  # not given, or not an int: the planner's own check names it
    block_size = number
    m = ATTENTION_BLOCK_SIZE_MULTIPLE
    if block_size % m:
        on = f" on {getattr(gpu, 'name', gpu)}" if gpu else " on a GPU"
        lo, hi = max(m, block_size // m * m), (block_size // m + 1) * m
        near = f"{lo} or {hi}" if lo != hi and lo < block_size else f"{hi}"
        raise ConfigError(
            f"block_size {block_size}: vLLM 0.32's attention backends{on} take block "
            f"sizes that are multiples of {m} (get_supported_kernel_block_sizes -> "
            f"MultipleOf({m}); select_common_block_size raises 'No common block size'); "
            f"use e.g. {near}", field="block_size", value=block_size)


def get_gpu(name: str, *, memory_flag: bool = True) -> GPU:
    """The catalog entry for ``name`` (catalog name, alias or device name; case, spaces,
    ``-`` and ``_`` ignored).

    Raises ConfigError (field ``gpu``) listing the catalog names for an unknown one;
    ``memory_flag``: the message also offers ``--gpu-memory SIZE`` (``kvcore plan``'s
    flag for a GPU outside the catalog; the simulated clock needs the catalog's FLOP/s
    and bandwidths, so ``simulate`` / ``tune`` / ``calibrate`` pass False).
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
                      f"{', '.join(g.name for g in GPU_CATALOG)}"
                      + (" (or give --gpu-memory SIZE)" if memory_flag else ""),
                      field="gpu", value=name)


# ---- `kvcore gpus` -------------------------------------------------------------------------

def add_subparser(sub: object) -> None:
    """Register ``kvcore gpus [--json]`` on the CLI's subparsers."""
    p = sub.add_parser("gpus", help="list the GPU catalog (kvcore plan --gpu NAME)",  # type: ignore[attr-defined]
                       description="The GPU catalog: memory as the device reports it "
                       "(nvidia-smi / rocm-smi), with the source of each figure.")
    p.add_argument("--json", action="store_true", help="print the catalog as JSON")
    p.set_defaults(func=_cmd_gpus)


def _cmd_gpus(args: object) -> int:

    from kvcore.planning import format_bytes

    if getattr(args, "json", False):
        print(dumps_json({"gpus": [g.to_dict() for g in GPU_CATALOG]}, indent=2))
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
