"""observer: observability, drift and canary analysis for LLM serving."""

__version__ = "0.1.0"
