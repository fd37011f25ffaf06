"""Wire models of the REST API (version 1)."""
