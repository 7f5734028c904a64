"""Where a layout search's simulations run: in this process, a pool of worker processes (``--jobs``), or a Ray
cluster (``--ray ADDRESS``); and what one task does (:func:`simulate_layout`; tasks travel in bundles,
:func:`simulate_bundle`, so that a layout's rank orders run in one process and share their stage scripts).

Bounds a shared machine needs (issue 28):

- ``--jobs`` is at most the CPUs this process may use (:func:`worker_count`: more workers than CPUs only queue for
  them, and ``--jobs 100000`` once forked 3,500 processes); a larger value is capped with one line;
- pool workers die with the search: each watches its parent (:func:`_watch_parent`) and exits when it is gone, so a
  SIGKILLed search leaves no worker behind (a process pool's workers otherwise wait on their queue forever);
- ``--ray ADDRESS`` is tried for :data:`RAY_CONNECT_S` seconds (a plain TCP connection to the head first, then
  ``ray.init``), not for minutes.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from utils.errors import ConfigError, UserError

RAY_CONNECT_S = 10.0
"""Seconds to reach a Ray cluster before ``--ray`` gives up with one line."""

WATCH_PARENT_S = 0.25
"""How often a pool worker checks that the search that started it is still there (seconds)."""


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else every core)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(jobs: int | None, say: Callable[[str], None]) -> int:
    """``--jobs`` bounded by the CPUs (default: every CPU); says so in one line when it caps."""
    cpus = cpu_count()
    if jobs is None:
        return cpus
    if jobs > cpus:
        say(f"note: --jobs {jobs} is more than the {cpus} CPUs this process may use: running {cpus} workers")
        return cpus
    return jobs


# ---- one task ---------------------------------------------------------------------------------------

_SESSIONS: dict[str, Any] = {}
"""One :class:`simulator.topo.session.TopoSession` per topology and process: the topology is read once, and its fabric,
routes, group shapes, NCCL costs and operation prices serve every layout after the first."""


def session_for(topology: str) -> Any:
    from simulator.topo.session import TopoSession

    session = _SESSIONS.get(topology)
    if session is None:
        session = _SESSIONS[topology] = TopoSession(topology)
    return session


_SCRIPTS: OrderedDict[tuple, tuple] = OrderedDict()
"""The stage scripts of the layouts simulated last, keyed by everything but the rank order: the two orders of a
layout generate the same programs (the generators number pipeline peers by stage, not by rank), so the second
reuses the first's (:func:`simulate_job`)."""

SCRIPTS_KEPT = 16
"""Layouts whose scripts a process keeps (the most recent; a 405B layout's are a few MB)."""


def simulate_layout(base: dict[str, Any], layout: Any, topology: str, bound_s: float,
                    point: dict[str, Any] | None = None) -> dict[str, Any]:
    """One CSV row: ``layout`` of the job ``base`` simulated with ``--model topo`` on ``topology`` (the process's
    session for it); ``point``: the sweep point's columns (GPU type, topology name) and job flags."""
    from simulator.search.files import result_row
    from simulator.search.space import build_job

    given = dict(base)
    if point:
        given.update(point.get("flags", {}))
    job = build_job(given, layout)
    key = (topology, repr(sorted(given.items())), layout.key()[:9] + layout.key()[10:])  # all but the order (index 9)
    result = simulate_job(session_for(topology), job, key)
    return result_row(layout, job, result, bound_s, point)


def simulate_bundle(bundle: tuple[tuple, ...]) -> list[Any]:
    """The rows of a bundle of tasks (:func:`simulate_layout`'s arguments), one process after the other so that the
    rank orders of a layout, bundled together, share their stage scripts; a task the user's flags make impossible
    gives its :class:`UserError` in its place."""
    out: list[Any] = []
    for task in bundle:
        try:
            out.append(simulate_layout(*task))
        except UserError as exc:
            out.append(exc)
    return out


def simulate_job(session: Any, job: Any, key: tuple | None = None) -> Any:
    """``session.simulate(job, TopoOptions())`` (:func:`simulator.topo.model.run_topo`), reusing the stage scripts of
    a job simulated before under the same ``key`` (``tests/test_search_speed.py`` holds the two equal).  Building
    the scripts is most of a simulation of an interleaved schedule (70% for Llama 3 70B, pp 4, 10 chunks)."""
    from dataclasses import replace

    from simulator.options import TopoOptions
    from simulator.topo.model import NoPeriod, TopoModel, build_fabric, load_scripts

    options = TopoOptions()
    if key is None:
        return session.simulate(job, options)
    caches = getattr(session, "_caches", {})
    hit = _SCRIPTS.get(key)
    if hit is None:
        scripts, full, gpus, path, _ = load_scripts(job, options, caches.get("prices"))
        hit = _SCRIPTS[key] = (scripts, gpus, path)
        while len(_SCRIPTS) > SCRIPTS_KEPT:
            _SCRIPTS.popitem(last=False)
    else:
        _SCRIPTS.move_to_end(key)
        full = job
    scripts, gpus, path = hit
    # the scripts with this layout's rank order (which places the groups and the pipeline's neighbours); the engine
    # and the model read them and never change them
    scripts = replace(scripts, layout={**scripts.layout, "order": job.parallel.order}, warnings=list(scripts.warnings))
    fabric, links, notes = build_fabric(session.topology, options, gpus, caches.get("fabrics"))
    try:
        return TopoModel(scripts, fabric, links, options, path, None, notes, full, caches.get("costs")).run()
    except NoPeriod:  # the shortened schedule never settled into a repeating cycle: as run_topo, the whole one
        return session.simulate(job, options)


