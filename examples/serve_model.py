"""A small model server for `gpuyard serve`: answers `GET /health` (the health check) and
`GET /predict?x=1.5` (a fixed linear model's answer, as JSON) on 127.0.0.1:$PORT, the port
the gpuyard server chose for the job. Standard library only.

    gpuyard serve --port auto --health /health -- python examples/serve_model.py
"""

from __future__ import annotations

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

WEIGHT, BIAS = 2.0, 0.5


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # http.server calls it by this name
        url = urlsplit(self.path)
        if url.path == "/health":
            self._answer(200, {"ok": True})
        elif url.path == "/predict":
            try:
                x = float(parse_qs(url.query).get("x", ["0"])[0])
            except ValueError:
                self._answer(400, {"error": "x must be a number, e.g. /predict?x=1.5"})
                return
            self._answer(200, {"x": x, "y": WEIGHT * x + BIAS})
        else:
            self._answer(404, {"error": "try /predict?x=1.5 or /health"})

    def _answer(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # one line a request, flushed
        print(f"{self.address_string()} {format % args}", flush=True)


def main() -> None:
    port = int(os.environ.get("PORT", "8000"))
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"serving on 127.0.0.1:{port} (job {os.environ.get('GPUYARD_JOB_ID', '-')})", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
