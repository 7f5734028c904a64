"""Generator flags -> a validated :class:`FabricSpec`: SimAI's defaults, templates and forced switches.

Every rule here is SimAI 1.7's ``gen_Topo_Template.py`` as ``docs/topology.md`` (sections 1 and 5)
records it, except where noted as ours:

* base defaults (docs/topology.md section 1): 32 GPUs, 8 per server, H100, 1 NVSwitch per server, NVLink
  0.000025ms, NIC 400Gbps / 0.0005ms, 8 ASWs, 64 NICs per ASW, 64 PSWs, ASW-PSW 400Gbps, 64 ASWs per PSW,
  error rate ``0``.
* ours: the NVLink rate (``-nvbw``) defaults to ``-gt``'s nominal rate per GPU per direction from the compute
  model's GPU table (H100: 450 GB/s = 3600Gbps; :func:`nominal_nvlink_bw`), the rate calibration and the
  topo model treat as nominal; SimAI writes 2880Gbps (360 GB/s, an achieved rate) for every type, which
  ``-nvbw 2880Gbps`` reproduces byte for byte.
* a template overrides some defaults, only for flags the user did not give, and forces the wiring
  switches (``--ro``/``--dt``/``--dp``) whatever the user gave:
  ``Spectrum-X`` 4096 GPUs, rail-optimised single ToR; ``AlibabaHPN`` 15360 GPUs, 200Gbps, 240 ASWs,
  128 NICs per ASW, 120 PSWs, 240 ASWs per PSW (120 with ``--dp``), rail-optimised dual ToR;
  ``DCN+`` 512 GPUs, 8 ASWs, 8 ASWs per PSW, 8 PSWs, not rail-optimised, single plane, and with
  ``--dt`` dual ToR at 200Gbps with 128 NICs per ASW.  No ``-topo`` means the custom shape driven by
  ``--ro/--dt/--dp``.
* ours: an unknown ``-topo`` is an error listing the known names (SimAI silently builds the custom
  shape); a switch the template overrides (``-topo DCN+ --dp``) is a warning, not silence; ``--dp``
  without rail-optimised dual ToR is an error (SimAI: ValueError traceback).
* ours, beyond SimAI: ``NVL72`` (GB200 NVL72: 72 GPUs per NVLink domain, 1.8 TB/s NVLink per GPU
  counted both ways, i.e. 900 GB/s = 7200Gbps per direction as an ns-3 link rate is, 800Gbps NICs,
  576 GPUs = the 8 racks of one DGX SuperPOD GB200 scalable unit) and ``NVL`` (the same with
  ``-gps N`` GPUs per NVLink domain, default 72).
  Both use SimAI's rail-optimised single-ToR wiring with one "server" per NVLink domain.  ``-app``
  defaults to max(64, gps) so that one segment fits a pod (SimAI's check allows int(app/gps) segments).
  Multi-pod fabrics (``--pods``, core tier) and a separate ASW-PSW latency (``-apl``) are in
  :mod:`topo.shapes`.

Bandwidths and latencies stay strings (they are written verbatim into the file); they are parsed
here only to reject values ns-3 would misread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from topo.units import parse_bandwidth, parse_error_rate, parse_latency
from utils.errors import ConfigError

SIMAI_TEMPLATES = ("Spectrum-X", "AlibabaHPN", "DCN+")
OUR_TEMPLATES = ("NVL72", "NVL")
TEMPLATES = SIMAI_TEMPLATES + OUR_TEMPLATES

BASE_DEFAULTS: dict[str, Any] = dict(
    gpu=32, error_rate="0", gpu_per_server=8, gpu_type="H100", nv_switch_per_server=1, nvlink_bw="2880Gbps",
    nv_latency="0.000025ms", latency="0.0005ms", bandwidth="400Gbps", asw_switch_num=8, nics_per_aswitch=64,
    psw_switch_num=64, ap_bandwidth="400Gbps", asw_per_psw=64, pods=1,
)
"""SimAI's defaults (docs/topology.md section 1); ``pods`` is ours (SimAI always builds one pod)."""

_NVL_DEFAULTS: dict[str, Any] = dict(gpu_type="GB200", nvlink_bw="7200Gbps", bandwidth="800Gbps", ap_bandwidth="800Gbps")

SIMAI_NVLINK_BW = "2880Gbps"
"""SimAI's ``-nvbw`` default for every GPU type: 360 GB/s per GPU per direction, near what NCCL's busbw reaches
on 8 H100 (NCCL models 18 NVLink4 links at 20.6 of their 25 GB/s: 370.8 GB/s), i.e. an achieved rate, not
a link rate; above the A100's whole NVLink (300 GB/s) and the H800's (200 GB/s)."""


