"""The one reader of the profiling database: "what does this collective / this kernel take", answered
from measurements where the profile has them and from the models where it does not, saying which.

    profile = Profile.load("profiles", network_device="h100_dgx", compute_sku="h100", gpu="H100")
    profile.collective_time("all_reduce", 64 << 20, ranks=8, ranks_per_node=8)   # -> Answer(seconds, source, detail)
    profile.kernel_time(item)                                                    # a computation WorkItem
    TopoOptions(profile=profile, compute_time_ns=profile.compute_time_ns)        # what --profile wires

The simulator asks this module, never the files (:mod:`simulator.profiles.db` reads and checks them).

Collectives (``--network_device``): for a group of ``ranks`` with ``ranks_per_node`` on each node,

1. a measured series of that shape: the measured time at a measured size (``measured``); between two
   measured sizes, linear in size (``interpolated``: the alpha-beta line through the two points, so
   times stay between their neighbours); above the largest measured size, its time plus what the extra
   bytes cost in the calibrated topo model; below the smallest, its time scaled by that model's ratio
   (``extrapolated``);
2. otherwise measured series of the same node count or the same ranks per node on both sides of
   ``ranks``: their bus bandwidths at that size, linear in log2(ranks), turned back into a time with
   nccl-tests' factor (``interpolated in group size``);
3. otherwise the topo model's formulas (NCCL's ring/tree/LL/LL128/Simple model,
   :mod:`simulator.topo.collectives`) with the bandwidths and latency scale fitted to the whole profile
   (:mod:`simulator.profiles.fit`), on the simulated fabric's placement and congestion (``model``); a term
   the profile did not measure (the NIC of a one-node profile) keeps the fabric's nominal rate and
   efficiency (``model, NIC not measured``).

Computations (``--compute_sku``): GEMMs by ``(m, n, k, batch)`` in the job's dtype, attention cores
by ``(phase, implementation, batch, heads, kv heads, seq, head dims, dropout)``, memory-bound
operations by ``(op, phase, operand shapes, variant)``: measured (exact key); interpolated (GEMMs
linear in m, attention linear in seq^2, memory-bound operations linear in elements, between two
measured points of an otherwise equal key); scaled (the nearest measured shape times the compute
model's ratio for the GPU type: its shape law); else the compute model.  A GEMM item's other kernels
(bias add, FP8 casts, the router's softmax) and the optimizer step's other kernels than Adam (zeroing
the gradients, their norm, the copies) come from the compute model.

Every answer is recorded, and :meth:`Profile.sources_text` says what came from where.
"""

from __future__ import annotations

import math
import os
from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from simulator.profiles import db as profile_db
from simulator.profiles.flags import PROFILE_FLAGS, add_flags  # noqa: F401 (re-exported)
from simulator.topo.collectives import Cost, GroupShape, LinkModel, busbw_factor, collective_cost, p2p_cost
from utils.errors import ConfigError

if TYPE_CHECKING:
    from simulator.profiles.fit import Calibration

MEASURED, INTERPOLATED, GROUP_INTERPOLATED, EXTRAPOLATED, SCALED, MODEL, UNPRICED = (
    "measured", "interpolated", "interpolated in group size", "extrapolated", "scaled", "model", "unpriced")
FROM_MEASUREMENTS = (MEASURED, INTERPOLATED, GROUP_INTERPOLATED)
"""Sources whose value is the measurements' own (the others lean on a model)."""


@dataclass(frozen=True)
class Answer:
    """A time in seconds, where it came from (one of the module's sources) and how (a short phrase)."""

    time_s: float
    source: str
    detail: str = ""


def _dtype_kind(dtype: str) -> str:
    from mocked_model.compute import dtype_kind

    try:
        return dtype_kind(dtype)
    except ConfigError:
        return dtype.lower()


# ---- collectives ---------------------------------------------------------------------------------------

