"""The CLI's client of the server, made in one place: every command asks `client()` for it.

Its own module so that the command bodies (`commands.py`), the job references (`job_refs.py`)
and every `*_cmd.py` module reach the server without importing one another. Standard library
only here: the client is imported when the first command asks for it (the CLI's start path).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing stays unimported on the CLI's start path
if TYPE_CHECKING:
    from gpuyard.client import Client


def client() -> Client:
    """A client of the server this user's CLI talks to (URL, socket and token as configured)."""
    from gpuyard.client import Client

    return Client()
