"""gpuyard: a self-hosted GPU training server.

`gpuyard.progress(step, total=None, **metrics)`: a job reports its progress (a no-op outside
gpuyard; `_progress.py`)."""

from gpuyard._progress import progress

__version__ = "0.1.0"
__all__ = ["__version__", "progress"]
