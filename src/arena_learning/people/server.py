"""The vote page (``arena vote``): a small HTTP server on 127.0.0.1 over a workspace's answers.

The threat: a hostile answer (markup, script) and a voter who should not know which model is which.
The defence: the page's own script sets every text with ``textContent`` under a strict CSP (only
the page's own script and style, no inline code); the page never receives a model name before the
vote: an item is a sealed token (the pair, encrypted and authenticated with a key kept in the
workspace, ``vote.key``) that only the server can open, so a killed and restarted server still
takes the votes of the items it showed. Bound elsewhere than 127.0.0.1 it needs a token.

Every vote is written at once (its own commit). The workspace has one writer at a time: while a run
holds it, a vote waits up to ``wait_s`` for the lock, then the page is told the workspace is busy
and keeps the vote (in the browser's storage) and sends it again until it is stored; a vote id
makes a resubmission count once.
"""

from __future__ import annotations

import hmac
import http.server
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
from cryptography.fernet import Fernet, InvalidToken

from ..errors import ArenaError
from ..httpd import ThreadedServer
from ..records import Vote
from ..store import DEFAULT_SET, Store, WorkspaceLocked
from .quality import VoterRule, voter_figures
from .schedule import EMPTY, Item, Pool, ScheduleOptions, next_item
from .workspace import RULE_META, saved_rule, vote_pool

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
ASSETS = Path(__file__).parent / "assets"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'none'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
FILES = {"/": ("vote.html", "text/html; charset=utf-8"), "/vote.js": ("vote.js", "text/javascript; charset=utf-8"),
         "/vote.css": ("vote.css", "text/css; charset=utf-8")}
VERDICTS = ("a", "b", "tie", "both_bad")
MAX_BODY = 16_384


class Busy(ArenaError):
    """The workspace stayed held by another writer for the whole wait: the vote is not stored yet."""


class BadRequest(ArenaError):
    """A request the page would never send (unknown item, bad verdict, wrong token)."""


# ---- sealed items -------------------------------------------------------------------------------
# Fernet (AES-128-CBC with an HMAC-SHA256 tag, from `cryptography`): the page holds an item it cannot read or forge


def seal(key: bytes, payload: dict[str, Any]) -> str:
    """Return ``payload`` encrypted and authenticated with the workspace's key (a Fernet token)."""
    return Fernet(key).encrypt(json.dumps(payload, separators=(",", ":")).encode()).decode()


def unseal(key: bytes, token: str) -> dict[str, Any]:
    """Return the payload of a sealed token; BadRequest for one this key did not seal."""
    try:
        payload: dict[str, Any] = json.loads(Fernet(key).decrypt(token.encode()))
    except (InvalidToken, ValueError, TypeError):
        raise BadRequest("the item is not one this page showed") from None
    return payload


def workspace_key(root: Path) -> bytes:
    """Return the workspace's sealing key (``vote.key``, made once, readable by its owner only)."""
    path = root / "vote.key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    key = Fernet.generate_key()
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    return key


# ---- the server -----------------------------------------------------------------------------------


@dataclass
class VoteSettings:
    """What ``arena vote`` was given: where it listens, what it shows, how long a vote waits for the store."""

    host: str = "127.0.0.1"
    port: int = 0
    token: str | None = None
    set_name: str = DEFAULT_SET
    schedule: ScheduleOptions = field(default_factory=ScheduleOptions)
    rule: VoterRule | None = None
    wait_s: float = 10.0