def nominal_nvlink_bw(gpu_type: str) -> str:
    """``-nvbw``'s default: the GPU table's nominal NVLink rate per GPU per direction for ``-gt`` (H100 SXM,
    H200, H20: 450 GB/s = 3600Gbps; A100: 300 GB/s = 2400Gbps; H800, A800: 200 GB/s = 1600Gbps; B200, GB200:
    900 GB/s = 7200Gbps), the rate ``python -m profiling calibrate --gpu_type`` divides by and the one the topo
    model applies NCCL's efficiency to (0.824 on Hopper, so 8 H100 reach 370.8 GB/s busbw).  A type the table
    lacks keeps SimAI's :data:`SIMAI_NVLINK_BW`."""
    from mocked_model.compute import gpu_spec, known_gpu

    if not known_gpu(gpu_type):
        return SIMAI_NVLINK_BW
    gbps = gpu_spec(gpu_type).nvlink_gbps * 8
    return f"{gbps:g}Gbps"


FLAG_NAMES = {
    "topology": "-topo", "gpu": "-g", "error_rate": "-er", "gpu_per_server": "-gps", "gpu_type": "-gt",
    "nv_switch_per_server": "-nsps", "nvlink_bw": "-nvbw", "nv_latency": "-nl", "latency": "-l", "bandwidth": "-bw",
    "asw_switch_num": "-asn", "nics_per_aswitch": "-npa", "psw_switch_num": "-psn", "ap_bandwidth": "-apbw",
    "asw_per_psw": "-app", "ap_latency": "-apl", "pods": "--pods", "core_switch_num": "-csn",
    "pc_bandwidth": "-pcbw", "pc_latency": "-pcl", "oversubscription": "--oversub", "ro": "--ro", "dt": "--dt",
    "dp": "--dp",
}
"""The short spelling of each flag, used in messages."""


@dataclass(frozen=True)
class FabricSpec:
    """What to build, after defaults and templates.  Counts are plain integers; bandwidths (bits per
    second, e.g. ``400Gbps``) and latencies (e.g. ``0.0005ms``) are the strings written to the file."""

    template: str | None
    rail_optimized: bool
    dual_tor: bool
    dual_plane: bool
    gpus: int
    gpus_per_server: int
    gpu_type: str
    nvswitch_per_server: int
    nvlink_bw: str
    nvlink_latency: str
    nic_bw: str
    nic_latency: str
    nics_per_asw: int
    psw_per_pod: int
    ap_bw: str
    ap_latency: str
    asw_per_psw: int
    error_rate: str
    asw_requested: int | None = None
    """``-asn`` as the user gave it (None: not given).  SimAI recomputes the ASW count anyway."""
    pods: int = 1
    core_per_plane_requested: int | None = None
    pc_bw: str = "400Gbps"
    pc_latency: str = "0.0005ms"
    oversubscription: float = 1.0
    warnings: tuple[str, ...] = field(default=(), compare=False)


