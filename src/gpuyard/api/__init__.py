"""HTTP API: FastAPI app factory, thin routes, auth and one error-to-status table."""
