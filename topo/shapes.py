"""Sizing and wiring of the fabrics: SimAI's five shapes, plus pods under a core tier.

Node ids (SimAI's order, docs/topology.md section 3, extended at the end for the core tier):

1. GPUs ``0 .. G-1``; GPU g is on server ``g // gps``.
2. NVSwitches ``G .. G+NV-1``, NV = servers * nsps; server s owns ``G + s*nsps .. G + s*nsps + nsps-1``.
3. ASWs, pod by pod (``asw_per_pod`` ids each).  Inside a pod: dual ToR puts ToR set 1 in the first
   half and set 2 in the second half (SimAI's order).  With one pod this is SimAI's ASW block.
4. PSWs, pod by pod (``-psn`` ids each).  Inside a pod: dual plane puts plane 1 in the first half.
5. Ours, only with ``--pods P`` > 1: core switches, plane by plane (dual plane: the first half serves
   plane 1).  Every PSW links to every core switch of its plane.

Links, in emission order (docs/topology.md section 4, core links appended):

1. for each GPU ascending: its ``nsps`` GPU->NVSwitch links, then its NIC link (set 1) and, with dual
   ToR, its set-2 NIC link.  Rail-optimised: GPU j of a pod (j = g - pod * gpus_per_pod) reaches ASW
   ``seg * gps + j % gps`` of its pod's set, seg = j // (gps * npa).  Not rail-optimised: ASW ``j // npa``.
2. ASW->PSW, pod by pod.  Single plane: every ASW of the pod (ascending) to every PSW of the pod
   (ascending).  Dual plane: set-1 ASWs to plane-1 PSWs, then set-2 ASWs to plane-2 PSWs.
3. PSW->core (ours): every PSW ascending, each to the core switches of its plane ascending.

Sizing (docs/topology.md section 5): segment = ``npa`` servers' worth of GPUs (rail: gps*npa GPUs on gps
ASWs per ToR set; not rail: npa GPUs on one ASW per set); segments per pod = ceil(GPUs per pod /
GPUs per segment); SimAI's one-pod capacity check, applied per pod: rail ``segments <= int(app/gps)``,
not rail single ToR ``segments <= app``, not rail dual ToR ``segments <= int(app/2)``.

Core tier sizing (ours): a PSW's downlink capacity is (ASWs it serves) * ASW-PSW bandwidth; the core
switches per plane are ceil(down / (oversubscription * PSW-core bandwidth)) unless ``-csn`` gives the
total, so ``--oversub 1`` is non-blocking and ``--oversub 2`` halves the PSW uplinks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from topo.templates import FabricSpec
from topo.topology import Topology
from topo.units import parse_bandwidth
from utils.errors import ConfigError

NV, NIC, AP, CORE = 0, 1, 2, 3
"""Link classes, also the index of each class's bandwidth / latency string."""


