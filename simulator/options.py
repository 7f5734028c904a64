"""Inputs of the analytical models other than the workload: cluster shape and bandwidths.

Units: bandwidths are GiB/s busbw, as SimAI reads ``-nv`` and ``-nic`` (docs/formats.md section 1 keeps
GiB/s for SimAI compatibility only); overlap ratios are fractions in [0, 1].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.cfloat import f32
from utils.errors import ConfigError

# SimAI's calbusbw.h: NVLink busbw = per-link bandwidth * links (20.6 for SM90, 20.0 for SM80), in
# double, stored as float.  docs/simai_analytical.md, "Inputs".
GPU_NVLINK_GIBPS = {
    "H100": f32(20.6 * 18), "H20": f32(20.6 * 18), "H800": f32(20.6 * 8), "A100": f32(20.0 * 12), "A800": f32(20.0 * 8),
}
"""Default NVLink busbw (GiB/s) by GPU type: H100/H20 370.8, H800 164.8, A100 240, A800 160."""
NIC_BUSBW_GIBPS = {"cx6": 23.5, "cx7": 48.5, "bf3": 48.5}
"""Default per-NIC busbw (GiB/s) by NIC type."""
DEFAULT_GPU_TYPE = "A100"
"""With neither -nv nor -g_type, SimAI's GPU type is uninitialised and behaves as A100."""
DEFAULT_NIC_TYPE = "cx7"


def derived_fabric_gpu(gpu_type: str | None, nvlink_bw: float | None) -> tuple[str | None, float | None]:
    """``(gpu_type, nvlink_bw)`` for the options of a derived fabric given ``--gpu_type`` and ``-nv``: a type of
    SimAI's table (:data:`GPU_NVLINK_GIBPS`) is its own; a type only the compute model knows (H200, B200, a spec
    file's) leaves the options' type unset and, without ``-nv``, sets NCCL's NVLink busbw from its spec (its nominal
    rate times its NVLink efficiency), not SimAI's A100 default; any other name is the GPU table's one-line error
    (it lists every type, SimAI's and the compute model's)."""
    if gpu_type is None:
        return None, nvlink_bw
    name = gpu_type.strip().upper()
    if name in GPU_NVLINK_GIBPS:
        return name, nvlink_bw
    from mocked_model.compute import gpu_spec

    spec = gpu_spec(gpu_type)  # an unknown name: ConfigError naming the known ones
    if nvlink_bw is None or nvlink_bw <= 0:
        nvlink_bw = spec.nvlink_gbps * spec.nvlink_efficiency
    return None, nvlink_bw


def gpu_type_name(text: str) -> str:
    """Canonical GPU type (``h100`` -> ``H100``).  Raises :class:`ConfigError` for unknown names."""
    name = text.strip().upper()
    if name not in GPU_NVLINK_GIBPS:
        raise ConfigError(f"unknown GPU type {text!r} (choose from {', '.join(GPU_NVLINK_GIBPS)})")
    return name


def nic_type_name(text: str) -> str:
    """Canonical NIC type (``CX7`` -> ``cx7``).  Raises :class:`ConfigError` for unknown names."""
    name = text.strip().lower()
    if name not in NIC_BUSBW_GIBPS:
        raise ConfigError(f"unknown NIC type {text!r} (choose from {', '.join(NIC_BUSBW_GIBPS)})")
    return name