class VoteApp:
    """The page's answers to its requests, apart from HTTP (the handler only translates)."""

    def __init__(self, workspace: str | Path, settings: VoteSettings):
        self.root = Path(workspace)
        self.settings = settings
        self.pool: Pool = vote_pool(self.root, settings.set_name)
        self.key = workspace_key(self.root)
        self._rng = np.random.default_rng(settings.schedule.seed)
        self._lock = threading.Lock()

    def _votes(self) -> list[Vote]:
        with Store(self.root, readonly=True) as store:
            return store.get_votes(self.settings.set_name)

    def _write(self, action: Any) -> Any:
        """Return ``action(store)`` run on the store opened for writing; wait for the lock up to ``wait_s``."""
        deadline = time.monotonic() + self.settings.wait_s
        while True:
            try:
                with Store(self.root, create=False) as store:
                    return action(store)
            except WorkspaceLocked as err:
                if time.monotonic() >= deadline:
                    raise Busy(str(err)) from None
                time.sleep(0.2)

    def next(self, voter: str) -> dict[str, Any]:
        """Return the voter's next item: the prompt's turns and two answers, models sealed in ``item``."""
        voter = _voter(voter)
        with self._lock:  # one generator for every thread
            votes = self._votes()
            item = next_item(self.pool, votes, voter, self.settings.schedule, self._rng)
        mine = sum(v.voter == voter for v in votes)
        if item is None:
            return {"done": True, "votes": mine}
        prompt = self.pool.prompts[item.prompt_id]
        token = seal(self.key, {"s": item.set_name, "p": item.prompt_id, "a": item.model_a, "b": item.model_b,
                                "c": item.control, "t": time.time(), "v": voter})
        return {"item": token, "prompt": list(prompt.turns), "left": self._turns(item, item.model_a, prompt.turns),
                "right": self._turns(item, item.model_b, prompt.turns), "votes": mine}

    def _turns(self, item: Item, model: str, prompt_turns: list[str]) -> list[str]:
        if model == EMPTY:
            return [""] * len(prompt_turns)
        return list(self.pool.answers[(item.prompt_id, model)].turns)

    def vote(self, body: dict[str, Any]) -> dict[str, Any]:
        """Store a vote (once per vote id); return what it was and the models behind it."""
        shown = unseal(self.key, str(body.get("item", "")))
        voter = _voter(body.get("voter"))
        if voter != shown["v"]:
            raise BadRequest("this item was shown to another voter")
        verdict = body.get("verdict")
        if verdict not in VERDICTS:
            raise BadRequest(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
        now = time.time()
        seconds = max(0.0, now - shown["t"])
        given = body.get("seconds")
        if isinstance(given, (int, float)) and 0 <= given <= seconds + 1:  # time on screen, queueing left out
            seconds = float(given)
        vote = Vote(vote_id=_vote_id(body.get("vote_id")), set_name=shown["s"], prompt_id=shown["p"],
                    model_a=shown["a"], model_b=shown["b"], verdict=verdict, voter=voter, shown_at=shown["t"],
                    voted_at=shown["t"] + seconds, seconds=seconds, control=shown["c"])
        stored = self._write(lambda store: store.record_vote(vote))
        return {"stored": stored, "vote_id": vote.vote_id, "left": shown["a"] or "(an empty answer)",
                "right": shown["b"] or "(an empty answer)"}

    def undo(self, body: dict[str, Any]) -> dict[str, Any]:
        voter, vote_id = _voter(body.get("voter")), _vote_id(body.get("vote_id"))
        return {"undone": self._write(lambda store: store.retract_vote(vote_id, voter))}

    def summary(self) -> dict[str, Any]:
        votes = self._votes()
        with Store(self.root, readonly=True) as store:
            rule = self.settings.rule or saved_rule(store)
        return {"voters": [f.to_dict() for f in voter_figures(votes, rule)],
                "control_share": self.settings.schedule.control_share}


def _voter(value: object) -> str:
    name = str(value or "").strip()
    if not name or len(name) > 80:
        raise BadRequest("give a voter name (1 to 80 characters)")
    return name


def _vote_id(value: object) -> str:
    text = str(value or "")
    if not 8 <= len(text) <= 64 or not all(c.isalnum() or c in "-_" for c in text):
        raise BadRequest("the vote id must be 8 to 64 letters, digits, - or _")
    return text


class _Handler(http.server.BaseHTTPRequestHandler):
    app: VoteApp

    def log_message(self, format: str, *args: object) -> None:  # `format` shadows the builtin: the base class's name
        pass

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", CSP)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, value: dict[str, Any]) -> None:
        self._send(status, json.dumps(value, ensure_ascii=False).encode(), "application/json; charset=utf-8")

    def _authorised(self) -> bool:
        token = self.app.settings.token
        return token is None or hmac.compare_digest(self.headers.get("X-Arena-Token", ""), token)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/favicon.ico":  # no icon: an empty answer rather than a 404 in the console
            self._send(204, b"", "image/x-icon")
            return
        if url.path in FILES:
            name, kind = FILES[url.path]
            self._send(200, (ASSETS / name).read_bytes(), kind)
            return
        self._api(url.path, parse_qs(url.query), None)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if not self.headers.get("Content-Type", "").startswith("application/json") or length > MAX_BODY:
            self._json(400, {"error": "send JSON (Content-Type: application/json) of at most 16 KB"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": "the body is not JSON"})
            return
        self._api(urlsplit(self.path).path, {}, body if isinstance(body, dict) else {})

    def _api(self, path: str, query: dict[str, list[str]], body: dict[str, Any] | None) -> None:
        if not self._authorised():
            self._json(403, {"error": "this page needs the token `arena vote` was started with (open the URL it "
                                      "printed)"})
            return
        routes = {("GET", "/api/next"): lambda: self.app.next((query.get("voter") or [""])[0]),
                  ("GET", "/api/summary"): self.app.summary,
                  ("POST", "/api/vote"): lambda: self.app.vote(body or {}),
                  ("POST", "/api/undo"): lambda: self.app.undo(body or {})}
        route = routes.get(("GET" if body is None else "POST", path))
        if route is None:
            self._json(404, {"error": f"no such page: {path}"})
            return
        try:
            self._json(200, route())
        except Busy as err:
            self._json(503, {"busy": True, "error": f"{err}. Your vote is kept in this page and sent again until "
                                                     "it is stored"})
        except ArenaError as err:
            self._json(400, {"error": str(err)})


class VoteServer(ThreadedServer):
    """The vote page of ``workspace`` served over HTTP; ``url`` once made, ``start`` (a thread) or ``serve_forever``."""

    def __init__(self, workspace: str | Path, settings: VoteSettings | None = None):
        self.settings = settings or VoteSettings()
        if self.settings.host not in LOCAL_HOSTS and not self.settings.token:
            raise ArenaError(f"--host {self.settings.host} lets other machines vote: give --token T as well (the "
                             "page then needs it), or keep the default 127.0.0.1")
        if not Store.exists(workspace):
            raise ArenaError(f"{workspace} is not a workspace (no {Store.FILE}): give the directory a run wrote to")
        self.app = VoteApp(workspace, self.settings)
        self.note = self._save_rule()
        handler = type("Handler", (_Handler,), {"app": self.app})
        try:
            server = type("Server", (http.server.ThreadingHTTPServer,), {
                "address_family": socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET})
            self.httpd = server((self.settings.host, self.settings.port), handler)
        except OSError as err:
            raise ArenaError(f"cannot listen on {self.settings.host}:{self.settings.port} ({err}): give another "
                             "--port") from None
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        host = f"[{self.settings.host}]" if ":" in self.settings.host else self.settings.host
        self.url = f"http://{host}:{self.port}/" + (f"#token={self.settings.token}" if self.settings.token else "")

    def _save_rule(self) -> str | None:
        """Save the voter rule given (the board and audit apply it) and make the votes table; a note when busy."""
        rule = self.settings.rule
        try:
            with Store(self.app.root, create=False) as store:
                if rule is not None:
                    store.set_meta(RULE_META, rule.__dict__)
        except WorkspaceLocked as err:
            return f"{err}; votes wait for it and are stored when it ends" + (
                " (the voter rule given is applied on this page only)" if rule is not None else "")
        return None
