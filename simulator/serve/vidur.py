"""Vidur's profiling data in and out (issue 27, item 5): a Vidur-layout profile as a serving replica's step costs,
and our compute model and topology written in Vidur's layout.

Vidur's layout and columns (microsoft/vidur, commit 7d47513: ``vidur/config/config.py``
``BaseExecutionTimePredictorConfig``, ``vidur/profiling/{mlp,attention,collectives}``), times in milliseconds:

- ``compute/<sku>/<model>/mlp.csv``: ``time_stats.<op>.{min,max,mean,median,std}`` for the ops ``emb``,
  ``input_layernorm``, ``attn_pre_proj``, ``attn_rope``, ``attn_post_proj``, ``post_attention_layernorm``,
  ``mlp_up_proj``, ``mlp_act``, ``mlp_down_proj``, ``add``, keyed by ``n_head, n_kv_head, n_embd, n_expanded_embd,
  vocab_size, use_gated_mlp, num_tokens, num_tensor_parallel_workers`` (one layer, one GPU);
- ``compute/<sku>/<model>/attention.csv``: ``time_stats.attn_{prefill,decode,kv_cache_save}.*`` keyed by ``n_embd,
  n_q_head, n_kv_head, block_size, num_tensor_parallel_workers, max_model_len, batch_size, prefill_chunk_size,
  kv_cache_size, is_prefill, attention_backend`` (a decode row has ``prefill_chunk_size`` 0; a prefill row batch 1);
- ``network/<device>/all_reduce.csv`` and ``send_recv.csv`` (Vidur's names; ``allreduce.csv`` is accepted too):
  ``time_stats.{all_reduce,send_recv}.*`` keyed by ``rank, num_workers, size, collective, devices_per_node,
  max_devices_per_node`` (size in bytes; a leading unnamed index column, as pandas writes it).

Reading (:func:`read_profile`, :class:`VidurStepCost`): the rows of the replica's model (Vidur's filters: the
dimensions, ``use_gated_mlp`` and the TP size; ``block_size`` 16; all-reduce rows of ``num_workers = devices_per_node
= tp``; send/recv rows of 1 device per node across nodes, else 2).  Vidur trains a random forest per operation; we
interpolate instead: each MLP-side op linearly in ``num_tokens`` between measured counts (extended along the end
segments), all-reduce and send/recv linearly in bytes, decode attention as a least-squares line in the aggregates
``a + b x batch + c x (batch x kv_cache_size)`` (the cache a decode step reads) and prefill attention as ``a + w x
pairs`` with ``pairs = chunk x kv_cache_size + chunk^2 / 2`` (the causal score pairs: the engine's
``prefill_attention``).  A step composes as Vidur's ``ExecutionTime`` does: per layer the attention's pre/post
projections, rope, KV-cache save, decode and prefill attention, the MLP's up/act/down, both norms, the residual add
and two TP all-reduces (each plus Vidur's ``nccl_cpu_launch_overhead_ms`` 0.02), times the layers, plus one send per
pipeline boundary; decode attention x 1.1 with more than one sequence and prefill attention x 1.1 with more than one
prefill (Vidur's ``attention_*_batching_overhead_fraction`` 0.1); token counts rounded up to a multiple of 8 (its
``_total_num_tokens_rounded``).  Vidur leaves out the embedding, the LM head and sampling, and (by default,
``skip_cpu_overhead_modeling``) host time: so do we, so that a profile prices a step as Vidur would.  KV capacity
and transfers come from our memory model and topology (a profile holds neither).

Writing (:func:`write_profile`, ``python -m simulator.serve.vidur export``): our compute model's price of each op of
a dense model's layer at Vidur's token counts, its attention laws over a (batch, cache) and (chunk, cache) grid, and
the topology's NCCL costs per group and size, in Vidur's columns, so that Vidur can simulate GPUs nobody profiled.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from utils.errors import ConfigError, FormatError

MLP_OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
           "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
LAYER_OPS = MLP_OPS[1:]
"""The per-layer ops Vidur's ``ExecutionTime`` sums (``emb`` is profiled but not used)."""
MLP_KEYS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp", "num_tokens",
            "num_tensor_parallel_workers")
ATTENTION_OPS = ("attn_prefill", "attn_decode", "attn_kv_cache_save")
ATTENTION_KEYS = ("n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers", "max_model_len",
                  "batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill", "attention_backend")
