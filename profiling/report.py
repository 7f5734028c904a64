"""What ``calibrate`` and ``show`` print: the fit of the topo model to a network profile, with the
residual of every measured size, and what a database holds."""

from __future__ import annotations

import json
import os
from typing import Any

from simulator.profiles import db as profile_db
from simulator.profiles.fit import Calibration, SeriesFit, calibrate, fit_shape, model_time, points_of, series_fits


def calibration_text(device: str, tables: dict, nvlink_nominal_gbps: float | None, nic_nominal_gbps: float | None,
                     cal: Calibration | None = None, fits: list[SeriesFit] | None = None) -> str:
    cal = cal or calibrate(points_of(tables))
    fits = fits if fits is not None else series_fits(tables)
    nv_eff, nic_eff = cal.efficiencies(nvlink_nominal_gbps, nic_nominal_gbps)
    lines = [f"calibration of network profile {device}: {len(cal.points)} measured points, {cal.iterations} iterations, "
             f"root-mean-square error {cal.rms_pct:.2f}%",
             "  the topo model (NCCL's ring/tree/LL/LL128/Simple costs, simulator.topo.collectives) fitted to every point:"]

    def link(label: str, gbps: float | None, eff: float | None, nominal: float | None, flag: str) -> None:
        if gbps is None:
            lines.append(f"    {label:<26} not measured (no point depends on it)")
            return
        tail = (f" = {flag} {eff:.3f} of {nominal:g} GB/s nominal" if eff is not None
                else f" (give the nominal rate to see it as {flag})")
        lines.append(f"    {label:<26} {gbps:10.3f} GB/s{tail}")

    link("intra-node busbw (NVLink)", cal.nvlink_gbps, nv_eff, nvlink_nominal_gbps, "--nvlink_efficiency")
    link("NIC busbw per GPU", cal.nic_gbps, nic_eff, nic_nominal_gbps, "--nic_efficiency")
    lines.append(f"    {'latency scale':<26} {cal.latency_scale:10.3f} x NCCL's latencies = --latency_scale "
                 f"{cal.latency_scale:.3f}")
    flags = [f"--latency_scale {cal.latency_scale:.3g}"]
    if nv_eff is not None:
        flags.insert(0, f"--nvlink_efficiency {min(nv_eff, 1.0):.3g}")
    if nic_eff is not None:
        flags.insert(1 if nv_eff is not None else 0, f"--nic_efficiency {min(nic_eff, 1.0):.3g}")
    lines.append(f"  simulator flags for a topology with these nominal rates: {' '.join(flags)}")
    lines.append("  (or simulate with --profile and --network_device: measured points first, this fit behind them)")
    lines.append("")
    lines.append("per series: nccl-tests' line time = alpha + size x factor / busbw, and the fitted topo model; "
                 "residual = (fit - measured) / measured")
    shape_links = {}
    for fit in fits:
        key = (fit.ranks, fit.ranks_per_node)
        if key not in shape_links:
            shape_links[key] = cal.links(None, fit_shape(*key))
        line = (f"  {fit.kind}, {fit.ranks} ranks, {fit.ranks_per_node} per node "
                f"({fit.ranks // fit.ranks_per_node} node{'s' if fit.ranks // fit.ranks_per_node > 1 else ''}): ")
        line += (f"alpha {fit.alpha_us:.3f} us, busbw {fit.busbw_gbps:.3f} GB/s" if fit.busbw_gbps is not None
                 else "alpha-beta line not determined (fewer than 2 sizes, or times falling with size)")
        lines.append(line)
        lines.append(f"    {'size_bytes':>14} {'measured_us':>13} {'alpha-beta_us':>14} {'resid%':>8} {'topo_model_us':>14} "
                     f"{'resid%':>8}")
        for size, measured, fitted, resid in zip(fit.sizes, fit.measured_us, fit.fitted_us, fit.residuals_pct()):
            model_us = model_time(fit.kind, size, *shape_links[key]) * 1e6
            lines.append(f"    {size:>14} {measured:>13.3f} {fitted:>14.3f} {resid:>8.2f} {model_us:>14.3f} "
                         f"{(model_us - measured) / measured * 100:>8.2f}")
    return "\n".join(lines)


def calibration_json(device: str, cal: Calibration, fits: list[SeriesFit], nvlink_nominal_gbps: float | None,
                     nic_nominal_gbps: float | None) -> dict[str, Any]:
    nv_eff, nic_eff = cal.efficiencies(nvlink_nominal_gbps, nic_nominal_gbps)
    return {
        "network_device": device, "points": len(cal.points), "rms_error_pct": cal.rms_pct,
        "nvlink_busbw_gbps": cal.nvlink_gbps, "nic_busbw_gbps": cal.nic_gbps, "latency_scale": cal.latency_scale,
        "nvlink_nominal_gbps": nvlink_nominal_gbps, "nic_nominal_gbps": nic_nominal_gbps,
        "nvlink_efficiency": nv_eff, "nic_efficiency": nic_eff,
        "series": [{"kind": f.kind, "ranks": f.ranks, "ranks_per_node": f.ranks_per_node, "alpha_us": f.alpha_us,
                    "busbw_gbps": f.busbw_gbps, "sizes": list(f.sizes), "measured_us": list(f.measured_us),
                    "residual_pct": f.residuals_pct()} for f in fits],
    }


def show_text(root: str) -> str:
    """What a database holds: network devices with their collectives and shapes, compute skus with their
    row counts, and each folder's profile.json."""
    lines = [f"profiling database {root}"]
    devices = profile_db.network_devices(root)
    for device in devices:
        tables = profile_db.read_network(root, device)
        meta = profile_db.read_meta(profile_db.network_dir(root, device))
        lines.append(f"  network/{device}" + (f"  ({_meta_text(meta)})" if meta else ""))
        for table in tables.values():
            series = table.series()
            shapes = ", ".join(f"{n}x{r}" for n, r in series)
            lines.append(f"    {os.path.basename(table.path):<18} {len(table.time_us):>5} rows; ranks x per node: {shapes}; "
                         f"{min(table.size_bytes)}..{max(table.size_bytes)} bytes")
    for sku in profile_db.skus(root):
        rows = profile_db.read_compute(root, sku)
        lines.append(f"  compute/{sku}: {len(rows.mlp)} mlp rows, {len(rows.attention)} attention rows "
                     f"({', '.join(os.path.relpath(p, root) for p in rows.paths)})")
        for path in sorted({os.path.dirname(p) for p in rows.paths}):
            meta = profile_db.read_meta(path)
            if meta:
                lines.append(f"    {os.path.relpath(path, root)}: {_meta_text(meta)}")
    if len(lines) == 1:
        lines.append("  (empty: no network/<device> and no compute/<sku> folders)")
    return "\n".join(lines)


def _meta_text(meta: dict[str, Any]) -> str:
    keys = ("backend", "device", "world_size", "ranks_per_node", "dtype", "torch", "date")
    return ", ".join(f"{k} {meta[k]}" for k in keys if k in meta) or json.dumps(meta)[:120]
