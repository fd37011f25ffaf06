"""Adapters: the store, executors and GPU probes that implement the services' ports."""
