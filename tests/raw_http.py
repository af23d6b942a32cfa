"""Raw HTTP/1.1 on 127.0.0.1 for the security tests: requests no client library sends (a foreign Host, a negative
Content-Length, bytes that are not ASCII in a header, a request left half-sent), and the checks every local
server must pass, each asserting the exact status."""

from __future__ import annotations

import http.client
import socket

Header = tuple[str, "str | bytes"]
JSON = ("Content-Type", "application/json")


def _bytes(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("latin-1")


def head(port: int, method: str, path: str, headers: list[Header] = (), *, host: str | bytes | None = None) -> bytes:
    """Return a request's head: the request line, Host (this server's unless given), Connection: close, the rest."""
    host = host if host is not None else f"127.0.0.1:{port}"
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: " + _bytes(host), b"Connection: close",
             *(name.encode() + b": " + _bytes(value) for name, value in headers)]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def exchange(port: int, data: bytes, *, timeout: float = 20.0) -> tuple[int, dict[str, str], bytes]:
    """Send ``data`` on a new connection and return the answer's status, headers (lower-case names) and body.

    The connection stays open for writing while the answer is read: an answer that comes back proves the server
    did not wait for a body it was promised."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        resp = http.client.HTTPResponse(sock, method=data.split(b" ", 1)[0].decode("latin-1"))  # HEAD: no body
        resp.begin()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


def request(port: int, method: str, path: str, headers: list[Header] = (), body: bytes = b"",
            *, host: str | bytes | None = None, length: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """Send one request (Content-Length: ``length``, else the body's own when there is one) and return the answer."""
    extra = list(headers)
    if length is not None or body:
        extra.append(("Content-Length", length if length is not None else str(len(body))))
    return exchange(port, head(port, method, path, extra, host=host) + body)


def assert_a_foreign_host_is_refused(port: int, method: str, path: str, headers: list[Header] = (),
                                     body: bytes = b"") -> None:
    """A Host that is not the server's (a DNS name rebound to 127.0.0.1) gets 403, however well-formed the rest."""
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil.example"):
        status, _, answer = request(port, method, path, headers, body, host=host)
        assert status == 403, (host, status, answer)
        assert method == "HEAD" or b"address it was started on" in answer


def assert_a_cross_site_post_is_refused(port: int, path: str, body: bytes, headers: list[Header] = ()) -> None:
    """A POST a page of another site can send without a preflight (text/plain, a form) gets 415, and no CORS grant."""
    for kind in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data"):
        status, answer_headers, _ = request(port, "POST", path, [("Content-Type", kind),
                                                                  ("Origin", "https://evil.example"), *headers], body)
        assert status == 415, (kind, status)
        assert "access-control-allow-origin" not in answer_headers
    status, answer_headers, _ = request(port, "OPTIONS", path, [("Origin", "https://evil.example"),
                                                                ("Access-Control-Request-Method", "POST")])
    assert status in (403, 405) and "access-control-allow-origin" not in answer_headers  # a preflight gets no grant


def assert_bad_lengths_are_400_before_any_body(port: int, path: str, headers: list[Header] = ()) -> None:
    """A negative or non-numeric Content-Length is a 400 that comes back while the body is still unsent."""
    for length in ("-1", "abc", "1e3", "+5", " 12x"):
        status, _, _ = exchange(port, head(port, "POST", path, [JSON, ("Content-Length", length), *headers]))
        assert status == 400, (length, status)


def assert_a_held_connection_blocks_nobody(port: int, path: str, closed_within_s: float | None) -> None:
    """A connection that sends half a request and waits neither stops another request being answered nor, where
    the server has a socket timeout (``closed_within_s``), stays open past it."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as held:
        held.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())  # no blank line: never ends
        status, _, _ = request(port, "GET", path)
        assert status == 200
        if closed_within_s is not None:
            held.settimeout(closed_within_s)
            assert held.recv(1024) == b""  # closed by the server (a timeout here raises: still open)


def assert_the_guard_holds(port: int, get_path: str, post_path: str, body: bytes, headers: list[Header] = ()) -> None:
    """Every check above that a request can make: a foreign Host on a GET and a JSON POST, a cross-site POST, bad
    Content-Lengths; ``headers`` (a cookie, a key) make each request one that would otherwise be served."""
    assert_a_foreign_host_is_refused(port, "GET", get_path, headers)
    assert_a_foreign_host_is_refused(port, "POST", post_path, [JSON, *headers], body)
    assert_a_cross_site_post_is_refused(port, post_path, body, headers)
    assert_bad_lengths_are_400_before_any_body(port, post_path, headers)
