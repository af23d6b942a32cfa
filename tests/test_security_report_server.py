"""Attacks on the report server (`arena view`), on the real server on 127.0.0.1 over a real workspace's report: a
rebound Host reads nothing, a cross-site text/plain POST, a negative or non-numeric Content-Length, a held-open
connection, more connections than handlers, paths out of the report's folder; each asserts the exact status."""

from __future__ import annotations

import json
import socket
import time

from arena_learning.report.serve import ReportServer

from .raw_http import JSON, assert_a_foreign_host_is_refused, assert_a_held_connection_blocks_nobody, exchange, request
from .raw_http import assert_the_guard_holds as guard_holds
from .test_report import make_workspace


def test_the_report_answers_only_its_own_host_and_takes_no_post(tmp_path):
    ws, _ = make_workspace(tmp_path)
    with ReportServer(ws, port=0).start() as server:
        port = server.port
        status, headers, body = request(port, "GET", "/index.html")
        assert status == 200 and b"Arena report: rep" in body and headers["x-content-type-options"] == "nosniff"
        guard_holds(port, "/index.html", "/index.html", b'{"a": 1}')
        assert_a_foreign_host_is_refused(port, "HEAD", "/index.html")
        status, _, body = request(port, "POST", "/index.html", [JSON], b'{"a": 1}')
        assert status == 405 and "read-only" in json.loads(body)["error"]
        for path in ("/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/no-such.html"):
            status, _, body = request(port, "GET", path)
            assert status == 404 and json.loads(body) == {"error": "no such page"}
        status, _, body = exchange(port, b"GET / HTTP/x\r\nHost: 127.0.0.1\r\n\r\n")
        assert status == 400 and b"well-formed" in body


def test_a_held_connection_blocks_nobody_and_the_report_stays_up(tmp_path):
    ws, _ = make_workspace(tmp_path)
    with ReportServer(ws, port=0).start() as server:
        assert_a_held_connection_blocks_nobody(server.port, "/index.html", closed_within_s=None)
        held = []
        try:
            for _ in range(server.httpd.max_handlers + 2):  # more connections than handlers, all held
                held.append(socket.create_connection(("127.0.0.1", server.port), timeout=30))
                held[-1].sendall(b"GET / HTTP/1.1\r\n")
            status, _, body = request(server.port, "GET", "/index.html")
            assert status == 503 and b"too many connections" in body
        finally:
            for sock in held:
                sock.close()
        for _ in range(100):
            if request(server.port, "GET", "/index.html")[0] == 200:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the report server did not answer once the held connections closed")
