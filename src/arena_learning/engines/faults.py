"""Fault injection for the reliability tests and benchmark: a middleware installed on ``arena serve``'s app.

At the configured rates, each completion request (a POST under ``/v1/``) gets a 429 with Retry-After,
a 500/502/503, a reset connection, a timeout (the reply comes after ``timeout_s``), a truncated or
invalid JSON body, empty ``choices``, ``content: null``, or a slow reply; the rest are served as they
are. The draws are seeded. ``/health`` counts each fault injected (``faults``) beside the server's own
counters, and a reply mangled here is not counted as served whole (``ok``).

It is a test feature, kept out of the server (``engines.server.make_app``): the tests and
``benchmarks/reliability.py`` install it with ``install_faults``, and ``arena serve --faults SPEC``
does for a person trying a client against a flaky endpoint.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Middleware

from .server import STATS, Handler, error_reply

FAULT_KINDS = ("429", "500", "502", "503", "reset", "timeout", "truncated", "invalid_json", "empty_choices",
               "null_content", "slow")


@dataclass
class FaultSpec:
    """Rates (0..1, summing to at most 1) of each fault kind, and how faults behave.

    Written ``429=0.05,500=0.05,reset=0.03,...;seed=0;retry_after=0.1;slow_s=0.5;timeout_s=5``:
    ``all=0.3`` spreads 30% evenly over every kind.
    """

    rates: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    retry_after: float = 0.1
    slow_s: float = 0.5
    timeout_s: float = 5.0

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        from ..errors import ArenaError

        spec = cls()
        for part in (p.strip() for chunk in text.split(";") for p in chunk.split(",")):
            if not part:
                continue
            key, sep, value = part.partition("=")
            key = key.strip()
            try:
                number = float(value)
            except ValueError:
                raise ArenaError(f"--faults: {part!r} is not KIND=NUMBER (kinds: all, {', '.join(FAULT_KINDS)}; "
                                 "settings: seed, retry_after, slow_s, timeout_s)") from None
            if not sep:
                raise ArenaError(f"--faults: {part!r} is not KIND=NUMBER")
            if key == "all":
                spec.rates.update({k: number / len(FAULT_KINDS) for k in FAULT_KINDS})
            elif key in FAULT_KINDS:
                spec.rates[key] = number
            elif key in ("seed", "retry_after", "slow_s", "timeout_s"):
                setattr(spec, key, int(number) if key == "seed" else number)
            else:
                raise ArenaError(f"--faults: unknown fault {key!r}; kinds: all, {', '.join(FAULT_KINDS)}")
        if any(r < 0 for r in spec.rates.values()) or sum(spec.rates.values()) > 1 + 1e-9:
            raise ArenaError(f"--faults: rates must be >= 0 and sum to at most 1 (got {sum(spec.rates.values()):.3f})")
        return spec

    def draw(self, rng: random.Random) -> str | None:
        u, acc = rng.random(), 0.0
        for kind in FAULT_KINDS:
            acc += self.rates.get(kind, 0.0)
            if u < acc:
                return kind
        return None


def fault_middleware(faults: FaultSpec) -> Middleware:
    """Return the middleware that injects ``faults`` into the completion requests of the app it is installed on."""
    rng = random.Random(faults.seed)

    @web.middleware
    async def inject(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "POST" or not request.path.startswith("/v1/"):
            return await handler(request)
        kind = faults.draw(rng)
        if kind is None:
            return await handler(request)
        stats = request.app[STATS]
        stats["faults"][kind] = stats["faults"].get(kind, 0) + 1
        if kind == "429":
            return web.json_response({"error": {"message": "rate limited (injected)", "code": 429}}, status=429,
                                     headers={"Retry-After": f"{faults.retry_after:g}"})
        if kind in ("500", "502", "503"):
            return error_reply(int(kind), f"injected {kind}", "server_error")
        if kind == "reset":
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)  # never reaches the client: its connection is gone
        if kind in ("timeout", "slow"):
            await asyncio.sleep(faults.timeout_s if kind == "timeout" else faults.slow_s)
            return await handler(request)
        resp = await handler(request)
        if not isinstance(resp, web.Response) or resp.status != 200 or resp.body is None:
            return resp
        stats["ok"] -= 1  # what the handler counted as served whole is mangled below
        # web.json_response's body is bytes; any other kind of body (a Payload) is passed on unmangled
        if not isinstance(resp.body, (bytes, bytearray)):
            return resp
        body = bytes(resp.body)
        if kind == "truncated":
            return web.Response(body=body[: len(body) // 2], content_type="application/json")
        if kind == "invalid_json":
            return web.Response(body=b"{not json" + body[:20], content_type="application/json")
        data = json.loads(body)
        if kind == "empty_choices":
            data["choices"] = []
        else:  # null_content
            for choice in data.get("choices", []):
                if "message" in choice:
                    choice["message"]["content"] = None
                else:
                    choice["text"] = None
        return web.json_response(data)

    return inject


def install_faults(app: web.Application, faults: FaultSpec) -> web.Application:
    """Add the fault middleware to ``app`` (made by ``make_app``, not started yet), inside its API-key check;
    return ``app``."""
    app.middlewares.append(fault_middleware(faults))
    return app
