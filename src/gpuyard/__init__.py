"""gpuyard: a self-hosted GPU training server."""

__version__ = "0.1.0"
