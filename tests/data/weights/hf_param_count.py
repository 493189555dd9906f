"""Run under the vLLM reference venv (transformers): read {name: config dict} as JSON on
stdin, build each model on the meta device (no memory, no weights) and print
{name: {"params": n, "cls": class name}} (parameters + persistent buffers, tied weights
once), or {"error": ...} when transformers cannot build it."""

import json
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig  # noqa: E402


def count(model) -> int:
    params = sum(p.numel() for p in model.parameters())
    persistent = set(model.state_dict())
    return params + sum(b.numel() for n, b in model.named_buffers() if n in persistent)


def build(data):
    data = dict(data)
    data.pop("quantization_config", None)
    if isinstance(data.get("text_config"), dict):
        data["text_config"] = {k: v for k, v in data["text_config"].items()
                               if k != "quantization_config"}
    model_type = data.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **data)
    autos = ["AutoModelForCausalLM"]
    if model_type == "whisper":
        autos = ["AutoModelForSpeechSeq2Seq"]
    elif "vision_config" in data or "audio_config" in data:
        autos = ["AutoModelForImageTextToText", "AutoModelForCausalLM"]
    errors = []
    for auto in autos:
        try:
            with torch.device("meta"):
                return getattr(transformers, auto).from_config(cfg)
        except Exception as exc:  # noqa: BLE001 - reported back
            errors.append(f"{auto}: {type(exc).__name__}: {str(exc)[:160]}")
    raise RuntimeError("; ".join(errors))


out = {}
for name, data in json.load(sys.stdin).items():
    try:
        model = build(data)
        out[name] = {"params": count(model), "cls": type(model).__name__}
    except Exception as exc:  # noqa: BLE001
        out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
print(json.dumps(out))
