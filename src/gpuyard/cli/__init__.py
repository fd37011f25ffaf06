"""The `gpuyard` command line; talks to the server only through `gpuyard.client`."""
