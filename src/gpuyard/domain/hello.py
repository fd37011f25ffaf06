"""The server proves it knows a token before a client sends it (stdlib only: the CLI and the
server both import it).

Whoever listens on the configured port gets what a client sends, and a bearer token sent to
the wrong listener (another local user who bound 127.0.0.1:8765 while the server was down)
is stolen. So, before its first secret, a client sends a random nonce to the unauthenticated
`GET /api/v1/hello?nonce=HEX&key=ID` and checks the answer, an HMAC of the nonce keyed by
the token's SHA-256 (what a server stores instead of the token): only a server that holds the
token (or its hash) can answer, and the answer reveals neither. `key` (a hash of the hash)
tells a server with many tokens which one is meant, and tells a listener nothing.

What it does not stop: a listener that relays the challenge to the real server, which is a
man in the middle; TLS (a reverse proxy with a certificate, `https://` URL) is the answer to
that, and the docs say so.
"""

from __future__ import annotations

# hashlib and hmac are imported where used: ~4 ms on the CLI's start path, and a client that
# talks over the Unix socket (no token) never proves anything.

PATH = "/api/v1/hello"
_CONTEXT = b"gpuyard-hello-v1\0"


def token_key(token: str) -> bytes:
    """The key a proof is made with: the token's SHA-256 (a server may keep only this)."""
    import hashlib

    return hashlib.sha256(token.encode()).digest()


def key_id(key: bytes) -> str:
    """Which token a client means, without revealing anything usable about it."""
    import hashlib

    return hashlib.sha256(b"gpuyard-key-id\0" + key).hexdigest()[:16]


def proof(key: bytes, nonce: bytes) -> str:
    """The answer to a nonce: HMAC-SHA256 of it, keyed by the token's hash."""
    import hashlib
    import hmac

    return hmac.new(key, _CONTEXT + nonce, hashlib.sha256).hexdigest()


def check(key: bytes, nonce: bytes, answer: str) -> bool:
    import hmac

    return hmac.compare_digest(proof(key, nonce), answer)
