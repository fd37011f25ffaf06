"""GPU out-of-memory is recognised from what PyTorch, TensorFlow and JAX print."""

from __future__ import annotations

import pytest

from gpuyard.services.launch.oom import oom_line

OOMS = [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB "
    "total capacity)",
    "RuntimeError: CUDA error: out of memory",
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor "
    "with shape[8192,8192]",
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
    "allocate 17179869184 bytes.",
]


@pytest.mark.parametrize("line", OOMS)
def test_framework_oom_messages_are_recognised(line: str) -> None:
    assert oom_line(f"step 10 loss 0.3\nTraceback (most recent call last):\n{line}\n") == (
        line if len(line) <= 200 else line[:197] + "..."
    )


def test_other_failures_are_not_oom() -> None:
    assert oom_line("ValueError: bad shape\nKilled\nMemoryError") is None
