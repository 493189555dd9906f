"""kvcore inside vLLM 0.32 (placeholder, filled in below)."""
