"""Use cases and the controller loop; adapters plug in through the ports in `ports.py`."""