@dataclass(frozen=True)
class Layout:
    """The sizes of the fabric a :class:`FabricSpec` describes (all counts)."""

    shape: str
    """SimAI's builder name, e.g. ``Rail_Opti_SingleToR``."""
    file_name: str
    gpus: int
    servers: int
    nvswitches: int
    segments_per_pod: int
    asw_per_pod: int
    asws: int
    psws: int
    cores_per_plane: int
    cores: int
    links: int
    warnings: tuple[str, ...]

    @property
    def total_nodes(self) -> int:
        return self.gpus + self.nvswitches + self.asws + self.psws + self.cores

    @property
    def segments(self) -> int:
        return self.segments_per_pod * (self.asws // self.asw_per_pod)


def shape_name(spec: FabricSpec) -> str:
    """SimAI's builder for the wiring switches (docs/topology.md section 1, "Dispatch")."""
    if not spec.rail_optimized:
        return "No_Rail_Opti_DualToR" if spec.dual_tor else "No_Rail_Opti_SingleToR"
    if spec.dual_tor:
        return "Rail_Opti_DualToR_DualPlane" if spec.dual_plane else "Rail_Opti_DualToR_SinglePlane"
    return "Rail_Opti_SingleToR"


def file_name(spec: FabricSpec, shape: str) -> str:
    """SimAI's file name (docs/topology.md section 1 table); ours adds ``_{P}pods`` before the bandwidth."""
    head = {
        "Rail_Opti_SingleToR": ("Rail_Opti_SingleToR", ""),
        "Rail_Opti_DualToR_SinglePlane": ("Rail_Opti", "_DualToR_SinglePlane"),
        "Rail_Opti_DualToR_DualPlane": ("Rail_Opti", "_DualToR_DualPlane"),
        "No_Rail_Opti_SingleToR": ("No_Rail_Opti", "_SingleToR"),
        "No_Rail_Opti_DualToR": ("No_Rail_Opti", "_DualToR"),
    }[shape]
    if spec.template == "DCN+":
        head = ("DCN+DualToR" if spec.dual_tor else "DCN+SingleToR", "")
    elif spec.template is not None:
        head = (spec.template, head[1] if spec.template == "AlibabaHPN" else "")
    pods = f"_{spec.pods}pods" if spec.pods > 1 else ""
    return f"{head[0]}_{spec.gpus}g_{spec.gpus_per_server}gps{head[1]}{pods}_{spec.nic_bw}_{spec.gpu_type}"


def plan(spec: FabricSpec) -> Layout:
    """Sizes of the fabric; raises :class:`ConfigError` for what SimAI crashes on or silently gets wrong."""
    g, gps, pods, shape = spec.gpus, spec.gpus_per_server, spec.pods, shape_name(spec)
    if g % gps:
        raise ConfigError(f"-g {g} is not a multiple of -gps {gps}: GPU g sits on server g // gps "
                          "(SimAI crashes with IndexError and leaves a partial file)")
    if g % (pods * gps):
        raise ConfigError(f"-g {g} GPUs do not split into --pods {pods} pods of whole servers of {gps} GPUs")
    if spec.dual_plane and spec.psw_per_pod % 2:
        raise ConfigError(f"-psn {spec.psw_per_pod} is odd: dual plane splits the PSWs into two equal planes "
                          f"(SimAI silently builds planes of {spec.psw_per_pod // 2 + 1} and {spec.psw_per_pod // 2})")
    gpus_per_pod = g // pods
    per_set = gps if spec.rail_optimized else 1
    sets = 2 if spec.dual_tor else 1
    gpus_per_segment = per_set * spec.nics_per_asw
    segments = math.ceil(gpus_per_pod / gpus_per_segment)
    limit, rule = _capacity(spec)
    if segments > limit:
        where = "one pod" if pods == 1 else f"each of --pods {pods} pods ({gpus_per_pod} GPUs each)"
        unit = f"-npa {spec.nics_per_asw} x -gps {gps} = {gpus_per_segment}" if spec.rail_optimized \
            else f"-npa {spec.nics_per_asw}"
        raise ConfigError(
            f"capacity overflow in {shape}: {gpus_per_pod} GPUs need {segments} segments of {unit} GPUs, but "
            f"{where} holds at most {rule} = {limit} segment(s) (SimAI's check); raise -app, -npa or --pods")
    asw_per_pod = segments * per_set * sets
    asws = asw_per_pod * pods
    warnings = list(spec.warnings)
    if spec.asw_requested is not None and spec.asw_requested != asws:
        warnings.append(f"-asn {spec.asw_requested} disagrees with {g} GPUs: {pods * segments} segment(s) x "
                        f"{per_set * sets} ASW(s) per segment; using asw_switch_num {asws} (as SimAI does)")
    planes = 2 if spec.dual_plane else 1
    psws = spec.psw_per_pod * pods
    cores_per_plane = 0
    if pods > 1:
        cores_per_plane = _cores_per_plane(spec, asw_per_pod // planes, planes)
    cores = cores_per_plane * planes
    ap_links = asws * spec.psw_per_pod // planes
    links = g * spec.nvswitch_per_server + g * sets + ap_links + psws * cores_per_plane
    return Layout(shape=shape, file_name=file_name(spec, shape), gpus=g, servers=g // gps,
                  nvswitches=g // gps * spec.nvswitch_per_server, segments_per_pod=segments,
                  asw_per_pod=asw_per_pod, asws=asws, psws=psws, cores_per_plane=cores_per_plane, cores=cores,
                  links=links, warnings=tuple(warnings))


def _capacity(spec: FabricSpec) -> tuple[int, str]:
    """SimAI's per-pod segment limit and its formula (docs/topology.md section 5)."""
    app = spec.asw_per_psw
    if spec.rail_optimized:
        return app // spec.gpus_per_server, f"int(-app {app} / -gps {spec.gpus_per_server})"
    if spec.dual_tor:
        return app // 2, f"int(-app {app} / 2)"
    return app, f"-app {app}"


def _cores_per_plane(spec: FabricSpec, asw_per_psw: int, planes: int) -> int:
    if spec.core_per_plane_requested is not None:
        if spec.core_per_plane_requested % planes:
            raise ConfigError(f"-csn {spec.core_per_plane_requested} is odd: dual plane splits the core switches "
                              "into two equal planes")
        return spec.core_per_plane_requested // planes
    down_bps = asw_per_psw * parse_bandwidth(spec.ap_bw)
    # a tolerance keeps ratios that divide exactly (64 * 400G / 400G) from rounding up
    return max(1, math.ceil(down_bps / (spec.oversubscription * parse_bandwidth(spec.pc_bw)) - 1e-9))


def build(spec: FabricSpec, layout: Layout | None = None) -> Topology:
    """The :class:`Topology` of ``spec`` (link arrays in SimAI's emission order)."""
    lay = layout or plan(spec)
    g, gps, nsps, pods = spec.gpus, spec.gpus_per_server, spec.nvswitch_per_server, spec.pods
    sets = 2 if spec.dual_tor else 1
    planes = 2 if spec.dual_plane else 1
    asw0 = g + lay.nvswitches
    psw0 = asw0 + lay.asws
    core0 = psw0 + lay.psws

    gpu = np.arange(g, dtype=np.int64)
    pod, local = np.divmod(gpu, g // pods)
    if spec.rail_optimized:
        in_set = local // (gps * spec.nics_per_asw) * gps + local % gps
    else:
        in_set = local // spec.nics_per_asw
    per_set = lay.asw_per_pod // sets
    nv = g + (gpu // gps)[:, None] * nsps + np.arange(nsps)[None, :]
    nic = asw0 + (pod * lay.asw_per_pod + in_set)[:, None] + per_set * np.arange(sets)[None, :]
    per_gpu = nsps + sets
    gpu_dst = np.concatenate([nv, nic], axis=1).ravel()
    gpu_src = np.repeat(gpu, per_gpu)
    gpu_kind = np.tile(np.array([NV] * nsps + [NIC] * sets, dtype=np.int8), g)

    ap_src, ap_dst = [], []
    psw_per_plane = spec.psw_per_pod // planes
    asw_per_plane = lay.asw_per_pod // planes
    for p in range(pods):
        for plane in range(planes):
            asw = asw0 + p * lay.asw_per_pod + plane * asw_per_plane + np.arange(asw_per_plane)
            psw = psw0 + p * spec.psw_per_pod + plane * psw_per_plane + np.arange(psw_per_plane)
            ap_src.append(np.repeat(asw, psw_per_plane))
            ap_dst.append(np.tile(psw, asw_per_plane))
    psw_ids = np.arange(psw0, core0)
    psw_plane = (psw_ids - psw0) % spec.psw_per_pod // psw_per_plane
    core_src = np.repeat(psw_ids, lay.cores_per_plane)
    core_dst = (core0 + (psw_plane * lay.cores_per_plane)[:, None] + np.arange(lay.cores_per_plane)[None, :]).ravel()

    n_ap = sum(len(a) for a in ap_src)
    src = np.concatenate([gpu_src, *ap_src, core_src]).astype(np.int64)
    dst = np.concatenate([gpu_dst, *ap_dst, core_dst]).astype(np.int64)
    kind = np.concatenate([gpu_kind, np.full(n_ap, AP, np.int8), np.full(len(core_src), CORE, np.int8)])
    assert len(src) == lay.links, (len(src), lay.links)
    total = lay.total_nodes
    return Topology.from_arrays(
        gpus_per_server=gps, nvswitch_count=lay.nvswitches, gpu_type=spec.gpu_type,
        switch_ids=np.arange(g, total, dtype=np.int64), src=src, dst=dst,
        bandwidth_codes=kind, bandwidth_strings=(spec.nvlink_bw, spec.nic_bw, spec.ap_bw, spec.pc_bw),
        latency_codes=kind, latency_strings=(spec.nvlink_latency, spec.nic_latency, spec.ap_latency, spec.pc_latency),
        error_codes=np.zeros(len(src), np.int8), error_strings=(spec.error_rate,),
    )
