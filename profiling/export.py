"""Write SimAI's inputs from a profile: ``busbw.yaml`` (SimAI-analytical's ``-busbw``) and AIOB compute
files (AICB's ``--comp_filepath``, SimAI workloads' compute times).

busbw.yaml, as SimAI's analytical binary reads it (``AstraParamParse.hh``, ``UserParam::parseYaml``):
the first line is a name and is skipped; ``TP:``, ``DP:``, ``EP:`` open sections of ``allreduce,:``,
``allgather,:``, ``reducescatter,:``, ``alltoall,:`` values (the comma is part of SimAI's keys, ``null``
leaves SimAI's own value); ``PP:`` holds ``busbw:``; lines starting with ``#`` are skipped.  SimAI
divides bytes by 2^30 and by these values, so they are GiB/s: we convert nccl-tests' GB/s (1e9) and say
so in a comment.  Each value is the busbw the profile gives (through :class:`simulator.profiles.Profile`,
measured or filled by the models; each line's comment says which) for the group SimAI prices with it:

- TP: ``tp`` ranks, ``min(tp, gpus_per_node)`` per node;
- DP: ``dp`` ranks, ``max(gpus_per_node / tp, 1)`` per node (one per node when TP fills a node);
- EP: ``ep`` ranks, ``min(ep, max(gpus_per_node / tp, 1))`` per node;
- PP: one send between two nodes (``send_recv``, 1 rank per node), or inside one when ``pp`` stages fit
  in a node beside TP;

at one message size (``size``, default 256 MiB: SimAI applies one busbw at every size).
"""

from __future__ import annotations

from typing import Any

from simulator.profiles import FROM_MEASUREMENTS, Profile
from utils.units import GIB, busbw_factor

KEYS = (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
        ("alltoall", "all_to_all"))


def busbw_yaml(profile: Profile, tp: int, dp: int | None, ep: int | None, pp: int | None, gpus_per_node: int,
               size: int = 256 << 20, name: str | None = None) -> str:
    """The text of a busbw.yaml for a layout (see the module docstring)."""
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
    for section, group in groups.items():
        lines.append(f"{section}:")
        for key, kind in KEYS:
            if group is None or group[0] < 2:
                lines.append(f"{key},: null")
                continue
            n, rpn = group
            answer = profile.collective_time(kind, size, n, rpn)
            busbw = size / answer.time_s * busbw_factor(kind, n) / GIB
            lines.append(f"# {kind} over {n} ranks, {rpn} per node: {answer.source} ({answer.detail})")
            lines.append(f"{key},: {busbw:.2f}")
    lines.append("PP:")
    if pp is not None and pp > 1:
        inside = tp * pp <= gpus_per_node
        answer = profile.collective_time("send_recv", size, 2, 2 if inside else 1)
        lines.append(f"# send_recv {'inside a node' if inside else 'between two nodes'}: {answer.source} ({answer.detail})")
        lines.append(f"busbw: {size / answer.time_s / GIB:.2f}")
    else:
        lines.append("busbw: null")
    return "\n".join(lines) + "\n"


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
