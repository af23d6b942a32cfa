"""The guard every local server shares, and a stdlib HTTP server served from a thread or in the foreground.

The threat: a web page the operator visits talks to a server on their machine, through the browser
(a cross-site POST, or a DNS name rebound to 127.0.0.1), and a client that holds connections open or
sends what no page would. The defence (``Guard``): a Host that is not the address served is a 403; a
POST that is not ``application/json`` is a 415, so a cross-site request always needs a preflight, and
no answer grants CORS; a Content-Length that is not a whole number is a 400, one too large a 413, both
before the token is checked and the token before the body is read; a socket timeout and a cap on
handlers at once; beyond loopback a token of at least 128 bits. Errors name no path, pid or host.
"""

from __future__ import annotations

import hmac
import http.server
import ipaddress
import json
import secrets
import signal
import socket
import string
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

from .errors import ArenaError

S = TypeVar("S", bound="ThreadedServer")

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
MIN_TOKEN_CHARS = 22
"""A token's fewest characters: 22 of ``secrets.token_urlsafe`` hold 128 bits."""
TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "-._~+/=")
MAKE_TOKEN = "python -c \"import secrets; print(secrets.token_urlsafe(32))\""


def is_loopback(host: str) -> bool:
    """Return whether binding ``host`` keeps the server on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    """Return a fresh random token of 256 bits (URL-safe text)."""
    return secrets.token_urlsafe(32)


def check_token(token: str, option: str) -> str:
    """Return ``token`` when it can be a secret (at least 128 bits' worth of characters); ArenaError otherwise."""
    if len(token) < MIN_TOKEN_CHARS or not set(token) <= TOKEN_CHARS:
        raise ArenaError(f"{option}: a token must be at least {MIN_TOKEN_CHARS} characters (128 bits) of letters, "
                         f"digits and - . _ ~ + / =; leave it out to have one made, or make one with `{MAKE_TOKEN}`")
    return token


def same_secret(given: str | None, expected: str) -> bool:
    """Return whether a header's value is ``expected``, in constant time, whatever bytes it holds."""
    return given is not None and hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode())


@dataclass(frozen=True)
class Guard:
    """What a server accepts.

    Attributes:
        hosts: the Host names it answers (lower case, no port): loopback names, the bound address, names allowed.
        any_ip: bound to every address (0.0.0.0, ::): a Host that is an IP address is also answered (a rebound
            DNS name is never an IP address; the token guards the rest).
        max_body: the largest body a POST may send (bytes).
        timeout_s: how long a client may take to send a request (socket timeout).
        max_handlers: connections handled at once; one more is told 503 and closed.
    """

    hosts: frozenset[str] = LOOPBACK_NAMES
    any_ip: bool = False
    max_body: int = 16_384
    timeout_s: float = 30.0
    max_handlers: int = 32

    @classmethod
    def bound_to(cls, host: str, allow_hosts: Iterable[str] = (), **limits: Any) -> Guard:
        """Return the guard of a server bound to ``host`` that also answers the names in ``allow_hosts``."""
        names = {_host_name(h) for h in (host, *allow_hosts)}
        return cls(hosts=LOOPBACK_NAMES | {n for n in names if n}, any_ip=host in WILDCARDS, **limits)

    def host_ok(self, value: str | None) -> bool:
        """Return whether a request's Host header names this server."""
        if not value or any(c in value for c in "/\\@?# \t"):
            return False
        name = _host_name(value)
        if name in self.hosts:
            return True
        if not self.any_ip or not name:
            return False
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True


def _host_name(value: str) -> str:
    """Return the name of a Host header or address (lower case, no port, no IPv6 brackets); '' when it has none."""
    if ":" in value and not value.startswith("[") and value.count(":") > 1:
        return value.lower()  # a bare IPv6 address
    try:
        return (urlsplit("//" + value).hostname or "").lower()
    except ValueError:
        return ""


ERRORS = {400: "a malformed request: send a well-formed HTTP/1.1 request", 404: "no such page",
          414: "the request line is too long", 431: "the headers are too long or too many",
          501: "this server takes GET and POST only", 505: "send HTTP/1.1"}
LINGER_BYTES = 1 << 17
REFUSED_HOST = ("this server answers only by the address it was started on (a Host header names another, as a "
                "page of another site would): open the address it printed, or start it with --allow-host NAME")