def resolve(given: dict[str, Any]) -> FabricSpec:
    """The :class:`FabricSpec` of the flags the user gave (argparse dests; absent = not given).
    Raises :class:`ConfigError` for an unknown template or an impossible switch combination."""
    template = given.get("topology")
    if template is not None and template not in TEMPLATES:
        raise ConfigError(f"-topo {template!r} is not a known template; known: {', '.join(TEMPLATES)} "
                          "(or no -topo for the custom shape set by --ro/--dt/--dp)")
    warnings: list[str] = []
    ro, dt, dp = (bool(given.get(k, False)) for k in ("ro", "dt", "dp"))
    values = dict(BASE_DEFAULTS)
    forced: dict[str, bool] = {}
    if template == "Spectrum-X":
        values.update(gpu=4096)
        forced = dict(ro=True, dt=False, dp=False)
    elif template == "AlibabaHPN":
        values.update(gpu=15360, bandwidth="200Gbps", asw_switch_num=240, nics_per_aswitch=128, psw_switch_num=120,
                      asw_per_psw=120 if dp else 240)
        forced = dict(ro=True, dt=True)
    elif template == "DCN+":
        values.update(gpu=512, asw_switch_num=8, asw_per_psw=8, psw_switch_num=8)
        if dt:
            values.update(bandwidth="200Gbps", nics_per_aswitch=128)
        forced = dict(ro=False, dp=False)
    elif template in OUR_TEMPLATES:
        gps = given.get("gpu_per_server", 72)
        if template == "NVL72" and gps != 72:
            raise ConfigError(f"-topo NVL72 has 72 GPUs per NVLink domain, not -gps {gps}; use -topo NVL -gps {gps}")
        g = given.get("gpu")
        if g is not None and isinstance(gps, int) and gps > 0 and g % gps:
            raise ConfigError(
                f"-g {g} is not a multiple of -topo {template}'s {gps} GPUs per NVLink domain (-gps): give -gps N "
                f"dividing {g} or -g a multiple of {gps}.  SimAI's generator has no {template} shape: it silently "
                f"builds its custom fabric instead (not rail-optimised, single ToR, 8 GPUs per server: "
                f"No_Rail_Opti_{g}g_8gps_SingleToR_400Gbps_H100)")
        values.update(_NVL_DEFAULTS, gpu_per_server=gps, gpu=8 * gps, asw_per_psw=max(64, gps))
        forced = dict(ro=True, dt=False, dp=False)
    for switch, value in forced.items():
        if given.get(switch, False) and not value:
            warnings.append(f"{FLAG_NAMES[switch]} ignored: -topo {template} forces it off (as SimAI does)")
    ro, dt, dp = forced.get("ro", ro), forced.get("dt", dt), forced.get("dp", dp)
    if dp and not ro:
        raise ConfigError("--dp (dual plane) needs a rail-optimised dual-ToR fabric: add --ro --dt, or -topo AlibabaHPN")
    if dp and not dt:
        raise ConfigError("--dp (dual plane) needs dual ToR: add --dt (each NIC then reaches one ASW per plane)")
    values.update({k: v for k, v in given.items() if k in values})
    if "nvlink_bw" not in given and template not in OUR_TEMPLATES:
        values["nvlink_bw"] = nominal_nvlink_bw(values["gpu_type"])
    for name in ("gpu", "gpu_per_server", "nv_switch_per_server", "nics_per_aswitch", "psw_switch_num",
                 "asw_per_psw", "pods"):
        _positive(name, values[name])
    for name in ("asw_switch_num", "core_switch_num"):
        if given.get(name) is not None:
            _positive(name, given[name])
    ap_latency = given.get("ap_latency", values["latency"])
    spec = FabricSpec(
        template=template, rail_optimized=ro, dual_tor=dt, dual_plane=dp, gpus=values["gpu"],
        gpus_per_server=values["gpu_per_server"], gpu_type=_gpu_type(values["gpu_type"]),
        nvswitch_per_server=values["nv_switch_per_server"],
        nvlink_bw=_bandwidth("nvlink_bw", values["nvlink_bw"]), nvlink_latency=_latency("nv_latency", values["nv_latency"]),
        nic_bw=_bandwidth("bandwidth", values["bandwidth"], in_name=True), nic_latency=_latency("latency", values["latency"]),
        nics_per_asw=values["nics_per_aswitch"], psw_per_pod=values["psw_switch_num"],
        ap_bw=_bandwidth("ap_bandwidth", values["ap_bandwidth"]), ap_latency=_latency("ap_latency", ap_latency),
        asw_per_psw=values["asw_per_psw"], error_rate=_error_rate(values["error_rate"]),
        asw_requested=given.get("asw_switch_num"), pods=values["pods"],
        core_per_plane_requested=given.get("core_switch_num"),
        pc_bw=_bandwidth("pc_bandwidth", given.get("pc_bandwidth", values["ap_bandwidth"])),
        pc_latency=_latency("pc_latency", given.get("pc_latency", ap_latency)),
        oversubscription=given.get("oversubscription", 1.0), warnings=tuple(warnings),
    )
    _check_core_flags(spec, given)
    return spec


def _check_core_flags(spec: FabricSpec, given: dict[str, Any]) -> None:
    core_flags = [k for k in ("core_switch_num", "pc_bandwidth", "pc_latency", "oversubscription") if k in given]
    if spec.pods == 1 and core_flags:
        raise ConfigError(f"{FLAG_NAMES[core_flags[0]]} describes the core tier, which only exists with --pods > 1")
    if "core_switch_num" in given and "oversubscription" in given:
        raise ConfigError("give -csn (core switches) or --oversub (PSW down:up ratio, from which the core count "
                          "follows), not both")
    if not spec.oversubscription > 0:
        raise ConfigError(f"--oversub must be positive, got {spec.oversubscription}")


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{FLAG_NAMES[name]} must be at least 1, got {value}")


def _bandwidth(name: str, text: str, in_name: bool = False) -> str:
    try:
        parse_bandwidth(text, require_unit=True)
    except ValueError as exc:
        raise ConfigError(f"{FLAG_NAMES[name]}: {exc}") from None
    if in_name and "/" in text:
        raise ConfigError(f"{FLAG_NAMES[name]} {text!r} is part of the file name: write it without '/' (e.g. 400Gbps)")
    return text


def _latency(name: str, text: str) -> str:
    try:
        parse_latency(text, require_unit=True)
    except ValueError as exc:
        raise ConfigError(f"{FLAG_NAMES[name]}: {exc}") from None
    return text


def _error_rate(text: str) -> str:
    try:
        parse_error_rate(str(text))
    except ValueError as exc:
        raise ConfigError(f"-er: {exc}") from None
    if any(c.isspace() for c in str(text)):
        raise ConfigError(f"-er {text!r} must be one token")
    return str(text)


def _gpu_type(text: str) -> str:
    # the type is one whitespace-separated header token and part of the file name
    if not text or any(c.isspace() for c in text) or "/" in text or "\\" in text:
        raise ConfigError(f"-gt {text!r} must be one word without '/' (it is a header token and part of the file name)")
    return text