NETWORK_KEYS = ("rank", "num_workers", "size", "collective", "devices_per_node", "max_devices_per_node")
STATS = ("min", "max", "mean", "median", "std")
BLOCK_SIZE = 16
"""Vidur's (and vLLM's) KV block size, the attention rows Vidur's predictor keeps."""
NCCL_CPU_LAUNCH_MS = 0.02
"""Vidur's ``nccl_cpu_launch_overhead_ms`` default, added to every TP all-reduce."""
BATCHING_OVERHEAD = 0.1
"""Vidur's ``attention_decode_batching_overhead_fraction`` and ``attention_prefill_batching_overhead_fraction``."""
TOKEN_ROUNDING = 8
"""Vidur rounds a batch's token count up to a multiple of 8 before looking the linear ops up."""


# ---- reading -------------------------------------------------------------------------------------------------------

def _read(path: str, required: Sequence[str]) -> list[dict[str, str]]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise FormatError(path, f"missing column {missing[0]!r} (Vidur's {os.path.basename(path)} layout)")
            return list(reader)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise FormatError(path, f"not a text file (expected Vidur's {os.path.basename(path)} CSV)") from None
    except csv.Error as exc:
        raise FormatError(path, f"not a CSV file ({exc})") from None


def _num(path: str, line: int, row: dict[str, str], column: str) -> float:
    try:
        value = float(row[column])
    except (TypeError, ValueError):
        raise FormatError(path, f"column {column!r} must be a number, got {row.get(column)!r}", line=line) from None
    if not 0 <= value < math.inf:
        raise FormatError(path, f"column {column!r} must be a finite number >= 0, got {row[column]!r}", line=line)
    return value


def _true(text: str) -> bool:
    return str(text).strip().lower() in ("true", "1", "1.0")


