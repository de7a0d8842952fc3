"""The readiness probe of servers on loopback (local Slurm) asks with the servers' API key.

The launched servers are guarded by the deployment's key (issue 15), so /v1/models answers 401 to a bare probe: the
launch then never saw them ready by asking them and waited on the serve job's log instead, a SkyPilot request of
seconds each time (issue 35). A real HTTP server on loopback stands in for a guarded vLLM-Omni.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from worldtune.sky.backend import _answers
from worldtune.sky.run_script import PROBE_PATH

KEY = "k-0123456789abcdef"


class Guarded(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path == PROBE_PATH and self.headers.get("Authorization") == f"Bearer {KEY}"
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Guarded)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_guarded_server_is_ready_only_when_asked_with_its_key(url: str) -> None:
    assert _answers(url + PROBE_PATH, KEY)
    assert not _answers(url + PROBE_PATH)  # what the launch asked before: never ready
    assert not _answers(url + PROBE_PATH, "wrong")


def test_nothing_listening_is_not_ready() -> None:
    assert not _answers("http://127.0.0.1:9" + PROBE_PATH, KEY)
