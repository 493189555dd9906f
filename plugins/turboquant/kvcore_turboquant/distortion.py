"""Key MSE distortion of TurboQuant on random unit vectors.

``python -m kvcore_turboquant.distortion --head-size D --bits 2 3 4 --num-vectors N
[--norm-correction] [--seed S] [--json]``

For each bit width ``b``, draws ``N`` vectors uniformly on the unit sphere of R^D
(normalized Gaussians), quantizes them as TurboQuant keys (rotation + Lloyd-Max codes of
N(0, 1/D) + fp16 norm; with ``--norm-correction`` the ``_nc`` variant) and prints the mean
of ``||k - k^||^2``.  For unit vectors this is the MSE distortion of the TurboQuant paper
(Zandieh et al. 2025, arXiv:2504.19874, theorem 1), which approaches the Gaussian
Lloyd-Max values 0.1175 (2 bits), 0.03454 (3 bits), 0.009497 (4 bits) as D grows.
``--json`` prints ``{"results": [{"bits": b, "mse": x}, ...]}`` (plus the settings).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["key_mse", "random_unit_vectors", "main"]

#: Gaussian Lloyd-Max MSE per unit variance (Max 1960, table 1)
LLOYD_MAX_MSE = {1: 0.3634, 2: 0.1175, 3: 0.03454, 4: 0.009497}


def random_unit_vectors(n: int, head_size: int, seed: int = 0):
    """float32 [n, head_size] uniformly distributed on the unit sphere."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, head_size, generator=g, dtype=torch.float32)
    return x / x.norm(dim=-1, keepdim=True)


def key_mse(keys, bits: int, norm_correction: bool = False, batch: int = 16384) -> float:
    """Mean ``||k - k^||^2`` of keys float [N, D] through ``turboquant_k{bits}v4[_nc]``
    key quantization (bits in 2, 3, 4)."""
    import torch

    from kvcore_turboquant.quantizer import quantize_dequantize_keys
    from kvcore_turboquant.schemes import TurboQuantConfig

    cfg = TurboQuantConfig(bits, 4, norm_correction)
    total = 0.0
    for i in range(0, keys.shape[0], batch):
        x = keys[i:i + batch].to(torch.float32)
        xh = quantize_dequantize_keys(x, cfg)
        total += float(((x - xh) ** 2).sum(-1, dtype=torch.float64).sum())
    return total / keys.shape[0]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kvcore_turboquant.distortion",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--head-size", type=int, required=True, help="D, channels per head")
    p.add_argument("--bits", type=int, nargs="+", default=[2, 3, 4],
                   choices=[2, 3, 4], help="key bit widths")
    p.add_argument("--num-vectors", type=int, default=100_000)
    p.add_argument("--norm-correction", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.head_size < 1 or a.num_vectors < 1:
        p.error("--head-size and --num-vectors must be positive")
    keys = random_unit_vectors(a.num_vectors, a.head_size, a.seed)
    results = [{"bits": b, "mse": key_mse(keys, b, a.norm_correction)} for b in a.bits]
    if a.json:
        print(json.dumps({"head_size": a.head_size, "num_vectors": a.num_vectors,
                          "norm_correction": a.norm_correction, "results": results}))
    else:
        print(f"TurboQuant key MSE, D={a.head_size}, {a.num_vectors} random unit vectors"
              f"{', norm correction' if a.norm_correction else ''}")
        print(f"{'bits':>4}  {'mse':>10}  {'Lloyd-Max':>10}  {'ratio':>6}")
        for r in results:
            ref = LLOYD_MAX_MSE[r["bits"]]
            print(f"{r['bits']:>4}  {r['mse']:>10.6f}  {ref:>10.6f}  {r['mse'] / ref:>6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