class _Series:
    """A measured time (seconds) against one variable, linear between points and along the end segments beyond."""

    def __init__(self, points: dict[float, float], what: str) -> None:
        if not points:
            raise ConfigError(f"no profile rows for {what}")
        self.x = sorted(points)
        self.y = [points[x] for x in self.x]
        self.what = what

    def __call__(self, x: float) -> float:
        xs, ys = self.x, self.y
        if len(xs) == 1:
            return ys[0] * (x / xs[0] if xs[0] else 1.0)
        i = min(max(bisect_left(xs, x), 1), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return max(y0 + (x - x0) * (y1 - y0) / (x1 - x0), 0.0)


def _lstsq(rows: list[list[float]], y: list[float], what: str) -> list[float]:
    import numpy as np

    if len(rows) < len(rows[0]) if rows else True:
        raise ConfigError(f"too few profile rows for {what} ({len(rows)})")
    coef, *_ = np.linalg.lstsq(np.array(rows, dtype=float), np.array(y, dtype=float), rcond=None)
    return [float(c) for c in coef]


@dataclass(frozen=True)
class VidurProfile:
    """One model's rows of a Vidur-layout profile at one TP size, as functions (seconds)."""

    ops: dict[str, _Series]
    decode: tuple[float, float, float]
    """Decode attention per layer: ``a + b x batch + c x (batch x kv)`` seconds."""
    prefill: tuple[float, float]
    """Prefill attention per layer: ``a + w x pairs`` seconds."""
    kv_save: _Series | None
    all_reduce: _Series | None
    send_recv: _Series | None
    source: str


def _find_model_folder(root: str, sku: str, dims: dict[str, Any]) -> str:
    """The folder under ``compute/<sku>/`` whose mlp.csv holds rows of the model's dimensions."""
    base = os.path.join(root, "compute", sku)
    if not os.path.isdir(base):
        raise ConfigError(f"{root}: no compute/{sku}/ folder (Vidur's layout: compute/<sku>/<model>/mlp.csv)")
    for folder, _dirs, files in sorted(os.walk(base)):
        if "mlp.csv" in files:
            path = os.path.join(folder, "mlp.csv")
            for row in _read(path, MLP_KEYS):
                if all(str(row[k]).strip().lower() == str(v).lower() for k, v in dims.items()):
                    return folder
    raise ConfigError(f"{base}: no mlp.csv holds the model ({', '.join(f'{k} {v}' for k, v in dims.items())})")


def read_profile(root: str | os.PathLike, sku: str, model: Any, tp: int, network_device: str | None = None,
                 multi_node: bool = False) -> VidurProfile:
    """The rows of ``model`` (an :class:`~utils.inference_config.InferenceModel`, dense GQA) at TP ``tp`` from a
    Vidur-layout profile under ``root`` (``compute/<sku>/<any folder>/mlp.csv`` whose rows match the model, its
    ``attention.csv``, and ``network/<network_device>/all_reduce.csv`` / ``send_recv.csv``; ``network_device`` None:
    the first folder under ``network/`` named after the sku, e.g. ``h100_dgx``)."""
    root = os.fspath(root)
    if model.attention != "gqa" or model.is_moe:
        raise ConfigError(f"{model.name}: Vidur's profiles describe dense GQA/MHA models (no MLA, no experts)")
    dims = dict(n_head=model.num_heads, n_kv_head=model.num_kv_heads, n_embd=model.hidden_size,
                n_expanded_embd=model.dense_ffn, vocab_size=model.vocab_size, use_gated_mlp=model.gated_mlp)
    folder = _find_model_folder(root, sku, dims)
    mlp_path = os.path.join(folder, "mlp.csv")
    cols = [f"time_stats.{op}.median" for op in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj",
                                                  "mlp_act")]
    points: dict[str, dict[float, float]] = {op: {} for op in LAYER_OPS}
    for line, row in enumerate(_read(mlp_path, MLP_KEYS + tuple(cols)), start=2):
        if not all(str(row[k]).strip().lower() == str(v).lower() for k, v in dims.items()):
            continue
        if int(_num(mlp_path, line, row, "num_tensor_parallel_workers")) != tp:
            continue
        n = _num(mlp_path, line, row, "num_tokens")
        for op in LAYER_OPS:
            column = f"time_stats.{op}.median"
            if column in row and row[column] not in ("", None):
                points[op][n] = _num(mlp_path, line, row, column) * 1e-3
    if not points["mlp_up_proj"]:
        raise ConfigError(f"{mlp_path}: no rows of {model.name} at num_tensor_parallel_workers {tp}")
    ops = {op: _Series(p, f"{op} in {mlp_path}") for op, p in points.items() if p}
    decode, prefill, kv_save = _attention(os.path.join(folder, "attention.csv"), model, tp)
    all_reduce = send_recv = None
    net_root = os.path.join(root, "network")
    if network_device is None and os.path.isdir(net_root):
        named = sorted(d for d in os.listdir(net_root) if d.lower().startswith(sku.lower()))
        network_device = named[0] if named else None
    if network_device is not None:
        folder_net = os.path.join(net_root, network_device)
        if not os.path.isdir(folder_net):
            raise ConfigError(f"{root}: no network/{network_device}/ folder")
        if tp > 1:
            ar = next((os.path.join(folder_net, n) for n in ("all_reduce.csv", "allreduce.csv")
                       if os.path.isfile(os.path.join(folder_net, n))), None)
            if ar is None:
                raise ConfigError(f"{folder_net}: no all_reduce.csv (needed for tp {tp})")
            all_reduce = _network(ar, "all_reduce", lambda r: int(float(r["num_workers"])) == tp
                                  and int(float(r["devices_per_node"])) == tp)
        sr = os.path.join(folder_net, "send_recv.csv")
        if os.path.isfile(sr):
            per_node = 1 if multi_node else 2
            send_recv = _network(sr, "send_recv", lambda r: int(float(r["devices_per_node"])) == per_node)
    elif tp > 1:
        raise ConfigError(f"{root}: no network/<device>/all_reduce.csv for tp {tp} (give the network device)")
    return VidurProfile(ops, decode, prefill, kv_save, all_reduce, send_recv, f"Vidur-layout profile {folder}")


