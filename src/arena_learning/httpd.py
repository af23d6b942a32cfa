"""A stdlib HTTP server served from a thread (tests, embedding) or in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import http.server
import signal
import threading
from typing import TypeVar

S = TypeVar("S", bound="ThreadedServer")


class ThreadedServer:
    """Owns ``httpd`` (set by the subclass); ``start`` serves it in a thread, ``close`` stops and frees it."""

    httpd: http.server.ThreadingHTTPServer
    _thread: threading.Thread | None = None

    def start(self: S) -> S:
        """Serve in a background thread (for tests and embedding); return self."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_until_stopped(server: ThreadedServer) -> None:
    """Serve in the foreground until Ctrl-C or SIGTERM, then close the server (its ``close`` cleans up)."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
