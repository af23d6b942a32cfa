"""Serve a workspace's report on 127.0.0.1 (``arena view``): built into a temporary folder, never the workspace."""

from __future__ import annotations

import functools
import http.server
import tempfile
from pathlib import Path

from ..httpd import ThreadedServer
from .html import INLINE_LIMIT, write_report

HOST = "127.0.0.1"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # `format` shadows the builtin: the base class's name
        pass

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()


class ReportServer(ThreadedServer):
    """The report of ``workspace`` written to a temporary folder and served from it over HTTP on 127.0.0.1.

    ``port`` 0 takes a free port. ``url`` is the page's address once started; ``close`` stops the
    server and removes the folder.
    """

    def __init__(self, workspace: str | Path, port: int = 0, *, inline_limit: int = INLINE_LIMIT):
        self._tmp = tempfile.TemporaryDirectory(prefix="arena-view-")
        try:
            self.page = write_report(workspace, Path(self._tmp.name) / "index.html", inline_limit=inline_limit)
        except BaseException:
            self._tmp.cleanup()
            raise
        handler = functools.partial(_Quiet, directory=self._tmp.name)
        try:
            self.httpd = http.server.ThreadingHTTPServer((HOST, port), handler)
        except OSError:
            self._tmp.cleanup()
            raise
        self.port = self.httpd.server_address[1]
        self.url = f"http://{HOST}:{self.port}/index.html"

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._tmp.cleanup()