class NetworkProfile:
    """One network device's measured collectives."""

    def __init__(self, device: str, tables: dict[str, profile_db.NetworkTable], folder: str = "") -> None:
        self.device, self.tables, self.folder = device, tables, folder
        self.series = {kind: table.series() for kind, table in tables.items()}
        self._calibration: Calibration | None = None

    @property
    def calibration(self) -> Calibration:
        """The link model fitted to every measured point (computed on first use)."""
        if self._calibration is None:
            from simulator.profiles.fit import calibrate, points_of  # numpy: only when a model must fill a gap

            self._calibration = calibrate(points_of(self.tables))
        return self._calibration

    def _model(self, kind: str, size: float, shape: GroupShape, links: LinkModel | None) -> Cost:
        fitted, model_links = self.calibration.links(links, shape)
        if kind == "send_recv":
            same = shape.servers <= 1
            bottleneck = fitted.nvlink_Bps if same else fitted.nic_Bps
            latency = shape.nvlink_latency_s if same else shape.net_latency_s
            return p2p_cost(size, same, bottleneck, latency, model_links, shape.congestion)
        return collective_cost(kind, size, fitted, model_links)

    def _series_time(self, kind: str, key: tuple[int, int], size: float) -> Answer:
        sizes, times = self.series[kind][key]
        i = bisect_left(sizes, size)
        if i < len(sizes) and sizes[i] == size:
            return Answer(times[i] * 1e-6, MEASURED, f"{self.device} {kind} {key[0]} ranks, {key[1]} per node")
        if 0 < i < len(sizes):
            s0, s1, t0, t1 = sizes[i - 1], sizes[i], times[i - 1], times[i]
            t = t0 + (t1 - t0) * (size - s0) / (s1 - s0)
            return Answer(t * 1e-6, INTERPOLATED, f"between {s0} and {s1} bytes")
        from simulator.profiles.fit import fit_shape, model_time

        edge = 0 if i == 0 else len(sizes) - 1
        fitted = self.calibration.links(None, fit_shape(*key))
        at_edge, here = model_time(kind, sizes[edge], *fitted), model_time(kind, size, *fitted)
        if edge == 0:  # below the smallest size: the measured time shrunk by the model's ratio
            return Answer(times[0] * 1e-6 * here / at_edge, EXTRAPOLATED,
                          f"below the measured {sizes[0]} bytes, scaled by the calibrated model")
        # above the largest: the measured time plus what the extra bytes cost at the fitted bandwidth
        return Answer(times[edge] * 1e-6 + here - at_edge, EXTRAPOLATED,
                      f"above the measured {sizes[edge]} bytes, the rest at the calibrated model's cost")

    def _group_interpolated(self, kind: str, size: float, n: int, rpn: int, servers: int) -> Answer | None:
        table = self.series.get(kind, {})
        factor = busbw_factor(kind, n) if kind != "send_recv" else 1.0
        if factor <= 0:
            return None
        for same in ("servers", "ranks_per_node"):
            keys = [k for k in table if (k[0] // k[1] == servers if same == "servers" else k[1] == rpn)]
            lower = [k for k in keys if k[0] < n]
            upper = [k for k in keys if k[0] > n]
            if not lower or not upper:
                continue
            a, b = max(lower), min(upper)
            bws = []
            for key in (a, b):
                t = self._series_time(kind, key, size).time_s
                bws.append(size * busbw_factor(kind, key[0]) / t)
            w = (math.log2(n) - math.log2(a[0])) / (math.log2(b[0]) - math.log2(a[0]))
            bw = bws[0] + (bws[1] - bws[0]) * w
            how = "same node count" if same == "servers" else f"{rpn} per node"
            return Answer(size * factor / bw, GROUP_INTERPOLATED, f"busbw between {a[0]} and {b[0]} ranks ({how})")
        return None

    def answer(self, kind: str, size: float, n: int, rpn: int, shape: GroupShape | None = None,
               links: LinkModel | None = None) -> tuple[Answer, Cost | None]:
        """The time of ``kind`` over ``n`` ranks, ``rpn`` per node; the Cost when the model priced it."""
        servers = max(n // max(rpn, 1), 1)
        table = self.series.get(kind)
        if table is not None and (n, rpn) in table:
            return self._series_time(kind, (n, rpn), size), None
        if table is not None:
            found = self._group_interpolated(kind, size, n, rpn, servers)
            if found is not None:
                return found, None
        if shape is None:
            from simulator.profiles.fit import fit_shape

            shape = fit_shape(n, rpn)
        cost = self._model(kind, size, shape, links)
        cal = self.calibration
        missing = [name for name, value, needed in (("NVLink", cal.nvlink_gbps, True), ("NIC", cal.nic_gbps, servers > 1))
                   if needed and value is None]
        detail = (f"topo model, {'not measured: ' + ', '.join(missing) if missing else 'fitted to ' + self.device}"
                  f" ({n} ranks, {rpn} per node{', not in the profile' if table is not None else ''})")
        return Answer(cost.time_s, MODEL, detail), cost


# ---- computations --------------------------------------------------------------------------------------

class ComputeProfile:
    """One GPU type's measured operations, asked for computation items of a job in ``dtype`` on ``gpu``
    (a GPU type of the compute model, for its shape law and for what the profile lacks; None: neither)."""

    def __init__(self, rows: profile_db.ComputeRows, gpu: Any = None, dtype: str = "bfloat16") -> None:
        from mocked_model.compute import gpu_spec

        self.rows, self.sku = rows, rows.sku
        self.gpu = gpu_spec(gpu) if gpu is not None else None
        self.dtype, self.kind = dtype, _dtype_kind(dtype)
        self.exact: dict[tuple, float] = {}
        self.groups: dict[tuple, list[tuple[float, float, dict]]] = defaultdict(list)
        self.families: dict[tuple, list[dict]] = defaultdict(list)
        for row in rows.mlp:
            kind = _dtype_kind(row["dtype"])
            if row["op"] == "gemm":
                self.exact[("gemm", kind, row["m"], row["n"], row["k"], row["batch"])] = row["time_us"]
                self.groups[("gemm", kind, row["n"], row["k"], row["batch"])].append((row["m"], row["time_us"], row))
                self.families[("gemm", kind)].append(row)
            else:
                self.exact[(row["op"], row["phase"], kind, row["shapes"], row["variant"])] = row["time_us"]
                self.groups[(row["op"], row["phase"], kind, row["variant"])].append((row["elements"], row["time_us"], row))
                self.families[(row["op"], row["phase"], kind)].append(row)
        for row in rows.attention:
            kind = _dtype_kind(row["dtype"])
            fixed = (row["phase"], kind, row["impl"], row["batch"], row["heads"], row["kv_heads"], row["head_dim"],
                     row["v_dim"], row["dropout"] > 0)
            self.exact[("attention", *fixed, row["seq"])] = row["time_us"]
            self.groups[("attention", *fixed)].append((row["seq"] ** 2, row["time_us"], row))
            self.families[("attention", row["phase"], kind, row["impl"])].append(row)
        for points in self.groups.values():
            points.sort(key=lambda p: p[0])
        self.dtypes = sorted({_dtype_kind(r["dtype"]) for r in (*rows.mlp, *rows.attention)})

    # the compute model, for the shape law and what the profile lacks
    def _model_ns(self, item: Any) -> float | None:
        if self.gpu is None:
            return None
        from mocked_model.compute import estimate_ns

        return estimate_ns(item, self.gpu, self.dtype)

    def _extras_ns(self, item: Any, rest) -> float:
        """The compute model's ns of the kernels of ``item`` that its profile row does not time."""
        if self.gpu is None:
            return 0.0
        from mocked_model.compute import item_kernels

        return sum(kernel.ns(self.gpu) for kernel in rest(item_kernels(item, self.dtype) or []))

    def _interpolate(self, group: tuple, x: float) -> tuple[float, str] | None:
        points = self.groups.get(group)
        if not points or len(points) < 2:
            return None
        xs = [p[0] for p in points]
        i = bisect_left(xs, x)
        if 0 < i < len(xs):
            (x0, t0, _), (x1, t1, _) = points[i - 1], points[i]
            return t0 + (t1 - t0) * (x - x0) / (x1 - x0), "between two measured sizes"
        return None

    def _scaled(self, item: Any, family: tuple, distance, row_item) -> tuple[float, str] | None:
        rows = self.families.get(family)
        if not rows or self.gpu is None:
            return None
        row = min(rows, key=distance)
        target, anchor = self._model_ns(item), self._model_ns(row_item(row))
        if not target or not anchor:
            return None
        return row["time_us"] * target / anchor, f"from the measured {row['_where']} by the compute model's {self.gpu.name} law"

    def answer(self, item: Any) -> tuple[float | None, str, str, float]:
        """``(ns, source, detail, ns of it from the compute model)`` of one computation item."""
        found = profile_db.item_key(item, self.dtype)
        model = self._model_ns(item)
        if found is None:
            return model, (MODEL if model is not None else UNPRICED), "no profile key for this operation", model or 0.0
        name, key = found
        kind = self.kind
        extra_ns = 0.0
        if name == "mlp.csv" and key["op"] == "gemm":
            m, n, k, b = key["m"], key["n"], key["k"], key["batch"]
            exact = self.exact.get(("gemm", kind, m, n, k, b))
            group = ("gemm", kind, n, k, b)
            x = m

            def distance(r):
                return sum(abs(math.log(a / c)) for a, c in ((m, r["m"]), (n, r["n"]), (k, r["k"]), (b, r["batch"])))

            def row_item(r):
                return _gemm_item(item, r["m"], r["n"], r["k"], r["batch"])

            family = ("gemm", kind)
            extra_ns = self._extras_ns(item, lambda kernels: kernels[1:])
            gemm_only = _gemm_item(item, m, n, k, b)
            target_item = gemm_only
        elif name == "attention.csv":
            fixed = (key["phase"], kind, key["impl"], key["batch"], key["heads"], key["kv_heads"], key["head_dim"],
                     key["v_dim"], key["dropout"] > 0)
            exact = self.exact.get(("attention", *fixed, key["seq"]))
            group, x, family = ("attention", *fixed), key["seq"] ** 2, ("attention", key["phase"], kind, key["impl"])

            def distance(r):
                return sum(abs(math.log(key[c] / r[c])) for c in ("batch", "heads", "kv_heads", "seq", "head_dim", "v_dim"))

            def row_item(r):
                shapes = ((r["batch"], r["heads"], r["seq"], r["head_dim"]), (r["batch"], r["kv_heads"], r["seq"], r["head_dim"]))
                return SimpleNamespace(stage=item.stage, shapes=shapes, flops=None,
                                       meta=dict(item.meta or {}, v_dim=r["v_dim"], p=r["dropout"], impl=r["impl"]))

            target_item = item
        else:
            exact = self.exact.get((key["op"], key["phase"], kind, key["shapes"], key["variant"]))
            group, x = (key["op"], key["phase"], kind, key["variant"]), key["elements"]
            family = (key["op"], key["phase"], kind)

            def distance(r):
                return (r["variant"] != key["variant"], abs(math.log(x / r["elements"])))

            def row_item(r):
                return SimpleNamespace(stage=item.stage, shapes=profile_db.parse_shapes(r["shapes"]), meta=item.meta, flops=None)

            target_item = item
            if key["op"] == "optimizer":  # the profile times Adam; zeroing, norm and copies come from the model
                extra_ns = self._extras_ns(item, lambda kernels: [kr for kr in kernels if kr.name != "adam"])
        if exact is not None:
            return exact * 1e3 + extra_ns, MEASURED, f"{self.sku}", extra_ns
        found_i = self._interpolate(group, x)
        if found_i is not None:
            return found_i[0] * 1e3 + extra_ns, INTERPOLATED, found_i[1], extra_ns
        found_s = self._scaled(target_item, family, distance, row_item)
        if found_s is not None:
            return found_s[0] * 1e3 + extra_ns, SCALED, found_s[1], extra_ns
        if model is None:
            return None, UNPRICED, f"not in the profile ({self.sku}, {self.dtype}) and no --gpu_type for the compute model", 0.0
        why = f"not in the profile ({self.sku}, {', '.join(self.dtypes)})"
        return model, MODEL, f"{why}; compute model {self.gpu.name}", model


def _gemm_item(item: Any, m: int, n: int, k: int, batch: int) -> Any:
    """A plain GEMM item of ``batch`` x ``(m, k) x (k, n)`` (the compute model's view of a GEMM's kernel)."""
    meta = {key: value for key, value in (item.meta or {}).items() if key not in ("bias", "name")}
    meta["op"] = "gemm"
    shapes = ((m * batch, k), (batch, k, n)) if batch > 1 else ((m, k), (k, n))
    return SimpleNamespace(stage=item.stage, shapes=shapes, meta=meta, flops=None)


# ---- the reader ------------------------------------------------------------------------------------------

class Profile:
    """Measured collectives of one network device and measured kernels of one GPU type, with the
    models behind them.  Answers are recorded (:meth:`sources_text`)."""

    def __init__(self, root: str, network: NetworkProfile | None = None, compute: ComputeProfile | None = None) -> None:
        self.root, self.network, self.compute = root, network, compute
        self._collectives: dict[tuple, Answer] = {}
        self._items: dict[int, tuple[float | None, str, str, float]] = {}
        self._keep: list[Any] = []
        self.notes: list[str] = []
        """What else the profile set (SimAI's -nv and -nic), for :func:`annotate`."""

    @classmethod
    def load(cls, root: str | os.PathLike, network_device: str | None = None, compute_sku: str | None = None,
             gpu: Any = None, dtype: str = "bfloat16") -> Profile:
        root = os.fspath(root)
        if not os.path.isdir(root):
            raise ConfigError(f"--profile {root}: no such folder (a profiling database: python -m profiling)")
        network = compute = None
        if network_device is not None:
            network = NetworkProfile(network_device, profile_db.read_network(root, network_device),
                                     profile_db.network_dir(root, network_device))
        if compute_sku is not None:
            compute = ComputeProfile(profile_db.read_compute(root, compute_sku), gpu, dtype)
        return cls(root, network, compute)

    # -- the questions --
    def collective_time(self, kind: str, size: float, ranks: int, ranks_per_node: int) -> Answer:
        """Seconds of one ``kind`` (a CommType value or ``send_recv``) of ``size`` bytes (nccl-tests' size)."""
        if ranks <= 1 or size <= 0:
            return Answer(0.0, MEASURED, "nothing moves")
        if self.network is None:
            raise ConfigError("this profile was loaded without a network device (--network_device NAME)")
        return self._ask(kind, size, ranks, ranks_per_node, None, None)[0]

    def _ask(self, kind: str, size: float, n: int, rpn: int, shape: GroupShape | None,
             links: LinkModel | None) -> tuple[Answer, Cost | None]:
        assert self.network is not None
        answer, cost = self.network.answer(kind, size, n, rpn, shape, links)
        self._collectives[(kind, int(size), n, rpn, shape.servers if shape else n // rpn)] = answer
        return answer, cost

    def kernel_time(self, item: Any) -> Answer:
        """Seconds of one computation item (``time_s`` NaN when neither the profile nor a model prices it)."""
        ns, source, detail, _ = self._compute(item)
        return Answer(ns * 1e-9 if ns is not None else math.nan, source, detail)

    def _compute(self, item: Any) -> tuple[float | None, str, str, float]:
        hit = self._items.get(id(item))
        if hit is None:
            if self.compute is None:
                raise ConfigError("this profile was loaded without a GPU type (--compute_sku SKU)")
            hit = self._items[id(item)] = self.compute.answer(item)
            self._keep.append(item)  # ids stay unique while the item lives
        return hit

    # -- hooks of the topo model (simulator.topo.collectives' signatures) --
    def collective_cost(self, kind: str, size: float, shape: GroupShape, links: LinkModel) -> Cost:
        """:func:`simulator.topo.collectives.collective_cost`, answered from the profile first."""
        if shape.n <= 1 or size <= 0 or kind not in profile_db.NETWORK_FILES and kind != "reduce":
            return collective_cost(kind, size, shape, links)
        rpn = shape.per_server if shape.n == shape.per_server * shape.servers else max(shape.n // shape.servers, 1)
        answer, cost = self._ask(kind, size, shape.n, rpn, shape, links)
        if cost is not None:
            return Cost(cost.time_s, cost.algorithm, f"{cost.protocol}, model", cost.busbw_Bps)
        return Cost(answer.time_s, "profile", answer.source, size / answer.time_s * busbw_factor(kind, shape.n))

    def p2p_cost(self, size: float, same_server: bool, bottleneck_Bps: float, path_latency_s: float, links: LinkModel,
                 congestion: float = 1.0) -> Cost:
        """:func:`simulator.topo.collectives.p2p_cost`, answered from the profile's send_recv first."""
        if size <= 0:
            return p2p_cost(size, same_server, bottleneck_Bps, path_latency_s, links, congestion)
        shape = GroupShape(2, 1 if same_server else 2, 2 if same_server else 1, "NVSwitch" if same_server else "ASW",
                           bottleneck_Bps, bottleneck_Bps, path_latency_s, path_latency_s, congestion)
        answer, cost = self._ask("send_recv", size, 2, shape.per_server, shape, links)
        if cost is not None:
            return Cost(cost.time_s, "p2p", "Simple, model", cost.busbw_Bps)
        return Cost(answer.time_s, "profile", answer.source, size / answer.time_s)

    def compute_time_ns(self, item: Any) -> float | None:
        """``TopoOptions.compute_time_ns``: an item's ns from the profile, else the compute model."""
        return self._compute(item)[0]

    # -- what came from where --
    def network_summary(self) -> str | None:
        if self.network is None:
            return None
        counts = Counter(a.source for a in self._collectives.values())
        if not counts:
            return f"collectives: none asked of {self.network.device}"
        order = [MEASURED, INTERPOLATED, GROUP_INTERPOLATED, EXTRAPOLATED, MODEL]
        parts = [f"{counts[s]} {s}" for s in order if counts[s]]
        total = sum(counts.values())
        share = sum(counts[s] for s in FROM_MEASUREMENTS) / total * 100
        return (f"collectives ({total} distinct, network profile {self.network.device}): {', '.join(parts)}; "
                f"{share:.0f}% from measurements")

    def compute_summary(self) -> str | None:
        if self.compute is None:
            return None
        if not self._items:
            return f"computations: none asked of {self.compute.sku}"
        counts: Counter = Counter()
        ns: Counter = Counter()
        model_ns = 0.0
        for value, source, _, model_part in self._items.values():
            counts[source] += 1
            ns[source] += value or 0.0
            model_ns += model_part if source in (MEASURED, INTERPOLATED) else 0.0
        order = [MEASURED, INTERPOLATED, SCALED, MODEL, UNPRICED]
        total_ns = sum(ns.values())
        measured_ns = ns[MEASURED] + ns[INTERPOLATED] - model_ns
        parts = [f"{counts[s]} {s}" for s in order if counts[s]]
        share = f"; {measured_ns / total_ns * 100:.0f}% of their time from measurements" if total_ns > 0 else ""
        gpu = f", compute model {self.compute.gpu.name}" if self.compute.gpu is not None else ""
        return (f"computations ({sum(counts.values())} distinct, compute profile {self.compute.sku}{gpu}): "
                f"{', '.join(parts)}{share}")

    def sources_text(self) -> str:
        """One line per half: what the profile answered and what the models did."""
        lines = [s for s in (self.network_summary(), self.compute_summary()) if s]
        return "\n".join(f"sources: {line}" for line in lines)

    def collective_sources(self) -> list[tuple[str, int, int, int, str, str]]:
        """Every collective asked: ``(kind, size, ranks, ranks per node, source, detail)``."""
        return [(k[0], k[1], k[2], k[3], a.source, a.detail) for k, a in sorted(self._collectives.items())]


# ---- the command line's side ------------------------------------------------------------------------

def use_profile(args: Any, options: Any, model: str, job: Any) -> tuple[Any, Profile | None]:
    """Load ``--profile`` and fold it into the options of ``model``: the topo model asks the profile for
    every collective and (for a job) every computation; SimAI's model takes its -nv and -nic busbw from
    the profile's measurements (and a job's computations from the profile, through
    :func:`simulator.cli.simulate_job`).  Returns the new options and the profile (None without ``--profile``)."""
    root = getattr(args, "profile", None)
    device, sku = getattr(args, "network_device", None), getattr(args, "compute_sku", None)
    if root is None:
        for value, flag in ((device, "--network_device"), (sku, "--compute_sku")):
            if value is not None:
                raise ConfigError(f"{flag} names a part of a profiling database: give --profile DIR too")
        return options, None
    if not os.path.isdir(root):
        raise ConfigError(f"--profile {root}: no such folder (a profiling database: python -m profiling)")
    if device is None:
        devices = profile_db.network_devices(root)
        if len(devices) > 1:
            raise ConfigError(f"--profile {root} holds {len(devices)} network devices ({', '.join(devices)}): "
                              "choose one with --network_device NAME")
        device = devices[0] if devices else None
    gpu = job.training.gpu_type if job is not None else getattr(options, "gpu_type", None)
    dtype = job.training.dtype if job is not None else "bfloat16"
    if sku is None and gpu is not None and gpu.lower() in profile_db.skus(root):
        sku = gpu.lower()
    if job is None:
        if getattr(args, "compute_sku", None) is not None:
            raise ConfigError("--compute_sku prices the computations of a job; a SimAI workload file carries its own "
                              "compute times")
        sku = None
    from mocked_model.compute import known_gpu

    profile = Profile.load(root, device, sku, gpu if known_gpu(gpu) else None, dtype)
    if profile.network is None and profile.compute is None:
        raise ConfigError(f"--profile {root}: no network device and no compute profile to use here")
    if model == "topo":
        changes: dict[str, Any] = {"profile": profile}
        if profile.compute is not None and options.compute_time_ns is None:
            changes["compute_time_ns"] = profile.compute_time_ns
        return replace(options, **changes), profile
    return _simai_options(options, profile), profile


def simai_busbw(network: NetworkProfile) -> tuple[float | None, float | None, str]:
    """SimAI's -nv and -nic (GiB/s) from a network profile: the all-reduce busbw at the largest size of
    the largest one-node series, and of the largest series with one rank per node; and what they are."""
    table = network.series.get("all_reduce") or next(iter(network.series.values()))
    kind = "all_reduce" if "all_reduce" in network.series else next(iter(network.series))
    out: list[float | None] = []
    said = []
    for pick, label in ((lambda k: k[0] == k[1], "in a node"), (lambda k: k[1] == 1, "one rank per node")):
        keys = [k for k in table if pick(k)]
        if not keys:
            out.append(None)
            continue
        key = max(keys)
        sizes, times = table[key]
        busbw = sizes[-1] / (times[-1] * 1e-6) * (busbw_factor(kind, key[0]) if kind != "send_recv" else 1.0)
        out.append(busbw / 2**30)
        said.append(f"{kind} busbw {busbw / 1e9:.4g} GB/s at {sizes[-1]} bytes over {key[0]} ranks {label}")
    return out[0], out[1], "; ".join(said)


def _simai_options(options: Any, profile: Profile) -> Any:
    if profile.network is None:
        return options
    nv, nic, said = simai_busbw(profile.network)
    changes: dict[str, Any] = {}
    if nv is not None and options.nvlink_bw is None:
        changes["nvlink_bw"] = nv
    if nic is not None and options.nic_busbw is None:
        changes["nic_busbw"] = nic
    profile.notes.append(f"simai model: {', '.join(f'{k} {v:.4g} GiB/s' for k, v in (('-nv', nv), ('-nic', nic)) if v)} "
                           f"from {profile.network.device} ({said}); SimAI's ratio tables and fixed latencies do the rest"
                           if changes else f"simai model: -nv/-nic as given (the profile {profile.network.device} unused)")
    return replace(options, **changes)


def annotate(result: Any, profile: Profile | None) -> None:
    """Put what came from measurements and what from models into ``result.setup['sources']``."""
    if profile is None:
        return
    summaries = [profile.network_summary() if result.model == "topo" else None, profile.compute_summary()]
    lines = [f"sources: {line}" for line in summaries if line]
    lines.extend(f"sources: {note}" for note in profile.notes)
    if result.model == "topo" and result.details is not None:
        total = sum(r.total_us for r in result.details.collectives)
        if total > 0:
            measured = sum(r.total_us for r in result.details.collectives
                           if r.algorithm == "profile" and r.protocol in FROM_MEASUREMENTS)
            lines.append(f"sources: {measured / total * 100:.0f}% of the iteration's collective time is measured or "
                         "interpolated between measurements (topo_collectives.csv: algorithm 'profile')")
        if profile.compute is None:
            lines.append("sources: computations not from the profile (the workload's own times, or the job's compute "
                         "source)")
    result.setup["sources"] = "\n".join(line for line in lines if line)
    result.setup["profile"] = profile.root


__all__ = ["Answer", "ComputeProfile", "NetworkProfile", "Profile", "add_flags", "annotate", "simai_busbw", "use_profile"]
