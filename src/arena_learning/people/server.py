"""The vote page (``arena vote``): a small HTTP server on 127.0.0.1 over a workspace's answers.

The threats: a hostile answer (markup, script); a voter who should not know which model is which; a
vote replayed, or cast under another voter's name; a web page of another site (``httpd.Guard``).
The defences: the page sets every text with ``textContent`` under a strict CSP. An item is a sealed
token (encrypted and authenticated with the workspace's ``vote.key``, padded to one length) issued to
one voter: it carries a nonce that its vote uses up (the vote's id, unique in the store) and expires.
A voter is a name bound to a secret the browser holds (an HttpOnly, SameSite=Strict cookie), or given
by an invitation link. Models are named only when a voter's session ends, and a session never shows a
prompt twice nor an answer whose model the voter knows. Beyond loopback every request needs a token.

Every vote is written at once (its own commit). The workspace has one writer at a time: while a run
holds it, a vote waits up to ``wait_s`` for the lock, then the page is told the workspace is busy
and keeps the vote (in the browser's storage) and sends it again until it is stored; the item's
nonce makes a resubmission count once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.cookies
import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlencode, urlsplit

import numpy as np
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import ArenaError
from ..httpd import Guard, GuardedHandler, ThreadedServer, check_token, is_loopback, listen, new_token, same_secret
from ..records import Vote
from ..store import DEFAULT_SET, Store, WorkspaceLocked
from .quality import VoterRule, voter_figures
from .schedule import EMPTY, Item, Pool, ScheduleOptions, next_item
from .workspace import RULE_META, saved_rule, vote_pool

ASSETS = Path(__file__).parent / "assets"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'none'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
FILES = {"/": ("vote.html", "text/html; charset=utf-8"), "/vote.js": ("vote.js", "text/javascript; charset=utf-8"),
         "/vote.css": ("vote.css", "text/css; charset=utf-8")}
VERDICTS = ("a", "b", "tie", "both_bad")
MAX_BODY = 16_384
COOKIE_DAYS = 30
ITEM_KEYS = frozenset({"s", "p", "a", "b", "c", "n", "v", "e", "t"})
START = "start first: give your name and press Start (this browser then keeps who you are)"


class VoteError(ArenaError):
    """A request the vote page answers with an error; ``status`` is its HTTP status."""

    status: ClassVar[int] = 400


class BadRequest(VoteError):
    """A request the page would never send (unknown item, bad verdict, a malformed field)."""


class NotStarted(VoteError):
    """No voter behind the request: the browser holds no valid voter cookie."""

    status = 401


class Forbidden(VoteError):
    """A voter asking for what is another's (their item, their name) or an invitation that is not one."""

    status = 403


class Expired(VoteError):
    """An item voted on after its time ran out."""

    status = 410


class Busy(VoteError):
    """The workspace stayed held by another writer for the whole wait: the vote is not stored yet."""

    status = 503


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


def server_token(host: str, given: str | None) -> str | None:
    """Return the token a server on ``host`` requires: the one given (checked), a new one beyond loopback, else none."""
    if given is not None:
        return check_token(given, "--token")
    return None if is_loopback(host) else new_token()


# ---- the server -----------------------------------------------------------------------------------


@dataclass
class VoteSettings:
    """What ``arena vote`` was given.

    Attributes:
        host, port: where it listens (port 0: any free port).
        token: the secret every request must carry (made when none is given and ``host`` is not loopback).
        allow_hosts: Host names it answers besides loopback and ``host`` (a reverse proxy's public name).
        set_name: the prompt set voted on.
        schedule, rule: what is shown next, and when a voter is flagged.
        wait_s: how long a vote waits for a run that holds the workspace.
        item_ttl_s: how long an item shown can be voted on.
        reveal_every: a voter's session ends (its models are named) after this many votes; 0: when they end it.
        voters: the only names that may vote, each by the invitation link printed (None: anyone gives a name).
        organiser: the organiser's key (the voters' figures); made when None.
        timeout_s, max_handlers: how long a client may take to send a request, connections handled at once.
    """

    host: str = "127.0.0.1"
    port: int = 0
    token: str | None = None
    allow_hosts: tuple[str, ...] = ()
    set_name: str = DEFAULT_SET
    schedule: ScheduleOptions = field(default_factory=ScheduleOptions)
    rule: VoterRule | None = None
    wait_s: float = 10.0
    item_ttl_s: float = 1800.0
    reveal_every: int = 20
    voters: tuple[str, ...] | None = None
    organiser: str | None = None
    timeout_s: float = 30.0
    max_handlers: int = 32


