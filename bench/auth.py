"""Auth cost: how long `TokenAuth.authenticate` takes per request, for the state dir's token and
for a stored token among N (the in-memory map from SHA-256 to credential). The target: ≤ 1 ms
per request (issue 11); `bench/submit.py --user-tokens N` measures the whole submit path.

    .venv/bin/python bench/auth.py [--tokens 10000] [--json]

Standard library + gpuyard only.
"""

from __future__ import annotations

import argparse
import json
import secrets
import timeit

from machine import with_machine

from gpuyard.domain.principal import Principal
from gpuyard.services.access.tokens import Credential, TokenAuth, token_hash


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=10_000, help="stored tokens in the map")
    ap.add_argument("--json", action="store_true", help="one JSON line")
    args = ap.parse_args()
    state = secrets.token_urlsafe(32)
    auth = TokenAuth(state, Principal("root", "admin"))
    credentials: dict[str, Credential] = {}
    secret = state
    for i in range(args.tokens):
        secret = "gpy_" + secrets.token_urlsafe(32)
        user = Principal(f"user{i}", "user", "default", "submit")
        credentials[token_hash(secret)] = Credential(user, expires_at=2e9, token_id=i)
    auth.replace(credentials)
    result: dict[str, object] = {"stored_tokens": args.tokens}
    number = 100_000
    for name, header in (("state_token", state), ("stored_token", secret)):
        value = f"Bearer {header}".encode()
        best = min(timeit.repeat(lambda v=value: auth.authenticate(v), number=number, repeat=5))
        result[f"{name}_us"] = round(best / number * 1e6, 3)
    if args.json:
        print(json.dumps(with_machine(result)))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
