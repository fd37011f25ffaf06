"""Executors: run jobs as supervised process trees (local) or on a cluster (later: Ray)."""