@dataclass(frozen=True)
class Voter:
    """A voter behind a request: the name and the session going on."""

    name: str
    session: int


class VoteApp:
    """The page's answers to its requests, apart from HTTP (the handler only translates)."""

    def __init__(self, workspace: str | Path, settings: VoteSettings, organiser: str):
        self.root = Path(workspace)
        self.settings = settings
        self.organiser = organiser
        self.pool: Pool = vote_pool(self.root, settings.set_name)
        self.key = workspace_key(self.root)
        self._fernet = Fernet(self.key)
        self._mac = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                         info=b"arena vote: voter tags, invitations").derive(self.key)
        self._rng = np.random.default_rng(settings.schedule.seed)
        self._lock = threading.Lock()
        self._shown: dict[Voter, set[str]] = {}  # prompts shown in a session (those voted on are in the store)
        self.invitations = {name: self._code("invite", name) for name in settings.voters or ()}
        longest = max(self.pool.prompt_ids, key=lambda p: len(json.dumps(p)))
        model = max([*self.pool.models, EMPTY], key=lambda m: len(json.dumps(m)))
        self._item_chars = len(self._item_text({"s": settings.set_name, "p": longest, "a": model, "b": model,
                                                "c": "identical", "n": "0" * 32, "v": "0" * 32, "e": 10 ** 9,
                                                "t": 10 ** 10 + 0.125})) + 16

    # ---- sealed items and voter cookies ----
    def _code(self, purpose: str, name: str) -> str:
        digest = hmac.new(self._mac, f"{purpose}\0{name}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    @staticmethod
    def _item_text(payload: dict[str, Any]) -> str:
        return json.dumps(payload, separators=(",", ":"))

    def seal(self, payload: dict[str, Any]) -> str:
        """Return ``payload`` encrypted and authenticated, padded so every item's token has one length."""
        text = self._item_text(payload)
        return self._fernet.encrypt(text.ljust(self._item_chars).encode()).decode()

    def _open(self, token: object, error: VoteError, ttl: int | None = None) -> dict[str, Any]:
        if not isinstance(token, str) or len(token) > 4096:
            raise error
        try:
            payload = json.loads(self._fernet.decrypt(token.encode("utf-8", "surrogateescape"), ttl=ttl))
        except (InvalidToken, ValueError, TypeError):
            raise error from None
        if not isinstance(payload, dict):
            raise error
        return payload

    def unseal(self, token: object) -> dict[str, Any]:
        """Return the payload of an item this server sealed; BadRequest for any other token."""
        payload = self._open(token, BadRequest("the item is not one this page showed: load the next one"))
        if not ITEM_KEYS <= payload.keys():
            raise BadRequest("the item is from an older page: reload the page")
        return payload

    def identify(self, cookie: str | None) -> Voter:
        """Return the voter whose cookie this is; NotStarted when it is none (or their name was bound anew)."""
        data = self._open(cookie, NotStarted(START), ttl=COOKIE_DAYS * 86400)
        name, secret = data.get("v"), data.get("k")
        if not isinstance(name, str) or not isinstance(secret, str):
            raise NotStarted(START)
        with Store(self.root, readonly=True) as store:
            bound = store.get_voter(name)
        if bound is None or not hmac.compare_digest(bound[0], _digest(secret)):
            raise NotStarted(START)
        return Voter(name, bound[1])

    def _cookie(self, name: str, secret: str | None = None) -> tuple[str, str]:
        """Return the digest of ``secret`` (a new one when None) and the cookie value that holds it with ``name``."""
        secret = secret or secrets.token_urlsafe(32)
        return _digest(secret), self._fernet.encrypt(json.dumps({"v": name, "k": secret}).encode()).decode()

    # ---- the store ----
    def _votes(self, retracted: bool = False) -> list[Vote]:
        with Store(self.root, readonly=True) as store:
            return store.get_votes(self.settings.set_name, retracted=retracted)

    def _write(self, action: Callable[[Store], Any]) -> Any:
        """Return ``action(store)`` run on the store opened for writing; wait for the lock up to ``wait_s``."""
        deadline = time.monotonic() + self.settings.wait_s
        while True:
            try:
                with Store(self.root, create=False) as store:
                    return action(store)
            except WorkspaceLocked:
                if time.monotonic() >= deadline:
                    raise Busy("the workspace is in use by a run (one writer at a time): what you sent is kept in "
                               "this page and sent again until it is stored") from None
                time.sleep(0.2)

    # ---- the requests ----
    def start(self, body: dict[str, Any], cookie: str | None) -> tuple[dict[str, Any], str | None]:
        """Start voting as the name given (bound to this browser) or by an invitation; return who and a new cookie."""
        invite = body.get("invite")
        if invite is not None:
            invited = next((n for n, code in self.invitations.items() if isinstance(invite, str)
                            and hmac.compare_digest(code.encode(), invite.encode("utf-8", "surrogateescape"))), None)
            if invited is None:
                raise Forbidden("this invitation link is not one of this vote's: ask the organiser for yours")
            digest, value = self._cookie(invited, self._code("secret", invited))  # the link's every browser alike
            self._write(lambda store: store.bind_voter(invited, digest, replace=True))
            return self.whoami(invited), value
        name = _voter(body.get("voter"))
        try:
            if self.identify(cookie).name == name:
                return self.whoami(name), None
        except NotStarted:
            pass
        if self.settings.voters is not None:
            raise Forbidden("this vote is by invitation: open the link the organiser sent you")
        digest, value = self._cookie(name)
        if not self._write(lambda store: store.bind_voter(name, digest)):
            raise Forbidden(f"the name {name!r} is taken by another browser: vote from the browser that took it, "
                            "or give another name")
        return self.whoami(name), value

    def whoami(self, name: str) -> dict[str, Any]:
        """Return the voter's name and counts: votes cast (not undone), votes in the session going on."""
        votes = [v for v in self._votes() if v.voter == name]
        with Store(self.root, readonly=True) as store:
            bound = store.get_voter(name)
        session = bound[1] if bound else 0
        return {"voter": name, "votes": len(votes), "session_votes": sum(v.session == session for v in votes),
                "reveal_every": self.settings.reveal_every}

    def next(self, voter: Voter) -> dict[str, Any]:
        """Return the voter's next item: the prompt's turns and two answers, models sealed in ``item``."""
        schedule = self.settings.schedule
        with self._lock:  # one generator for every thread
            votes = self._votes(retracted=True)
            shown = self._shown.setdefault(voter, set())
            shown |= {v.prompt_id for v in votes if v.voter == voter.name and v.session == voter.session}
            item = next_item(self.pool, votes, voter.name, schedule, self._rng, session=voter.session, shown=shown)
            if item is not None:
                shown.add(item.prompt_id)
            after = item or next_item(self.pool, votes, voter.name, schedule, np.random.default_rng(0),
                                      session=voter.session + 1)  # what ending the session would leave
        live = [v for v in votes if v.voter == voter.name and not v.retracted]
        counts = {"votes": len(live), "session_votes": sum(v.session == voter.session for v in live)}
        if item is None:
            return {"done": after is None, "end_session": after is not None, **counts}
        prompt = self.pool.prompts[item.prompt_id]
        token = self.seal({"s": item.set_name, "p": item.prompt_id, "a": item.model_a, "b": item.model_b,
                           "c": item.control, "n": secrets.token_hex(16), "v": self._code("voter", voter.name)[:32],
                           "e": voter.session, "t": round(time.time(), 3)})
        return {"item": token, "prompt": list(prompt.turns), "left": self._turns(item, item.model_a, prompt.turns),
                "right": self._turns(item, item.model_b, prompt.turns), **counts}

    def _turns(self, item: Item, model: str, prompt_turns: list[str]) -> list[str]:
        if model == EMPTY:
            return [""] * len(prompt_turns)
        return list(self.pool.answers[(item.prompt_id, model)].turns)

    def vote(self, voter: Voter, body: dict[str, Any]) -> dict[str, Any]:
        """Store a vote (once per item); return its id, and the session's models when this vote ended it."""
        shown = self.unseal(body.get("item"))
        if not hmac.compare_digest(str(shown["v"]), self._code("voter", voter.name)[:32]):
            raise Forbidden("this item was shown to another voter")
        verdict = body.get("verdict")
        if not isinstance(verdict, str) or verdict not in VERDICTS:
            raise BadRequest(f"the verdict must be one of {', '.join(VERDICTS)}")
        seconds = max(0.0, time.time() - shown["t"])  # measured here, from the item's issue
        if seconds > self.settings.item_ttl_s:
            raise Expired(f"the item expired ({self.settings.item_ttl_s / 60:g} minutes after it was shown): vote "
                          "on the next one")
        given = body.get("seconds")
        if isinstance(given, (int, float)) and not isinstance(given, bool) and 0 <= given < seconds:
            seconds = float(given)  # the page's time on screen, the network left out: never more than measured
        vote = Vote(vote_id=shown["n"], set_name=shown["s"], prompt_id=shown["p"], model_a=shown["a"],
                    model_b=shown["b"], verdict=verdict, voter=voter.name, shown_at=shown["t"],
                    voted_at=shown["t"] + seconds, seconds=seconds, control=shown["c"], session=voter.session)

        def store_it(store: Store) -> tuple[bool, list[dict[str, Any]] | None]:
            stored = store.record_vote(vote)
            every = self.settings.reveal_every
            if stored and every > 0 and len(self._session_votes(store, voter)) >= every:
                return stored, self._end(store, voter)
            return stored, None

        stored, reveal = self._write(store_it)
        return {"stored": stored, "vote_id": vote.vote_id, "reveal": reveal}

    def _session_votes(self, store: Store, voter: Voter) -> list[Vote]:
        return [v for v in store.get_votes(self.settings.set_name)
                if v.voter == voter.name and v.session == voter.session]

    def _end(self, store: Store, voter: Voter) -> list[dict[str, Any]] | None:
        """End the voter's session; return its real pairs with their models (None when it had ended already)."""
        if not store.end_session(voter.name, voter.session):
            return None
        with self._lock:
            self._shown.pop(voter, None)
        return [{"prompt": self.pool.prompts[v.prompt_id].turns[0][:200] if v.prompt_id in self.pool.prompts else "",
                 "left": v.model_a, "right": v.model_b, "verdict": v.verdict}
                for v in self._session_votes(store, voter) if v.control in (None, "repeat")]

    def end(self, voter: Voter) -> dict[str, Any]:
        """End the voter's session: return the models of its votes; the next session shows new prompts."""
        reveal = self._write(lambda store: self._end(store, voter))
        return {"reveal": reveal or []}

    def undo(self, voter: Voter, body: dict[str, Any]) -> dict[str, Any]:
        """Retract the voter's vote ``vote_id``; its item does not come back."""
        vote_id = _vote_id(body.get("vote_id"))
        return {"undone": self._write(lambda store: store.retract_vote(vote_id, voter.name))}

    def summary(self, voter: Voter | None) -> dict[str, Any]:
        """Return the voters' figures: every voter's for the organiser (``voter`` None), else the voter's own."""
        votes = self._votes()
        with Store(self.root, readonly=True) as store:
            rule = self.settings.rule or saved_rule(store)
        figures = voter_figures(votes, rule)
        if voter is not None:
            figures = [f for f in figures if f.voter == voter.name]
        return {"voters": [f.to_dict() for f in figures], "control_share": self.settings.schedule.control_share}


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _voter(value: object) -> str:
    name = value.strip() if isinstance(value, str) else ""
    if not name or len(name) > 80 or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise BadRequest("give a voter name (1 to 80 characters, no control characters)")
    return name


def _vote_id(value: object) -> str:
    text = value if isinstance(value, str) else ""
    if not 8 <= len(text) <= 64 or not all(c.isascii() and (c.isalnum() or c in "-_") for c in text):
        raise BadRequest("the vote id must be 8 to 64 letters, digits, - or _")
    return text


TOKEN_REFUSED = "this page needs the token `arena vote` was started with (open the URL it printed)"
Route = Callable[["_Handler", dict[str, Any]], tuple[dict[str, Any], str | None]]


class _Handler(GuardedHandler):
    app: ClassVar[VoteApp]
    token: ClassVar[str | None]
    cookie_name: ClassVar[str] = "arena_voter"
    always = (*GuardedHandler.always, ("Content-Security-Policy", CSP))

    def cookie(self) -> str | None:
        try:
            jar = http.cookies.SimpleCookie(self.headers.get("Cookie") or "")
        except http.cookies.CookieError:
            return None
        morsel = jar.get(self.cookie_name)
        return morsel.value if morsel is not None else None

    def voter(self) -> Voter:
        return self.app.identify(self.cookie())

    def _token_refused(self) -> str | None:
        ok = self.token is None or same_secret(self.headers.get("X-Arena-Token"), self.token)
        return None if ok else TOKEN_REFUSED

    def do_GET(self) -> None:
        if self.host_refused():
            return
        path = urlsplit(self.path).path
        if path == "/favicon.ico":  # no icon: an empty answer rather than a 404 in the console
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path in FILES:
            name, kind = FILES[path]
            body = (ASSETS / name).read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        refused = self._token_refused()
        if refused is not None:
            self.refuse(403, refused)
            return
        self._api("GET", path, {})

    def do_POST(self) -> None:
        if self.host_refused():
            return
        raw = self.read_body(self._token_refused)
        if raw is None:
            return
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, RecursionError):
            self.send_json(400, {"error": "the body is not JSON (UTF-8)"})
            return
        if not isinstance(body, dict):
            self.send_json(400, {"error": "the body must be a JSON object"})
            return
        self._api("POST", urlsplit(self.path).path, body)

    def _api(self, method: str, path: str, body: dict[str, Any]) -> None:
        route = ROUTES.get((method, path))
        if route is None:
            known = any(p == path for _, p in ROUTES)
            self.send_json(405 if known else 404, {"error": "wrong method for this address" if known else
                                                   "no such address"})
            return
        try:
            value, cookie = route(self, body)
        except VoteError as err:
            self.send_json(err.status, {"error": str(err), **({"busy": True} if isinstance(err, Busy) else {})})
            return
        headers = [] if cookie is None else [(
            "Set-Cookie", f"{self.cookie_name}={cookie}; Path=/; Max-Age={COOKIE_DAYS * 86400}; HttpOnly; "
                          "SameSite=Strict")]
        self.send_json(200, value, headers)

    def whoami(self) -> dict[str, Any]:
        """Return who this browser votes as ({"voter": null} when nobody yet: a page's first question, not an error)."""
        try:
            return self.app.whoami(self.voter().name)
        except NotStarted:
            return {"voter": None}

    def summary(self) -> dict[str, Any]:
        organiser = same_secret(self.headers.get("X-Arena-Organiser"), self.app.organiser)
        return self.app.summary(None if organiser else self.voter())


ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "/api/session"): lambda h, b: (h.whoami(), None),
    ("POST", "/api/session"): lambda h, b: h.app.start(b, h.cookie()),
    ("GET", "/api/next"): lambda h, b: (h.app.next(h.voter()), None),
    ("POST", "/api/vote"): lambda h, b: (h.app.vote(h.voter(), b), None),
    ("POST", "/api/undo"): lambda h, b: (h.app.undo(h.voter(), b), None),
    ("POST", "/api/end"): lambda h, b: (h.app.end(h.voter()), None),
    ("GET", "/api/summary"): lambda h, b: (h.summary(), None),
}


