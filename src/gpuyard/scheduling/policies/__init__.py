"""The scheduling policies, by name."""