def _attention(path: str, model: Any, tp: int) -> tuple[tuple[float, float, float], tuple[float, float], _Series | None]:
    cols = ("n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers", "batch_size",
            "prefill_chunk_size", "kv_cache_size")
    dec_x, dec_y, pre_x, pre_y = [], [], [], []
    save: dict[float, float] = {}
    for line, row in enumerate(_read(path, cols), start=2):
        key = (int(_num(path, line, row, "n_embd")), int(_num(path, line, row, "n_q_head")),
               int(_num(path, line, row, "n_kv_head")), int(_num(path, line, row, "block_size")),
               int(_num(path, line, row, "num_tensor_parallel_workers")))
        if key != (model.hidden_size, model.num_heads, model.num_kv_heads, BLOCK_SIZE, tp):
            continue
        batch, chunk = _num(path, line, row, "batch_size"), _num(path, line, row, "prefill_chunk_size")
        kv = _num(path, line, row, "kv_cache_size")
        if chunk == 0:
            column = "time_stats.attn_decode.median"
            if row.get(column) not in (None, ""):
                dec_x.append([1.0, batch, batch * kv])
                dec_y.append(_num(path, line, row, column) * 1e-3)
        else:
            column = "time_stats.attn_prefill.median"
            if row.get(column) not in (None, ""):
                pre_x.append([1.0, chunk * kv + chunk * chunk / 2])
                pre_y.append(_num(path, line, row, column) * 1e-3)
        column = "time_stats.attn_kv_cache_save.median"
        if row.get(column) not in (None, ""):
            save[max(chunk, batch)] = _num(path, line, row, column) * 1e-3
    decode = _lstsq(dec_x, dec_y, f"decode attention in {path}")
    prefill = _lstsq(pre_x, pre_y, f"prefill attention in {path}")
    return (decode[0], decode[1], decode[2]), (prefill[0], prefill[1]), (_Series(save, path) if save else None)


def _network(path: str, kind: str, keep) -> _Series:
    column = f"time_stats.{kind}.median"
    points = {}
    for line, row in enumerate(_read(path, ("num_workers", "size", "devices_per_node", column)), start=2):
        if row.get("collective", kind) in (kind, "") and keep(row):
            points[_num(path, line, row, "size")] = _num(path, line, row, column) * 1e-3
    return _Series(points, f"{kind} in {path}")