class VoteServer(ThreadedServer):
    """The vote page of ``workspace`` served over HTTP; ``url`` once made, ``start`` (a thread) or ``serve_forever``.

    ``url`` is the voters' address (with the token, if any), ``organiser_url`` the organiser's (the voters'
    figures), ``invitations`` each invited voter's link.
    """

    def __init__(self, workspace: str | Path, settings: VoteSettings | None = None):
        self.settings = settings or VoteSettings()
        host = self.settings.host
        self.token = server_token(host, self.settings.token)
        if not Store.exists(workspace):
            raise ArenaError(f"{workspace} is not a workspace (no {Store.FILE}): give the directory a run wrote to")
        if self.settings.item_ttl_s <= 0 or self.settings.reveal_every < 0:
            raise ArenaError("--item-minutes must be above 0 and --reveal-every 0 or more")
        organiser = self.settings.organiser or new_token()
        self.app = VoteApp(workspace, self.settings, organiser)
        self.note = self._save_rule()
        guard = Guard.bound_to(host, self.settings.allow_hosts, max_body=MAX_BODY, timeout_s=self.settings.timeout_s,
                               max_handlers=self.settings.max_handlers)
        handler: type[_Handler] = type("Handler", (_Handler,), {"app": self.app, "token": self.token, "guard": guard})
        self.httpd = listen(host, self.settings.port, handler, guard)
        self.port = self.httpd.server_port
        handler.cookie_name = f"arena_voter_{self.port}"  # cookies are per host, not per port: one per server
        base = f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"
        secret = {"token": self.token} if self.token else {}
        self.url = base + (f"#{urlencode(secret)}" if secret else "")
        self.organiser_url = base + "#" + urlencode({**secret, "organiser": organiser})
        self.invitations = {name: base + "#" + urlencode({**secret, "invite": code})
                            for name, code in self.app.invitations.items()}

    def _save_rule(self) -> str | None:
        """Save the voter rule given (the board and audit apply it) and make the votes tables; a note when busy."""
        rule = self.settings.rule
        try:
            with Store(self.app.root, create=False) as store:
                if rule is not None:
                    store.set_meta(RULE_META, rule.__dict__)
        except WorkspaceLocked as err:
            return f"{err}; votes wait for it and are stored when it ends" + (
                " (the voter rule given is applied on this page only)" if rule is not None else "")
        return None
