"""Serve a workspace's report on 127.0.0.1 (``arena view``): built into a temporary folder, never the workspace.

Read-only and under the shared guard (``httpd.Guard``): a Host other than loopback's is a 403 (a page that
rebinds its DNS name to 127.0.0.1 reads nothing), a POST is a 415 unless JSON, then a 405.
"""

from __future__ import annotations

import functools
import http.server
import tempfile
from pathlib import Path

from ..httpd import Guard, GuardedHandler, ThreadedServer, listen
from .html import INLINE_LIMIT, write_report

HOST = "127.0.0.1"


class _Files(GuardedHandler, http.server.SimpleHTTPRequestHandler):
    guard = Guard.bound_to(HOST)

    def do_GET(self) -> None:
        if not self.host_refused():
            super().do_GET()

    def do_HEAD(self) -> None:
        if not self.host_refused():
            super().do_HEAD()

    def do_POST(self) -> None:
        if not self.host_refused() and self.read_body(lambda: None) is not None:
            self.refuse(405, "the report is read-only: GET its pages")


class ReportServer(ThreadedServer):
    """The report of ``workspace`` written to a temporary folder and served from it over HTTP on 127.0.0.1.

    ``port`` 0 takes a free port. ``url`` is the page's address once started; ``close`` stops the
    server and removes the folder.
    """

    def __init__(self, workspace: str | Path, port: int = 0, *, inline_limit: int = INLINE_LIMIT):
        self._tmp = tempfile.TemporaryDirectory(prefix="arena-view-")
        try:
            self.page = write_report(workspace, Path(self._tmp.name) / "index.html", inline_limit=inline_limit)
            self.httpd = listen(HOST, port, functools.partial(_Files, directory=self._tmp.name), _Files.guard)
        except BaseException:
            self._tmp.cleanup()
            raise
        self.port = self.httpd.server_address[1]
        self.url = f"http://{HOST}:{self.port}/index.html"

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._tmp.cleanup()