# ---- pools ------------------------------------------------------------------------------------------

def _watch_parent(parent: int) -> None:
    """A pool worker's initializer: a daemon thread that ends the worker once its parent is gone (the parent's pid
    is no longer this process's parent: it died and the worker was re-parented)."""
    def watch() -> None:
        while True:
            time.sleep(WATCH_PARENT_S)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def in_flight(tasks: Iterable[tuple], pending_limit: int, submit: Callable[[tuple], Any],
              wait_done: Callable[[list], Iterable]) -> Iterator[tuple[tuple, Any]]:
    """Submit ``tasks`` (consumed lazily) with at most ``pending_limit`` in flight and yield ``(task, handle)`` for
    each one ``wait_done`` (given the handles in flight) reports finished.  ``submit`` turns a task into a handle: a
    future of a process pool, or a Ray object reference."""
    running: dict[Any, tuple] = {}
    iterator = iter(tasks)
    exhausted = False
    while running or not exhausted:
        while not exhausted and len(running) < pending_limit:
            task = next(iterator, None)
            if task is None:
                exhausted = True
                break
            running[submit(task)] = task
        if not running:
            break
        for handle in wait_done(list(running)):
            yield running.pop(handle), handle


class LocalPool:
    """This process (``jobs == 1``) or worker processes on this machine that die with it."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.pool = None
        if jobs > 1:
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(max_workers=jobs, initializer=_watch_parent, initargs=(os.getpid(),))

    def run(self, bundles: Iterable[tuple], pending_limit: int) -> Iterable[tuple[tuple, Any]]:
        """Yield ``(bundle, [row or exception per task])`` as bundles of tasks finish, keeping at most
        ``pending_limit`` in flight; ``bundles`` is consumed lazily, so that pruning sees the results found so far."""
        if self.pool is None:
            for bundle in bundles:
                yield bundle, simulate_bundle(bundle)
            return
        from concurrent.futures import FIRST_COMPLETED, wait

        pool = self.pool
        for bundle, future in in_flight(bundles, pending_limit, lambda bundle: pool.submit(simulate_bundle, bundle),
                                        lambda futures: wait(futures, return_when=FIRST_COMPLETED)[0]):
            try:
                yield bundle, future.result()
            except UserError as exc:
                yield bundle, [exc] * len(bundle)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


def _ray_address(address: str) -> tuple[str, int] | None:
    """(host, port) to try first for a ``--ray`` address (``ray://host:port``, ``host:port``); None for ``auto``,
    ``local`` or a form without a port (Ray resolves those itself)."""
    text = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


class RayPool:
    """Tasks on an existing Ray cluster (``--ray ADDRESS``); the topology files must be readable by its workers at
    the same paths."""

    def __init__(self, address: str, timeout_s: float = RAY_CONNECT_S) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--ray needs Ray: pip install '.[ray]'") from None
        target = _ray_address(address)
        if target is not None:
            import socket

            try:
                socket.create_connection(target, timeout=timeout_s).close()
            except OSError as exc:
                raise ConfigError(f"--ray {address}: cannot reach the Ray cluster in {timeout_s:g} s "
                                  f"({exc.strerror or exc})") from None
        errors: list[str] = []

        def connect() -> None:
            try:
                ray.init(address=address, ignore_reinit_error=True, logging_level="ERROR", log_to_driver=False)
            except Exception as exc:  # noqa: BLE001 - any failure to connect is the user's address
                errors.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

        thread = threading.Thread(target=connect, daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive() or errors:
            why = errors[0] if errors else f"no answer in {timeout_s:g} s"
            raise ConfigError(f"--ray {address}: cannot reach the Ray cluster ({why})")
        self.ray = ray
        self.remote = ray.remote(simulate_bundle)
        self.jobs = max(int(ray.cluster_resources().get("CPU", 1)), 1)

    def run(self, bundles: Iterable[tuple], pending_limit: int) -> Iterable[tuple[tuple, Any]]:
        ray = self.ray
        for bundle, ref in in_flight(bundles, pending_limit, lambda bundle: self.remote.remote(bundle),
                                     lambda refs: ray.wait(refs, num_returns=1)[0]):
            try:
                yield bundle, ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a remote failure arrives wrapped
                yield bundle, [exc] * len(bundle)

    def close(self) -> None:
        self.ray.shutdown()
