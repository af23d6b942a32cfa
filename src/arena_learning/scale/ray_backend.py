"""The Ray backend: engines run in actors on a Ray cluster; the ledger stays in the driver.

``arena run CONFIG --ray ADDRESS`` (or ``scale: {backend: ray}``) runs every model call of
the run in *engine actors*: one pool of actors per model (``replicas`` actors, each with the
CPUs and GPUs its model needs), each actor loading its model once and serving every spec
that names the same weights (three prompt formats of one GGUF share one load, as in-process).

What stays the same as a local run, and why:

- **The ledger decides what is sent.** Ray only replaces the engine: the stages still call
  :func:`engines.calls.arun_requests`, which looks every request up in the driver's store,
  sends the ones without a success, and writes each result in the driver as its batch comes
  back. The ledger key is the one the local engine would use (same kind, model identity and
  params), so a run can move between local and Ray and reuse every finished call.
- **Batches.** Requests go to an actor in tasks of ``batch_size``; the actor runs a batch
  with its engine's own concurrency (an endpoint's in-flight limit, llama.cpp one at a time,
  transformers and vLLM in batches) and returns the batch's results together.
- **A dead actor loses nothing.** Actors restart (``max_restarts``) and Ray retries the batch
  that was running on the restarted actor; results reach the ledger only when a batch returns,
  so a batch cut off by the kill is asked again, never recorded twice. A model's replicas are
  spread over the nodes (``SPREAD``): a node that dies takes its actors with it, and they restart
  on the nodes left, where their batches run again. A batch that cannot
  finish (restarts exhausted, cluster gone) becomes failed calls, recorded as errors in the
  ledger and retried by the next run.

Ray is an optional dependency (``pip install 'arena-learning[ray]'``), imported only here.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..config import ModelSpec, ScaleConfig, ScaleResources
from ..engines import engine_class, placed
from ..engines.base import CallFailed, Completion, Engine, Request, RequestTooLarge
from ..errors import ArenaError, EngineError

NICENESS = "RAY_worker_niceness"  # the raylet's setting for its workers' niceness (Ray's default: 15)
SEND_DELAY_S = 0.005
"""How long a partial batch waits for more requests before it is sent."""


def import_ray() -> Any:
    """Return the ``ray`` module, or say how to install it."""
    try:
        import ray
    except ImportError as err:
        raise EngineError("scale.backend 'ray' (or --ray) needs Ray, an optional extra: "
                          "pip install 'arena-learning[ray]' (or pip install ray)") from err
    return ray


class EngineHost:
    """The body of an engine actor: the engines of the specs sent to it, built on first use."""

    def __init__(self, secrets: dict[str, str], threads: int = 1):
        # API keys named by api_key_env, from the driver's environment when the worker lacks them:
        # they live in this process's environment only, never in a task's arguments or results.
        for name, value in secrets.items():
            os.environ.setdefault(name, value)
        self.engines: dict[str, Engine] = {}
        # A local model runs on as many threads as the CPUs Ray reserved for this actor, not on every core of its
        # node: actors sharing a node would otherwise run several times more threads than it has cores, and
        # llama.cpp's threads wait for each other spinning. A spec's own n_threads wins.
        self.threads = threads

    def _engine(self, spec_json: str) -> Engine:
        if spec_json not in self.engines:
            spec = ModelSpec.model_validate_json(spec_json)
            if spec.n_threads is None:
                spec = spec.model_copy(update={"n_threads": self.threads})
            self.engines[spec_json] = engine_class(spec)(spec)
        return self.engines[spec_json]

    def threads_of(self, spec_json: str) -> int | None:
        """The thread count the spec's engine runs with in this actor."""
        return self._engine(spec_json).spec.n_threads

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def model_id(self, spec_json: str) -> str:
        """Build the spec's engine (loading its model) and return its ledger identity."""
        return self._engine(spec_json).model_id

    async def complete_batch(self, spec_json: str, requests: list[dict[str, Any]]) -> list[tuple[str, Any]]:
        """Return ("ok", completion) / ("too_large", message) / ("error", message) per request, in order."""
        engine = self._engine(spec_json)

        async def one(raw: dict[str, Any]) -> tuple[str, Any]:
            try:
                comp = await engine.complete(Request.model_validate(raw))
            except RequestTooLarge as err:
                return "too_large", str(err)
            except CallFailed as err:
                return "error", str(err)
            return "ok", comp.model_dump()

        return list(await asyncio.gather(*(one(r) for r in requests)))


def _cause(err: BaseException) -> BaseException:
    """Return the exception raised inside a Ray task (``err`` itself when it is not a task error)."""
    return getattr(err, "cause", None) or err


