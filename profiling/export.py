"""Write SimAI's inputs from a profile: ``busbw.yaml`` (SimAI-analytical's ``-busbw``) and AIOB compute
files (AICB's ``--comp_filepath``, SimAI workloads' compute times).

busbw.yaml, as SimAI's analytical binary reads it (``AstraParamParse.hh``, ``UserParam::parseYaml``):
the first line is a name and is skipped; ``TP:``, ``DP:``, ``EP:`` open sections of ``allreduce,:``,
``allgather,:``, ``reducescatter,:``, ``alltoall,:`` values (the comma is part of SimAI's keys, ``null``
leaves SimAI's own value); ``PP:`` holds ``busbw:``; lines starting with ``#`` are skipped.  SimAI
divides bytes by 2^30 and by these values, so they are GiB/s: we convert nccl-tests' GB/s (1e9) and say
so in a comment.  Each value is the busbw the profile gives (through :class:`simulator.profiles.measured.Profile`,
measured or filled by the models; each line's comment says which) for the group SimAI prices with it:

- TP: ``tp`` ranks, ``min(tp, gpus_per_node)`` per node;
- DP: ``dp`` ranks, ``max(gpus_per_node / tp, 1)`` per node (one per node when TP fills a node);
- EP: ``ep`` ranks, ``min(ep, max(gpus_per_node / tp, 1))`` per node;
- PP: one send between two nodes (``send_recv``, 1 rank per node), or inside one when ``pp`` stages fit
  in a node beside TP;

at one message size (``size``, default 256 MiB: SimAI applies one busbw at every size).  A value the
measurements do not give (a group shape the profile lacks, a size beyond its series) comes from the topo
model fitted to the profile, a link it never measured at its nominal rate (``--nic_gbps``, default 50 GB/s
= a 400 Gb/s NIC per GPU; ``--nvlink_gbps`` / ``--gpu_type``); each such value is said in its comment and
in a warning line (before: a one-node profile priced the NIC at the fit's unit rate, 1 GB/s, and wrote a
DP busbw about 50 times too low without a word).
"""

from __future__ import annotations

from typing import Any

from simulator.profiles.measured import EXTRAPOLATED, FROM_MEASUREMENTS, Answer, Profile
from utils.errors import ConfigError
from utils.units import GIB, busbw_factor

KEYS = (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
        ("alltoall", "all_to_all"))

DEFAULT_NIC_GBPS = 50.0
"""A 400 Gb/s NIC per GPU in GB/s (``calibrate``'s default nominal NIC rate too)."""


