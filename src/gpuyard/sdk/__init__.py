"""The SDK's parts beside `gpuyard.client`: typed job records, `wait`'s errors, and Python
functions run as jobs. Users import them from `gpuyard.client`; this package keeps the client
module a list of routes."""