def _check_cluster(options: Any) -> None:
    """Validate the cluster fields both option sets share and normalise the GPU and NIC types."""
    for name, flag in (("gpus", "-g/--gpus"), ("gpus_per_server", "-g_p_s/--gpus_per_server"),
                       ("nics_per_server", "-n_p_s/--nics_per_server")):
        value = getattr(options, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{flag} must be a positive integer, got {value!r}")
    if options.gpu_type is not None:
        object.__setattr__(options, "gpu_type", gpu_type_name(options.gpu_type))
    if options.nic_type is not None:
        object.__setattr__(options, "nic_type", nic_type_name(options.nic_type))


@dataclass(frozen=True)
class SimAIOptions:
    """SimAI-analytical's flags (docs/simai_analytical.md, "Inputs").

    ``gpus`` (-g) defaults to the workload's ``all_gpus``; ``gpus_per_server`` (-g_p_s) and
    ``nics_per_server`` (-n_p_s) are required (SimAI crashes without them).  ``nvlink_bw`` (-nv)
    and ``nic_busbw`` (-nic) are GiB/s; ``None`` or a value <= 0 takes the default of
    ``gpu_type`` / ``nic_type``.  ``pp_busbw`` is the bandwidth (GiB/s) of the pipeline-parallel
    send in the PP exposed term; ``None`` takes the DP group's inter-node busbw.  SimAI 1.7 divides
    by ``pp_overlap`` there instead (a bug; see :mod:`simulator.simai.model`).  ``busbw_file`` (-busbw):
    a :class:`simulator.simai.busbw_file.BusbwFile` or its path; its values then price the collectives it
    covers as SimAI's pre-1.7 binary did (no ratio tables, no fixed small-message latencies), and its
    ``PP: busbw`` is the default ``pp_busbw``.
    """

    gpus: int | None = None
    gpus_per_server: int | None = None
    nics_per_server: int | None = None
    nvlink_bw: float | None = None
    nic_busbw: float | None = None
    gpu_type: str | None = None
    nic_type: str | None = None
    dp_overlap: float = 0.0
    tp_overlap: float = 0.0
    ep_overlap: float = 0.0
    pp_overlap: float = 1.0
    pp_busbw: float | None = None
    busbw_file: Any = None

    def __post_init__(self) -> None:
        _check_cluster(self)
        for name, flag in (("dp_overlap", "-dp_o"), ("tp_overlap", "-tp_o"), ("ep_overlap", "-ep_o"),
                           ("pp_overlap", "-pp_o")):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{flag} must be an overlap ratio between 0 and 1, got {value}")
        if self.pp_busbw is not None and not self.pp_busbw > 0:
            raise ConfigError(f"--pp_busbw must be a positive bandwidth in GiB/s, got {self.pp_busbw}")

    @property
    def nvlink_gibps(self) -> float:
        """NVLink busbw in GiB/s as SimAI holds it (float32)."""
        if self.nvlink_bw is not None and self.nvlink_bw > 0:
            return f32(self.nvlink_bw)
        return GPU_NVLINK_GIBPS[self.gpu_type or DEFAULT_GPU_TYPE]

    @property
    def nic_gibps(self) -> float:
        """Per-NIC busbw in GiB/s as SimAI holds it (float32)."""
        if self.nic_busbw is not None and self.nic_busbw > 0:
            return f32(self.nic_busbw)
        return f32(NIC_BUSBW_GIBPS[self.nic_type or DEFAULT_NIC_TYPE])


@dataclass(frozen=True)
class TopoOptions:
    """Inputs of ``--model topo`` besides the workload and the topology (docs/sim_model.md).

    - ``gpus`` (-g): ranks to place (default: the workload's ``all_gpus`` / the job's world size);
      the topology must hold at least that many GPUs.
    - Without a topology, the model derives a two-tier fabric (:class:`simulator.topo.fabric.DerivedFabric`)
      from ``gpus_per_server`` (-g_p_s, required then), ``nics_per_server`` (-n_p_s, default one NIC per
      GPU), ``nvlink_bw`` / ``nic_busbw`` (-nv / -nic, GiB/s busbw as SimAI reads them; defaults by
      ``gpu_type`` / ``nic_type`` as in :class:`SimAIOptions`).  With a topology, ``gpus_per_server``,
      when given, must match it.
    - ``nvlink_efficiency`` / ``nic_efficiency``: the share of a link's nominal rate a collective's
      busbw reaches; ``None`` takes 0.824 / 0.97 with a topology file
      (:data:`simulator.topo.collectives.NVLINK_EFFICIENCY`, :data:`~simulator.topo.collectives.NIC_EFFICIENCY`)
      and 1.0 for the derived fabric, whose -nv / -nic are busbw already.
    - ``latency_scale`` multiplies every latency (alpha) term; 0 gives a pure bandwidth model.
    - ``overlap_grad_reduce``: overlap DP/EP gradient reduction with backward as buckets complete
      (``None``: as the workload was generated; SimAI files: True).
    - ``tp_comm_overlap``: every TP collective runs beside the compute (Megatron's --tp-comm-overlap);
      otherwise only collectives a workload marks ``meta["overlappable"]`` do.
    - ``peak_tflops``: dense peak TFLOP/s per GPU for the MFU (default by GPU type).
    - ``compute_time_ns``: ``item -> ns or None`` for computation items of our workloads (default:
      the item's ``time_ns``; e.g. ``mocked_model.compute.estimator("H100")``).
    - ``compute_source``: for a ``JobConfig`` without ``compute_time_ns``: ``model``, ``file``, ``aiob``
      (default: AIOB with the job's ``aiob_enable``, its ``comp_filepath``, else the compute model for its
      ``gpu_type``).
    - ``profile``: a :class:`simulator.profiles.measured.Profile` (``--profile DIR --network_device NAME``): every
      collective and pipeline transfer is asked of it (measured times first, NCCL's model fitted to them
      behind); its ``compute_time_ns`` serves as the compute hook.
    - ``placement``: the GPU of each rank (``--placement FILE``, :mod:`simulator.topo.placement`); None: rank r on GPU r.
    - ``pxn``: NCCL's PXN on servers with shared NICs (:mod:`topo.hierarchy`; NCCL's default, ``NCCL_PXN_DISABLE=0``).
    - ``fill_bubbles``: each stage's step work that needs no other stage runs as soon as its own backward is done,
      the gradient-norm all-reduce validated after the step (:mod:`simulator.topo.bubble_fill`).
    """

    gpus: int | None = None
    gpus_per_server: int | None = None
    nics_per_server: int | None = None
    nvlink_bw: float | None = None
    nic_busbw: float | None = None
    gpu_type: str | None = None
    nic_type: str | None = None
    nvlink_efficiency: float | None = None
    nic_efficiency: float | None = None
    latency_scale: float = 1.0
    overlap_grad_reduce: bool | None = None
    tp_comm_overlap: bool = False
    peak_tflops: float | None = None
    compute_time_ns: Callable[[Any], float | None] | None = None
    compute_source: str | None = None
    profile: Any = None
    placement: tuple[int, ...] | None = None
    pxn: bool = True
    fill_bubbles: bool = False

    def __post_init__(self) -> None:
        _check_cluster(self)
        if self.placement is not None:
            object.__setattr__(self, "placement", tuple(int(g) for g in self.placement))
        for name, flag in (("nvlink_efficiency", "--nvlink_efficiency"), ("nic_efficiency", "--nic_efficiency")):
            value = getattr(self, name)
            if value is not None and not 0.0 < value <= 1.0:
                raise ConfigError(f"{flag} must be a fraction in (0, 1], got {value}")
        if not self.latency_scale >= 0.0:
            raise ConfigError(f"--latency_scale must be >= 0, got {self.latency_scale}")
        if self.peak_tflops is not None and not self.peak_tflops > 0:
            raise ConfigError(f"--peak_tflops must be positive, got {self.peak_tflops}")
        if self.compute_time_ns is not None and not callable(self.compute_time_ns):
            raise ConfigError("compute_time_ns must be a callable item -> ns or None")

    @property
    def nvlink_gibps(self) -> float:
        """Derived fabric: NVLink busbw in GiB/s (-nv, else by GPU type as SimAI)."""
        if self.nvlink_bw is not None and self.nvlink_bw > 0:
            return self.nvlink_bw
        return GPU_NVLINK_GIBPS[self.gpu_type or DEFAULT_GPU_TYPE]

    @property
    def nic_gibps(self) -> float:
        """Derived fabric: busbw of one NIC in GiB/s (-nic, else by NIC type as SimAI)."""
        if self.nic_busbw is not None and self.nic_busbw > 0:
            return self.nic_busbw
        return NIC_BUSBW_GIBPS[self.nic_type or DEFAULT_NIC_TYPE]
