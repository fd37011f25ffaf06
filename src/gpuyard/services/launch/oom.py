"""Recognising a job that died of GPU out-of-memory, from what the framework printed.

Worked example. Job 9 exits with code 1; the end of its log has
`torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB ...`. It ends
OUT_OF_MEMORY, not a bare FAILED, with that line and its peak GPU memory in the reason, so its
user knows to lower the batch size (or ask for more GPUs) instead of reading the traceback.
"""

from __future__ import annotations

import re

# What PyTorch, TensorFlow, JAX/XLA and CUDA libraries print when GPU memory runs out; and on
# AMD GPUs, PyTorch's ROCm build ("HIP out of memory", "HIP error: out of memory"), the HIP
# runtime's error names, rocBLAS and MIOpen (JAX's and TF's ROCm builds print XLA's and TF's).
_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation"
    r"|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|RESOURCE_EXHAUSTED: Out of memory"
    r"|OOM when allocating tensor|XlaRuntimeError: RESOURCE_EXHAUSTED"
    r"|HIP out of memory|HIP error: out of memory|hipErrorOutOfMemory|hipErrorMemoryAllocation"
    r"|rocblas_status_memory_error|miopenStatusAllocFailed"
)


def oom_line(log_tail: str) -> str | None:
    """The last line of the log that reports a GPU out-of-memory, trimmed, or None."""
    found = None
    for line in log_tail.splitlines():
        if _OOM.search(line):
            found = line.strip()
    if found is None:
        return None
    return found if len(found) <= 200 else found[:197] + "..."
