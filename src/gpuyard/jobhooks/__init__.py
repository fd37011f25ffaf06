"""Code that gpuyard runs inside a job's own Python interpreter.

`HOOK_DIR` holds a `sitecustomize.py` (stdlib only, Python 3.8+). Put first on a job's
PYTHONPATH with `GPUYARD_LINE_BUFFERED=1`, the job's Python writes its output a line at a time
(as at a terminal, never PYTHONUNBUFFERED's pieces); with `GPUYARD_GPU_MEM_CAP_MIB=<int>`, a
PyTorch job's CUDA caching
allocator caps itself at that budget (`torch.cuda.set_per_process_memory_fraction`, applied at
the job's first CUDA use), so an over-budget job gets its own `torch.cuda.OutOfMemoryError`.
"""

from __future__ import annotations

import os

HOOK_DIR: str = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")

__all__ = ["HOOK_DIR"]
