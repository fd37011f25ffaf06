"""Trace replay in simulated time over `gpuyard.scheduling`, unchanged: the server's policies."""
