"""Model configs: HF config.json -> ModelConfig -> per-layer specs through adapters."""

from kvcore.models.config import CacheConfig, ModelConfig, load_model_config, parse_model_config
from kvcore.models.embedded import embedded_names

__all__ = ["CacheConfig", "ModelConfig", "load_model_config", "parse_model_config",
           "embedded_names"]