class VidurStepCost:
    """A replica's step cost from a Vidur-layout profile (see the module docstring); KV capacity and transfer from
    ``kv`` (our :class:`~simulator.serve.cost.ModelStepCost` of the same layout)."""

    def __init__(self, profile: VidurProfile, job: Any, kv: Any) -> None:
        self.profile, self.job, self._kv = profile, job, kv
        self.kv_bytes_per_token = kv.kv_bytes_per_token
        self.kv_capacity_tokens = kv.kv_capacity_tokens
        self.replica_gpus = kv.replica_gpus
        self.tokens_per_decode_step = 1.0
        self._layers = job.model.num_layers
        self._hidden = job.model.hidden_size

    def step_s(self, step: Any) -> float:
        p = self.profile
        tokens = step.prefill_tokens + step.decode_seqs
        if tokens == 0:
            return 0.0
        rounded = -(-tokens // TOKEN_ROUNDING) * TOKEN_ROUNDING
        block = sum(series(rounded) for series in p.ops.values())
        if p.kv_save is not None:
            block += p.kv_save(tokens)
        if step.decode_seqs:
            a, b, c = p.decode
            block += (a + b * step.decode_seqs + c * step.decode_context) * (1 + BATCHING_OVERHEAD * (step.decode_seqs > 1))
        if step.prefill_tokens:
            a, w = p.prefill
            block += (a + w * step.prefill_attention) * (1 + BATCHING_OVERHEAD * (step.prefill_seqs > 1))
        if self.job.tp > 1 and p.all_reduce is not None:
            block += 2 * (p.all_reduce(2 * self._hidden * rounded) + NCCL_CPU_LAUNCH_MS * 1e-3)
        total = block * self._layers
        if self.job.pp > 1 and p.send_recv is not None:
            total += (self.job.pp - 1) * p.send_recv(2 * self._hidden * rounded)
        return total

    def kv_transfer_s(self, tokens: int, src_replica: int = 0, dst_replica: int = 1) -> float:
        return self._kv.kv_transfer_s(tokens, src_replica, dst_replica)


def vidur_cost_model(root: str | os.PathLike, model: Any, gpu: str, topology: Any = None, tp: int = 1, pp: int = 1,
                     *, sku: str | None = None, network_device: str | None = None, options: Any = None,
                     gpus: int | None = None, **kwargs: Any) -> VidurStepCost:
    """:class:`VidurStepCost` of ``model`` on ``gpu`` at TP ``tp`` and PP ``pp`` from the Vidur-layout profile under
    ``root`` (the sku defaults to the GPU's name in lower case, Vidur's ``h100``/``a100``); its KV capacity and
    transfers from :func:`simulator.serve.cost.cost_model` with the same arguments (``kwargs``: its others)."""
    from simulator.serve.cost import cost_model

    kwargs.pop("cuda_graphs", None)   # a profile's ops were timed one by one: Vidur adds no host time
    kv = cost_model(model, gpu, topology, tp=tp, pp=pp, options=options, gpus=gpus, **kwargs)
    job = kv.job
    per_server = kv.fabric.gpus_per_server
    profile = read_profile(root, sku or str(gpu).lower(), job.model, tp, network_device, job.world_size > per_server)
    return VidurStepCost(profile, job, kv)


# ---- writing -------------------------------------------------------------------------------------------------------

EXPORT_TOKENS = tuple(range(1, 129)) + tuple(range(136, 1025, 8)) + tuple(range(1088, 8193, 64))
"""``num_tokens`` of the exported mlp.csv rows."""
EXPORT_DECODE = ((1, 2, 4, 8, 16, 32, 64, 128, 256), (64, 256, 512, 1024, 2048, 4096, 8192))
"""(batch sizes, KV-cache sizes) of the exported decode attention rows."""
EXPORT_PREFILL = ((64, 128, 256, 512, 1024, 2048, 4096), (0, 512, 1024, 2048, 4096))
"""(chunk sizes, KV-cache sizes before the chunk) of the exported prefill attention rows."""
EXPORT_SIZES = tuple(2 ** k for k in range(10, 31))
"""Message sizes (bytes) of the exported all_reduce.csv and send_recv.csv rows."""
_OF_ITEM = {"input_layernorm": "input_layernorm", "qkv_proj": "attn_pre_proj", "qk_norm": "attn_pre_proj",
            "rotary_emb": "attn_rope", "o_proj": "attn_post_proj", "post_attention_layernorm": "post_attention_layernorm",
            "gate_up_proj": "mlp_up_proj", "fc1": "mlp_up_proj", "act_fn": "mlp_act", "down_proj": "mlp_down_proj",
            "fc2": "mlp_down_proj", "embed_tokens": "emb"}
"""Our item (name after ``layers.N.self_attn.`` / ``mlp.``) -> Vidur's op; the residual add is fused into our norms."""


def _stats(ms: float) -> dict[str, float]:
    return {"min": ms, "max": ms, "mean": ms, "median": ms, "std": 0.0}


def _csv_text(columns: list[str], rows: list[dict[str, Any]], index: bool = False) -> str:
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(([""] if index else []) + columns)
    for i, row in enumerate(rows):
        writer.writerow(([i] if index else []) + [row.get(c, "") for c in columns])
    return out.getvalue()


def profile_paths(root: str | os.PathLike, model_name: str, gpu: str, sku: str | None = None,
                  model_folder: str | None = None, network_device: str | None = None) -> dict[str, str]:
    """The files :func:`write_profile` writes under ``root`` (``mlp``, ``attention``, ``all_reduce``, ``send_recv``),
    each folder name checked to stay under ``root`` (``--sku`` and ``--network_device`` are one name each, the
    model folder one or more, as Vidur's ``meta-llama/Meta-Llama-3-8B``)."""
    from utils.io import OutputError, safe_name

    root = os.fspath(root)
    sku = safe_name(sku or gpu.lower(), "--sku")
    folder = model_folder or model_name
    parts = folder.split("/")
    if os.path.isabs(folder) or not all(parts):
        raise OutputError(f"--model_folder {folder!r}: expected names separated by '/', relative to -o")
    for part in parts:
        safe_name(part, "--model_folder")
    compute = os.path.join(root, "compute", sku, *parts)
    network = os.path.join(root, "network", safe_name(network_device or f"{sku}_derived", "--network_device"))
    return {"mlp": os.path.join(compute, "mlp.csv"), "attention": os.path.join(compute, "attention.csv"),
            "all_reduce": os.path.join(network, "all_reduce.csv"), "send_recv": os.path.join(network, "send_recv.csv")}


def _time_columns(ops: Sequence[str]) -> list[str]:
    return [f"time_stats.{op}.{s}" for op in ops for s in STATS]


def write_profile(root: str | os.PathLike, model_name: str, gpu: str, tps: Sequence[int] = (1, 2, 4, 8),
                  sku: str | None = None, model_folder: str | None = None, network_device: str | None = None,
                  options: Any = None, topology: Any = None) -> list[str]:
    """Write our compute model's and topology's prices of ``model_name`` on ``gpu`` in Vidur's layout under ``root``
    (``compute/<sku>/<model_folder>/{mlp,attention}.csv``, ``network/<network_device>/{all_reduce,send_recv}.csv``;
    sku default the GPU's name in lower case, model folder the model's name, network device ``<sku>_derived``).
    Returns the files written."""
    import re

    from simulator.options import TopoOptions
    from simulator.report import write_files
    from simulator.serve.cost import cost_model
    from simulator.topo.collectives import collective_cost, p2p_cost
    from utils.inference_config import resolve_model
    from utils.io import guard_output

    model = resolve_model(model_name)
    if model.attention != "gqa" or model.is_moe:
        raise ConfigError(f"{model_name}: Vidur's layout describes dense GQA/MHA models (no MLA, no experts)")
    bad = [t for t in tps if t < 1]
    if bad:
        raise ConfigError(f"--tp {bad[0]}: a TP size is a positive whole number")
    if not any(model.num_heads % t == 0 for t in tps):
        raise ConfigError(f"--tp {','.join(map(str, tps))}: none divides the {model.num_heads} attention heads of "
                          f"{model_name}")
    paths = profile_paths(root, model_name, gpu, sku, model_folder, network_device)
    for path in paths.values():  # before any work: a symbolic link or a folder where a file goes
        guard_output(path, None, "-o/--output")
    sku = sku or gpu.lower()
    options = options or TopoOptions(gpus_per_server=8)
    dims = dict(n_head=model.num_heads, n_kv_head=model.num_kv_heads, n_embd=model.hidden_size,
                n_expanded_embd=model.dense_ffn, vocab_size=model.vocab_size, use_gated_mlp=model.gated_mlp)
    mlp_rows, attention_rows, ar_rows, sr_rows = [], [], [], []
    written: list[str] = []
    layer_name = re.compile(r"^layers\.\d+\.(self_attn\.|mlp\.)?")
    for tp in tps:
        if model.num_heads % tp:
            continue
        cost = cost_model(model_name, gpu, topology, tp=tp, options=options, host=False, memo="exact",
                          gpus=None if topology is not None else 2 * (options.gpus_per_server or 8))
        estimate = cost._estimate(0.0)
        for n in EXPORT_TOKENS:
            times = dict.fromkeys(MLP_OPS, 0.0)
            for rows in cost._keys(cost._job("decode", n)):
                for key, item, _count in rows:
                    if not item.is_computation:
                        continue
                    op = _OF_ITEM.get(layer_name.sub("", str((item.meta or {}).get("name", ""))))
                    if op is not None and (key[0] == 1 or op == "emb"):   # one layer (the first group), the embedding
                        times[op] += (estimate(item) or 0.0) * 1e-6
            row = {**dims, "num_tokens": n, "num_tensor_parallel_workers": tp}
            for op, ms in times.items():
                row.update({f"time_stats.{op}.{s}": v for s, v in _stats(ms).items()})
            mlp_rows.append(row)
        a = cost._attention[0][0]
        common = dict(n_embd=model.hidden_size, n_q_head=model.num_heads, n_kv_head=model.num_kv_heads,
                      block_size=BLOCK_SIZE, num_tensor_parallel_workers=tp, max_model_len=max(EXPORT_DECODE[1]) * 2,
                      attention_backend="model")
        for batch in EXPORT_DECODE[0]:
            for kv in EXPORT_DECODE[1]:
                ms = cost._attention_s(a, batch, batch * kv, 1, 0, 0.0, 0.0, 0.0) * 1e3
                attention_rows.append({**common, "batch_size": batch, "prefill_chunk_size": 0, "kv_cache_size": kv,
                                       "is_prefill": False, **{f"time_stats.attn_decode.{s}": v
                                                               for s, v in _stats(ms).items()}})
        for chunk in EXPORT_PREFILL[0]:
            for kv in EXPORT_PREFILL[1]:
                blocks = -(-chunk // 128)
                ms = cost._attention_s(a, 0, 0.0, 1, chunk, chunk * kv + chunk * chunk / 2.0, blocks, 0.0) * 1e3
                attention_rows.append({**common, "batch_size": 1, "prefill_chunk_size": chunk, "kv_cache_size": kv,
                                       "is_prefill": True, **{f"time_stats.attn_prefill.{s}": v
                                                              for s, v in _stats(ms).items()}})
        if tp > 1:
            shape = cost.fabric.group_shape(list(range(tp)))
            for size in EXPORT_SIZES:
                ms = collective_cost("all_reduce", size, shape, cost.links).time_s * 1e3
                ar_rows.append({"rank": 0, "num_workers": tp, "size": size, "collective": "all_reduce",
                                "devices_per_node": tp, "max_devices_per_node": cost.fabric.gpus_per_server,
                                **{f"time_stats.all_reduce.{s}": v for s, v in _stats(ms).items()}})
        if tp == max(t for t in tps if model.num_heads % t == 0):
            fabric = cost.fabric
            for per_node, peer in ((2, 1), (1, fabric.gpus_per_server)):
                if peer >= fabric.gpus:
                    continue
                route = fabric.p2p_shape(0, peer)
                for size in EXPORT_SIZES:
                    ms = p2p_cost(size, route.same_server, route.bottleneck_Bps, route.latency_s, cost.links,
                                  route.congestion).time_s * 1e3
                    sr_rows.append({"rank": 0, "num_workers": 2, "size": size, "collective": "send_recv",
                                    "devices_per_node": per_node, "max_devices_per_node": fabric.gpus_per_server,
                                    **{f"time_stats.send_recv.{s}": v for s, v in _stats(ms).items()}})
    contents = {paths["mlp"]: _csv_text(_time_columns(MLP_OPS) + list(MLP_KEYS), mlp_rows),
                paths["attention"]: _csv_text(_time_columns(("attn_prefill", "attn_decode")) + list(ATTENTION_KEYS),
                                              attention_rows)}
    if ar_rows:
        contents[paths["all_reduce"]] = _csv_text(_time_columns(("all_reduce",)) + list(NETWORK_KEYS), ar_rows, True)
    if sr_rows:
        contents[paths["send_recv"]] = _csv_text(_time_columns(("send_recv",)) + list(NETWORK_KEYS), sr_rows, True)
    written.extend(write_files(contents))  # all of them or none
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simulator.serve.vidur export --model_name NAME --gpu_type GPU [--tp 1,2,4,8] -o DIR``."""
    from utils.cli_types import positive_int

    parser = argparse.ArgumentParser(prog="python -m simulator.serve.vidur",
                                     description="Write the compute model's and topology's prices in Vidur's profile "
                                                 "layout (compute/<sku>/<model>/{mlp,attention}.csv, "
                                                 "network/<device>/{all_reduce,send_recv}.csv).")
    parser.add_argument("command", choices=("export",))
    parser.add_argument("--model_name", required=True, help="a dense model (llama3_8B, llama2_70B, qwen3_32B, ...)")
    parser.add_argument("--gpu_type", required=True, help="a GPU of the compute model's table (H100, H200, B200, ...)")
    parser.add_argument("--tp", default="1,2,4,8", help="TP sizes, comma-separated (default 1,2,4,8)")
    parser.add_argument("--sku", default=None, help="Vidur's device folder (default: the GPU in lower case)")
    parser.add_argument("--model_folder", default=None, help="the model's folder (Vidur's: the HF name, e.g. "
                        "meta-llama/Meta-Llama-3-8B; default the model name)")
    parser.add_argument("--network_device", default=None, help="network folder (default <sku>_derived)")
    parser.add_argument("-g_p_s", "--gpus_per_server", type=positive_int, default=8)
    parser.add_argument("-o", "--output", required=True, help="the profile's root folder")
    args = parser.parse_args(argv)
    from simulator.options import TopoOptions
    from utils.inference_config import resolve_model

    try:
        tps = tuple(dict.fromkeys(positive_int(t) for t in args.tp.split(",")))
    except argparse.ArgumentTypeError:
        raise ConfigError(f"--tp {args.tp!r}: expected positive whole numbers separated by commas") from None
    heads = resolve_model(args.model_name).num_heads
    skipped = [t for t in tps if heads % t]
    if skipped and len(skipped) < len(tps):
        print(f"python -m simulator.serve.vidur: note: --tp {','.join(map(str, skipped))} left out: it does not divide "
              f"the {heads} attention heads of {args.model_name}", file=sys.stderr)
    paths = write_profile(args.output, args.model_name, args.gpu_type, tps, args.sku, args.model_folder,
                          args.network_device, TopoOptions(gpus_per_server=args.gpus_per_server))
    print("wrote " + ", ".join(paths))
    return 0


if __name__ == "__main__":
    from utils.cli import run_main

    run_main(lambda: main(sys.argv[1:]), "python -m simulator.serve.vidur")