class GuardedHandler(http.server.BaseHTTPRequestHandler):
    """A request handler under a ``Guard``: JSON errors, a socket timeout, no traceback ever reaches the client."""

    guard: ClassVar[Guard] = Guard()
    server_version = "arena"
    sys_version = ""
    always: ClassVar[tuple[tuple[str, str], ...]] = (
        ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"), ("Cache-Control", "no-store"))
    _answered = False
    _body_read = False

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.guard.timeout_s)

    def log_message(self, format: str, *args: object) -> None:  # `format` shadows the builtin: the base class's name
        pass

    def send_response(self, code: int, message: str | None = None) -> None:
        self._answered = True
        super().send_response(code, message)

    def end_headers(self) -> None:
        for name, value in self.always:
            self.send_header(name, value)
        super().end_headers()

    def handle_one_request(self) -> None:
        self._answered = self._body_read = False
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception:  # a fault of this server: a 500 to the client, the traceback to the operator's console
            self.close_connection = True
            traceback.print_exc(file=sys.stderr)
            if not self._answered:
                try:
                    self.send_json(500, {"error": "the server failed on this request; its console says why"})
                except OSError:
                    pass

    def send_json(self, status: int, value: dict[str, Any], headers: Iterable[tuple[str, str]] = ()) -> None:
        body = json.dumps(value, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for name, value_ in headers:
            self.send_header(name, value_)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def refuse(self, status: int, message: str) -> None:
        """Answer ``status`` with ``message`` and close the connection (whatever body was sent stays unread)."""
        self.close_connection = True
        self.send_json(status, {"error": message})
        headers = getattr(self, "headers", None)
        if headers is not None and not self._body_read and ("Content-Length" in headers or
                                                            "Transfer-Encoding" in headers):
            self._linger()

    def _linger(self) -> None:
        """Let the answer reach the client before closing: a socket closed with unread bytes sends a reset that
        can destroy an answer still in flight, so say we are done, then drain a little of the body, briefly."""
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(1.0)
            drained = 0
            while drained < LINGER_BYTES:
                chunk = self.connection.recv(16_384)
                if not chunk:
                    break
                drained += len(chunk)
        except OSError:
            pass

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Answer the base class's errors (a malformed request, a file not found) as JSON that echoes nothing."""
        if self.request_version == "HTTP/0.9":  # a request line it could not read: answer in HTTP/1.x all the same
            self.request_version = "HTTP/1.0"
        self.refuse(code, ERRORS.get(code, HTTPStatus(code).phrase.lower()))

    def host_refused(self) -> bool:
        """Answer 403 and return True when the Host header does not name this server."""
        if self.guard.host_ok(self.headers.get("Host")):
            return False
        self.refuse(403, REFUSED_HOST)
        return True

    def read_body(self, authorised: Callable[[], str | None]) -> bytes | None:
        """Return a POST's body once its type, length and token are right; None when refused (answered).

        ``authorised`` returns None when the request may go on, else the message of a 403.
        """
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "application/json":
            self.refuse(415, "send JSON: Content-Type: application/json")
            return None
        lengths = set(self.headers.get_all("Content-Length") or [])
        if self.headers.get("Transfer-Encoding") or not lengths:
            self.refuse(411, "give the body's Content-Length (chunked bodies are not taken)")
            return None
        raw = lengths.pop().strip()
        if lengths or not (raw.isascii() and raw.isdigit()):
            self.refuse(400, "Content-Length must be one whole number of bytes")
            return None
        if int(raw) > self.guard.max_body:
            self.refuse(413, f"the body is over {self.guard.max_body} bytes")
            return None
        refused = authorised()
        if refused is not None:
            self.refuse(403, refused)
            return None
        body = self.rfile.read(int(raw))
        self._body_read = True
        if len(body) < int(raw):  # the client closed early
            self.close_connection = True
            return None
        return body

    def method_not_allowed(self) -> None:
        if not self.host_refused():
            self.refuse(405, "this server takes GET and POST only (and grants no cross-origin use)")

    do_OPTIONS = do_PUT = do_DELETE = do_PATCH = method_not_allowed


_BUSY = b'{"error": "too many connections at once: try again"}'
BUSY_REPLY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(_BUSY)).encode() + b"\r\nConnection: close\r\n\r\n" + _BUSY)


class GuardedHTTPServer(http.server.ThreadingHTTPServer):
    """A threading HTTP server that handles at most ``guard.max_handlers`` connections at once."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Callable[..., GuardedHandler], max_handlers: int):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.max_handlers = max_handlers
        self._slots = threading.BoundedSemaphore(max_handlers)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(BUSY_REPLY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def listen(host: str, port: int, handler: Callable[..., GuardedHandler], guard: Guard) -> GuardedHTTPServer:
    """Return a server of ``handler`` (whose guard is ``guard``) listening on ``host``:``port``; ArenaError when
    it cannot."""
    try:
        return GuardedHTTPServer((host, port), handler, guard.max_handlers)
    except OSError as err:
        raise ArenaError(f"cannot listen on {host}:{port} ({err.strerror or err}): give another --port") from None


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