class ActorPool:
    """The engine actors of one model's weights and resources; batches go to the least busy one.

    Actors start on first use (``ensure``); an idle pool may be stopped to make room for another
    (a flywheel makes a new model every round) and starts again, reloading its model, when used.
    """

    def __init__(self, backend: RayBackend, resources: ScaleResources, secrets: dict[str, str], label: str):
        self.backend = backend
        self.ray = backend.ray
        self.resources = resources
        self.secrets = secrets
        self.label = label
        max_restarts = backend.scale.max_restarts
        self.remote = self.ray.remote(EngineHost).options(
            num_cpus=resources.num_cpus, num_gpus=resources.num_gpus, max_restarts=max_restarts,
            # A batch on an actor that died is run again on the restarted actor.
            max_task_retries=-1 if max_restarts != 0 else 0, max_concurrency=1000,
            # replicas on as many nodes as can take them: a node that dies takes one replica, not the pool; its
            # actor restarts on a node left (on one node, the same placement as Ray's default)
            scheduling_strategy="SPREAD",
        )
        self.actors: list[Any] = []
        self.load: list[int] = []

    def ensure(self) -> None:
        """Start the actors if they are not running (making room on the cluster first)."""
        if not self.actors:
            self.backend.make_room(self)
            threads = max(1, int(self.resources.num_cpus))  # what Ray reserved for each actor (at least one)
            self.actors = [self.remote.remote(self.secrets, threads) for _ in range(self.resources.replicas)]
            self.load = [0] * len(self.actors)

    @property
    def idle(self) -> bool:
        return not any(self.load)

    def pick(self) -> int:
        return min(range(len(self.actors)), key=self.load.__getitem__)

    def model_id(self, spec_json: str) -> str:
        """Load the model in every actor (errors surface now, not mid-run) and return its identity."""
        self.ensure()
        try:
            ids = self.ray.get([a.model_id.remote(spec_json) for a in self.actors])
        except Exception as err:  # any: Ray wraps what the actor raised
            cause = _cause(err)
            if isinstance(cause, ArenaError):
                raise type(cause)(str(cause)) from None
            raise EngineError(f"{self.label}: the engine actor could not load the model: {cause}") from None
        if len(set(ids)) > 1:
            raise EngineError(f"{self.label}: the engine actors see different weights ({', '.join(sorted(set(ids)))}); "
                              f"every node must hold the same model file")
        return ids[0]

    def pids(self) -> list[int]:
        return self.ray.get([a.pid.remote() for a in self.actors])

    def nodes(self) -> list[str]:
        """The Ray node of each actor (waits for a restarting one)."""
        return self.ray.get([a.node_id.remote() for a in self.actors])

    def shutdown(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors, self.load = [], []


class RayEngine(Engine):
    """A spec's engine run by an :class:`ActorPool`; keyed in the ledger as the local engine would be."""

    def __init__(self, spec: ModelSpec, pool: ActorPool, batch_size: int, remote_spec: ModelSpec | None = None):
        super().__init__(spec)
        cls = engine_class(spec)
        self.kind = cls.kind
        self.in_process = cls.in_process  # in its actor: the same answers as in this process
        # The local engine's key and defaults without loading its model here: those methods read only the spec.
        self.shadow = cls.__new__(cls)
        Engine.__init__(self.shadow, spec)
        self.pool = pool
        self.batch_size = batch_size
        self.spec_json = (remote_spec or spec).model_dump_json()  # what the actors build; keys use ``spec``
        self._model_id = pool.model_id(self.spec_json)
        self._pending: list[tuple[Request, asyncio.Future]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def concurrency(self) -> int:
        return self.batch_size * len(self.pool.actors)

    def default_params(self) -> dict[str, Any]:
        return self.shadow.default_params()

    def key_params(self, request: Request) -> dict[str, Any]:
        return self.shadow.key_params(request)

    async def complete(self, request: Request) -> Completion:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        self._pending.append((request, fut))
        if len(self._pending) >= self.batch_size:
            self._send()
        elif self._timer is None:
            self._timer = loop.call_later(SEND_DELAY_S, self._send)
        return await fut

    def _send(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._pending:
            batch, self._pending = self._pending[: self.batch_size], self._pending[self.batch_size:]
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[Request, asyncio.Future]]) -> None:
        self.pool.ensure()
        i = self.pool.pick()
        self.pool.load[i] += len(batch)
        try:
            ref = self.pool.actors[i].complete_batch.remote(self.spec_json, [r.model_dump() for r, _ in batch])
            results = await ref
        except Exception as err:  # any: the actor is gone for good, or the cluster: fail the calls
            failure = CallFailed(f"ray: the batch's engine actor failed ({type(_cause(err)).__name__}: "
                                 f"{str(_cause(err)).splitlines()[0][:200] if str(_cause(err)) else ''})")
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(failure)
            return
        finally:
            self.pool.load[i] -= len(batch)
        for (_, fut), (status, value) in zip(batch, results):
            if fut.done():
                continue
            if status == "ok":
                fut.set_result(Completion.model_validate(value))
            else:
                fut.set_exception((RequestTooLarge if status == "too_large" else CallFailed)(value))


def actor_spec(spec: ModelSpec, replicas: int) -> ModelSpec:
    """Return the spec each of ``replicas`` actors runs: an endpoint's rpm/tpm limits shared out among them.

    The limits are the provider's, per endpoint: N actors each holding the whole limit would send N
    times it. (``concurrency`` stays per actor: in-flight requests are what the actors add.)
    """
    if replicas == 1 or (spec.rpm is None and spec.tpm is None):
        return spec
    share = {k: max(1, getattr(spec, k) // replicas) for k in ("rpm", "tpm") if getattr(spec, k) is not None}
    return spec.model_copy(update=share)


@dataclass
class RayBackend:
    """Engine actor pools on a Ray cluster, one per (weights, resources), made when a stage first needs them."""

    scale: ScaleConfig
    ray: Any

    def __post_init__(self) -> None:
        self.pools: dict[tuple[Any, ...], ActorPool] = {}

    def resources(self, spec: ModelSpec) -> ScaleResources:
        return self.scale.models.get(spec.name, self.scale.defaults)

    def engine(self, spec: ModelSpec) -> Engine:
        if not spec.engine_kind.makes_calls:
            raise EngineError(f"model {spec.name!r} is {spec.engine}: it has no engine to run")
        if spec.batch.enabled:  # its calls go as batch jobs, sent from here: an actor would send them one by one
            return engine_class(spec)(spec)
        res = self.resources(spec)
        key = (spec.engine, spec.model, tuple(spec.base_urls), res.replicas, res.num_cpus, res.num_gpus)
        if key not in self.pools:
            secrets = {}
            if spec.api_key_env and os.environ.get(spec.api_key_env):
                secrets[spec.api_key_env] = os.environ[spec.api_key_env]
            self.pools[key] = ActorPool(self, res, secrets, f"model {spec.name!r}")
        return RayEngine(spec, self.pools[key], self.scale.batch_size, actor_spec(spec, res.replicas))

    def make_room(self, pool: ActorPool, wait_s: float = 30.0) -> None:
        """Stop idle pools (oldest first) until ``pool``'s actors fit on the cluster; say so if they never can."""
        res = pool.resources
        need = {"CPU": res.num_cpus * res.replicas, "GPU": res.num_gpus * res.replicas}
        total = self.ray.cluster_resources()
        short = {k: v for k, v in need.items() if v > total.get(k, 0) + 1e-9}
        if short:
            have = ", ".join(f"{total.get(k, 0):g} {k}" for k in short)
            needs = ", ".join(f"{v:g} {k}" for k, v in short.items())
            raise EngineError(f"{pool.label}: its engine actors need {needs} "
                              f"({res.replicas} replicas), the Ray cluster has {have}: lower scale.models/defaults "
                              f"(replicas, num_cpus, num_gpus) or add nodes")

        def fits() -> bool:
            free = self.ray.available_resources()
            return all(free.get(k, 0) + 1e-9 >= v for k, v in need.items() if v > 0)

        for other in list(self.pools.values()):
            if fits():
                return
            if other is not pool and other.actors and other.idle:
                other.shutdown()
                deadline = time.monotonic() + wait_s  # a killed actor's resources come back shortly
                while not fits() and time.monotonic() < deadline:
                    time.sleep(0.1)

    def shutdown(self) -> None:
        for pool in self.pools.values():
            pool.shutdown()
        self.pools.clear()


def connect(scale: ScaleConfig) -> tuple[Any, bool]:
    """Return (ray, whether this call started it): the configured cluster, or a Ray instance on this machine."""
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    cluster_messages_to_stderr()
    try:
        with workers_not_niced():
            ray.init(address=scale.address, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                     configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = scale.address or "a new local instance"
        raise EngineError(f"could not connect to Ray at {where}: {err} (check `ray status` on the head node, "
                          f"or give --ray local to start Ray on this machine)") from None
    return ray, True


def cluster_messages_to_stderr() -> None:
    """Send what the Ray cluster reports to the driver (a task retried, a worker killed) to stderr, not stdout.

    Ray's driver prints its cluster's error channel to ``sys.stdout`` even with ``log_to_driver=False``
    (``ray._private.worker.listen_error_messages`` calls ``print_to_stdstream`` with ``is_err: False``), where
    ``arena ... --json`` writes its result: one retried task made the result unreadable. The listener thread
    looks the printer up in its module on each message, so it is replaced there, once, before ``ray.init``.
    """
    from ray._private import worker

    printer = worker.print_to_stdstream
    if getattr(printer, "arena_to_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        printer({**data, "is_err": True}, ignore_prefix)

    to_stderr.arena_to_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


@contextmanager
def workers_not_niced() -> Iterator[None]:
    """Within the block, a Ray instance started here runs its workers at niceness 0, not Ray's default 15.

    The engine actors are the run's main job: niced, they crawl beside any other process on the machine (the Ray
    tests took 4 min beside another test process). The raylet reads the setting from its environment when it
    starts; a cluster already running keeps its own, and a user's own RAY_worker_niceness wins.
    """
    before = os.environ.get(NICENESS)
    os.environ.setdefault(NICENESS, "0")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(NICENESS, None)


@contextmanager
def ray_backend(scale: ScaleConfig) -> Iterator[RayBackend]:
    """Within the block, every engine the stages build runs in Ray engine actors."""
    ray, started = connect(scale)
    backend = RayBackend(scale, ray)
    try:
        with placed(backend.engine):
            yield backend
    finally:
        backend.shutdown()
        if started:
            ray.shutdown()