def busbw_yaml(profile: Profile, tp: int, dp: int | None, ep: int | None, pp: int | None, gpus_per_node: int,
               size: int = 256 << 20, name: str | None = None, nvlink_gbps: float | None = None,
               nic_gbps: float | None = DEFAULT_NIC_GBPS, warnings: list[str] | None = None) -> str:
    """The text of a busbw.yaml for a layout (see the module docstring).

    A group the profile has no series for is priced by the topo model fitted to the profile; a link the
    profile never measured (the NIC of a one-node profile) then runs at its nominal rate (``nvlink_gbps``,
    ``nic_gbps``: GB/s per GPU per direction) times the topo model's efficiency.  Every value that did not
    come from measurements is said: its comment in the file, and one line appended to ``warnings`` naming
    the missing points and the model (a nominal rate needed and not given is a :class:`ConfigError`)."""
    assert profile.network is not None
    per_node_dp = max(gpus_per_node // tp, 1)
    groups = {
        "TP": (tp, min(tp, gpus_per_node)),
        "DP": (dp, min(dp, per_node_dp)) if dp else None,
        "EP": (ep, min(ep, per_node_dp)) if ep else None,
    }
    device = profile.network.device
    lines = [name or f"{device}_tp{tp}" + (f"_dp{dp}" if dp else "") + (f"_ep{ep}" if ep else ""),
             f"# written by python -m profiling simai-busbw from network profile {device} ({profile.root})",
             f"# values are busbw in GiB/s (SimAI divides bytes by 2^30) at {size} bytes; nccl-tests' GB/s = value x 1.073741824"]
    said = warnings if warnings is not None else []

    def ask(section: str, kind: str, n: int, rpn: int) -> Answer:
        answer = _answer(profile, kind, size, n, rpn, nvlink_gbps, nic_gbps)
        if answer.source not in FROM_MEASUREMENTS:
            said.append(_extrapolation_note(profile, section, kind, size, n, rpn, answer, nvlink_gbps, nic_gbps))
        return answer

    for section, group in groups.items():
        lines.append(f"{section}:")
        for key, kind in KEYS:
            if group is None or group[0] < 2:
                lines.append(f"{key},: null")
                continue
            n, rpn = group
            answer = ask(section, kind, n, rpn)
            busbw = size / answer.time_s * busbw_factor(kind, n) / GIB
            lines.append(f"# {kind} over {n} ranks, {rpn} per node: {answer.source} ({answer.detail})")
            lines.append(f"{key},: {busbw:.2f}")
    lines.append("PP:")
    if pp is not None and pp > 1:
        inside = tp * pp <= gpus_per_node
        answer = ask("PP", "send_recv", 2, 2 if inside else 1)
        lines.append(f"# send_recv {'inside a node' if inside else 'between two nodes'}: {answer.source} ({answer.detail})")
        lines.append(f"busbw: {size / answer.time_s / GIB:.2f}")
    else:
        lines.append("busbw: null")
    return "\n".join(lines) + "\n"


def _answer(profile: Profile, kind: str, size: int, n: int, rpn: int, nvlink_gbps: float | None,
            nic_gbps: float | None) -> Answer:
    """The profile's answer for one group, on a two-tier shape at the nominal rates given (the profile's
    fit replaces every rate it measured; only an unmeasured one keeps its nominal rate)."""
    from simulator.profiles.fit import UNIT_BPS, fit_shape

    assert profile.network is not None
    servers = max(n // max(rpn, 1), 1)
    cal = profile.network.calibration
    need_nv = cal.nvlink_gbps is None and (rpn > 1 or kind == "send_recv" and servers == 1)
    need_nic = cal.nic_gbps is None and servers > 1
    missing = [flag for flag, needed, given in (("--nvlink_gbps or --gpu_type", need_nv, nvlink_gbps),
                                                ("--nic_gbps", need_nic, nic_gbps)) if needed and not given]
    if missing:
        raise ConfigError(f"network profile {profile.network.device} measured no "
                          f"{'intra-node' if need_nv else 'inter-node'} point, which a {kind} over {n} ranks, {rpn} "
                          f"per node needs: give the link's nominal rate ({' and '.join(missing)})")
    shape = fit_shape(n, rpn, nvlink_Bps=(nvlink_gbps or UNIT_BPS / 1e9) * 1e9, nic_Bps=(nic_gbps or UNIT_BPS / 1e9) * 1e9)
    return profile.network.answer(kind, size, n, rpn, shape)[0]


def _extrapolation_note(profile: Profile, section: str, kind: str, size: int, n: int, rpn: int, answer: Answer,
                        nvlink_gbps: float | None, nic_gbps: float | None) -> str:
    """One line: which value is not the measurements', what the profile lacks and which model filled it."""
    from simulator.topo.collectives import NIC_EFFICIENCY, NVLINK_EFFICIENCY

    assert profile.network is not None
    cal = profile.network.calibration
    servers = max(n // max(rpn, 1), 1)
    what = f"{section} {kind} over {n} ranks, {rpn} per node, at {size} bytes"
    if answer.source == EXTRAPOLATED:
        return f"{what}: {answer.detail} (extrapolated from the measured series by the topo model)"
    lacks = []
    if kind not in profile.network.series:
        lacks.append(f"the profile has no {kind} points")
    if servers > 1 and cal.nic_gbps is None:
        lacks.append(f"no inter-node point (every series has ranks_per_node = ranks): the NIC is taken at a nominal "
                     f"{nic_gbps:g} GB/s x {NIC_EFFICIENCY:.2f} (--nic_gbps)")
    if (rpn > 1 or servers == 1) and cal.nvlink_gbps is None:
        lacks.append(f"no intra-node point: NVLink is taken at a nominal {nvlink_gbps:g} GB/s x {NVLINK_EFFICIENCY:.3f}")
    lacking = "; ".join(lacks) or f"no series of {n} ranks with {rpn} per node"
    return (f"{what}: not measured, priced by the topo model (NCCL's ring/tree costs with the links and latency "
            f"fitted to {profile.network.device}): {lacking}")


def profile_compute_file(job: Any, profile: Profile) -> Any:
    """An AIOB compute file for ``job`` (AICB's sections, our backward sections, ``param_time``), each
    section the sum of its items' times from the profile (the compute model where the profile lacks an
    operation); labels say how many came from measurements."""
    from mocked_model.aiob.compute_file import ComputeFile, SectionTimes
    from mocked_model.aiob.layout import OPTIMIZER_SECTION, optimizer_item, section_items, stage_chunks

    assert profile.compute is not None
    backward: dict[str, float] = {}
    sections: dict[str, float] = {}
    sources: dict[str, set[str]] = {}
    for (fwd, bwd), phases in section_items(job).items():
        for phase, items in phases.items():
            answers = [profile.kernel_time(item) for item in items]
            us = sum(a.time_s for a in answers if a.time_s == a.time_s) * 1e6
            name = fwd if phase == "forward" else bwd
            (sections if phase == "forward" else backward).setdefault(name, us)
            sources.setdefault(name, set()).update(a.source for a in answers)
    sections.update(backward)
    optimizer = profile.kernel_time(optimizer_item(job, stage_chunks(job)))
    sections[OPTIMIZER_SECTION] = optimizer.time_s * 1e6
    sources[OPTIMIZER_SECTION] = {optimizer.source}
    gpu = profile.compute.gpu.name if profile.compute.gpu is not None else "none"
    measured = sum(1 for s in sources.values() if s <= set(FROM_MEASUREMENTS))
    out = ComputeFile(iterations=1, labels={
        "compute_source": f"profile {profile.compute.sku}",
        "device": f"{profile.compute.sku} (profile {profile.root}; compute model {gpu} where it has no row)",
        "dtype": job.training.dtype,
        "sources": f"{measured} of {len(sections)} sections wholly from measurements",
    })
    for name, us in sections.items():
        label = "+".join(sorted(sources[name]))
        out.sections[name] = SectionTimes(us, us, us, f"profile: {label}")
    return out
