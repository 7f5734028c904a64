"""``python -m profiling kernels``: the kernel sweep a GPU spec is fitted to (``python -m profiling fit-gpu``).

Every kernel is timed GPU-bound: warm-up calls, then back-to-back launches between two CUDA events (on a CPU,
``time.perf_counter_ns`` around the loop), the time per call in microseconds.  The JSON it writes is the layout
:mod:`mocked_model.compute.calibrate` reads (the first of them: ``profiling/measurements/h200/kernels.json``, from
``profiling/measurements/h200/kernels.py``, whose shapes and byte counts this sweep keeps):

- ``gemm``: bf16 ``F.linear`` at training shapes, rows ``{m, n, k, bf16_us, bf16_tflops}`` plus, on a GPU of compute
  capability 8.9 or newer, FP8 (``torch._scaled_mm``, e4m3, per-tensor scales, bf16 out): ``fp8_us, fp8_tflops,
  fp8_speedup`` and ``cast_amax_us`` (eager amax plus cast of the activation, an upper bound on a fused cast);
- ``memory_kernels``: rows ``{op, us, bytes, gbps}`` (GB/s = 10^9 B/s), ``op`` a key of
  :data:`mocked_model.compute.calibrate.MEMORY_OPS`, ``bytes`` the HBM traffic counted per :data:`MEMORY_BYTES`;
- ``sustained``: an 8192^3 bf16 GEMM looped for ``--sustained_s`` seconds, rows ``{t, tflops, smi}`` with ``smi``
  nvidia-smi's ``"SM clock MHz, power W, temperature C"`` (or torch's NVML reading; empty when neither answers);
- ``attention`` (CUDA only): torch SDPA, causal, bf16, head 128, rows ``{batch, heads, seq, head_dim, v_dim,
  causal, fwd_us, bwd_us}``, timed after the sustained GEMM (so at the sustained clock, as the fit assumes);
- ``skipped``: what was not measured and why; ``gpu``, ``device``, ``torch``, ``date``, ``command``.

torch is imported inside the functions (``python -m profiling --help`` works without it).
"""

from __future__ import annotations

import datetime
import math
import platform
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

from utils.errors import ConfigError
from utils.progress import progress, say

GEMM_SHAPES: tuple[tuple[int, int, int], ...] = (
    # the 12 (m, n, k) of profiling/measurements/h200/kernels.py
    (2048, 12288, 4096), (8192, 6144, 4096), (8192, 4096, 14336), (8192, 28672, 4096), (16384, 8192, 8192),
    (4096, 4608, 12288), (2048, 12288, 1536), (8192, 8192, 7168), (4096, 1024, 4096), (1024, 4096, 4096),
    (512, 4096, 4096), (8192, 16384, 2048),
    # more: the sustained probe's square, Llama-3-70B at TP 8 (QKV 1280, fc1 7168, fc2 k 3584), a 4096 square
    (8192, 8192, 8192), (8192, 1280, 8192), (8192, 7168, 8192), (8192, 8192, 3584), (4096, 4096, 4096),
)
"""bf16 (and FP8) GEMM shapes ``(m tokens, n outputs, k inputs)`` at training sizes."""
SUSTAINED_SHAPE = (8192, 8192, 8192)
"""The sustained clock probe's GEMM (what :func:`mocked_model.compute.calibrate.fit_gpu` fits ``gemm_eff`` to)."""
MEMORY_BYTES = {
    "copy": "2 x the bf16 tensor (read, write)",
    "add": "3 x the tensor (two reads, one write)",
    "layer_norm": "2 x the tensor", "rms_norm": "2 x the tensor", "gelu": "2 x the tensor",
    "dropout_add": "3 x the tensor + 1 byte per element (the mask)",
    "swiglu_eager": "1.5 passes of the bf16 fc1 output (calibrate.BYTE_CONVERSION makes it 2.5)",
    "swiglu_compiled": "1.5 passes of the bf16 fc1 output (read it, write half)",
    "softmax_fp32": "12 bytes per score (calibrate.BYTE_CONVERSION makes it 14)",
    "cross_entropy_fp32": "6 bytes per logit (calibrate.BYTE_CONVERSION makes it 14)",
    "rotary_eager": "20 bytes per element (the compute model's count)",
    "adam": "28 bytes per fp32 parameter (read parameter, gradient, two moments; write three)",
    "foreach": "84 bytes per fp32 parameter (torch AdamW's _foreach_ kernels, the compute model's count)",
    "mixed_add": "10 bytes per element (read fp32 and bf16, write fp32)",
    "masked_fill": "8 bytes per fp32 score (read, write; the broadcast mask is cached)",
}
"""How each memory kernel's ``bytes`` is counted (the conventions of profiling/measurements/h200/kernels.py for the
kinds it had; the compute model's counts for the others)."""
SAMPLE_S = 0.1
"""Seconds of sustained GEMMs per sample (then one nvidia-smi reading)."""
QUICK_SCALE = 32
"""``--quick`` divides every tensor dimension by this (at least 16, a multiple of 16 on a GPU, for FP8)."""
ATTENTION_SEQS = (2048, 4096, 8192)
ATTENTION_HEADS = (16, 32)
ATTENTION_TOKENS = 16384
"""Attention rows: batch x sequence = 16384 tokens, head dim 128, causal, bf16."""
CPU_NOTE = ("a CPU run: its times check the sweep and the fit, they are meaningless for a GPU spec (no FP8, no "
            "attention, no SM clock)")


class Timer:
    """Times ``fn`` GPU-bound: ``warmup`` untimed calls, then ``iters`` back-to-back calls between two CUDA events
    (``time.perf_counter_ns`` on a CPU); :meth:`us` returns microseconds per call."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch = torch
        self.cuda = device.startswith("cuda")
        self.device = device

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def us(self, fn: Callable[[], Any], iters: int, warmup: int) -> float:
        for _ in range(warmup):
            fn()
        self.sync()
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            self.sync()
            total_us = start.elapsed_time(end) * 1e3  # ms -> us
        else:
            t0 = time.perf_counter_ns()
            for _ in range(iters):
                fn()
            total_us = (time.perf_counter_ns() - t0) / 1e3
        return max(total_us, 1e-3) / iters


class Sweep:
    """One run of the sweep on one device (``quick`` shrinks every size and loop)."""

    def __init__(self, device: str, quick: bool, sustained_s: float, log: Callable[[str], None] | None = print) -> None:
        try:
            import torch
        except ImportError as exc:
            raise ConfigError(f"profiling kernels needs torch (pip install '.[torch]'): {exc}") from None
        self.torch = torch
        if device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise ConfigError(f"--device {device}: no CUDA device here (torch {torch.__version__}); use --device cpu")
            index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
            if index >= torch.cuda.device_count():
                raise ConfigError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA devices")
            device = f"cuda:{index}"
            torch.cuda.set_device(index)
        self.device = device
        self.cuda = device.startswith("cuda")
        self.quick = quick
        self.sustained_s = sustained_s
        self.log = log
        self.timer = Timer(torch, device)
        self.skipped: dict[str, str] = {}
        self.bar: Any = None
        scale_iters = 10 if quick else 1
        self.iters = {"gemm": max(3, 30 // scale_iters), "memory": max(3, 100 // scale_iters),
                      "attention": max(3, 20 // scale_iters)}
        self.warmup = 1 if quick and not self.cuda else (2 if quick else 5)

    # ---- sizes -------------------------------------------------------------------------------------------

    def dim(self, d: int) -> int:
        """A tensor dimension at this run's scale (``--quick``: / :data:`QUICK_SCALE`, >= 16, a multiple of 16)."""
        if not self.quick:
            return d
        return max(16, d // QUICK_SCALE // 16 * 16)

    # ---- the run -----------------------------------------------------------------------------------------

    def run(self, command: str) -> dict[str, Any]:
        """Measure everything; the sweep's JSON object."""
        torch = self.torch
        torch.manual_seed(0)
        out = self.header(command)
        fp8 = self.fp8_support()
        attention = self.cuda
        if not attention:
            self.skipped["attention"] = "attention rows are timed on CUDA only"
        total = len(GEMM_SHAPES) + len(MEMORY_BYTES) + 1 + (len(ATTENTION_SEQS) * len(ATTENTION_HEADS) if attention else 0)
        with progress(total=total, desc="kernels", unit="kernel") as bar:
            self.bar = bar
            self.note(f"gemm: {len(GEMM_SHAPES)} bf16 shapes{' and FP8' if fp8 else ''}")
            out["gemm"] = self.gemms(fp8)
            self.note(f"memory kernels: {', '.join(MEMORY_BYTES)}")
            out["memory_kernels"] = self.memory_kernels()
            self.note(f"sustained: {'x'.join(map(str, self.sustained_shape()))} bf16 GEMM for {self.sustained_s:g} s")
            out["sustained_shape"] = list(self.sustained_shape())
            out["sustained"] = self.sustained()
            self.free()
            if attention:
                self.note("attention: torch SDPA, causal, bf16, head 128")
                out["attention"] = self.attention()
        out["skipped"] = dict(self.skipped)
        return out

    def note(self, message: str) -> None:
        say(self.log, f"kernels: {message}")

    def step(self, label: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(label)
            self.bar.update(1)

    def header(self, command: str) -> dict[str, Any]:
        torch = self.torch
        out: dict[str, Any] = {"device": "cuda" if self.cuda else "cpu", "dtype": "bf16", "quick": self.quick}
        if self.cuda:
            props = torch.cuda.get_device_properties(self.device)
            out.update(gpu=torch.cuda.get_device_name(self.device), sms=props.multi_processor_count,
                       capability=".".join(map(str, torch.cuda.get_device_capability(self.device))),
                       memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda)
        else:
            out.update(gpu=None, cpu=platform.processor() or platform.machine(), note=CPU_NOTE)
        out.update(torch=torch.__version__, date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   command=command)
        return out

    def fp8_support(self) -> bool:
        torch = self.torch
        if not self.cuda:
            self.skipped["fp8"] = "FP8 GEMMs are timed on CUDA only"
            return False
        capability = torch.cuda.get_device_capability(self.device)
        if capability < (8, 9):
            self.skipped["fp8"] = f"compute capability {capability[0]}.{capability[1]} has no FP8 tensor cores (8.9+)"
            return False
        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            self.skipped["fp8"] = f"torch {torch.__version__} has no float8_e4m3fn / _scaled_mm"
            return False
        return True

    # ---- GEMMs ---------------------------------------------------------------------------------------------

    def gemms(self, fp8: bool) -> list[dict[str, Any]]:
        torch = self.torch
        import torch.nn.functional as F

        rows = []
        n_iter, warm = self.iters["gemm"], self.warmup
        for shape in GEMM_SHAPES:
            m, n, k = (self.dim(d) for d in shape)
            a = torch.randn(m, k, device=self.device, dtype=torch.bfloat16)
            w = torch.randn(n, k, device=self.device, dtype=torch.bfloat16)
            flops = 2 * m * n * k
            t_bf = self.timer.us(lambda a=a, w=w: F.linear(a, w), n_iter, warm)
            row: dict[str, Any] = dict(m=m, n=n, k=k, bf16_us=t_bf, bf16_tflops=flops / t_bf / 1e6)
            if fp8:
                try:
                    a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
                    one = torch.tensor(1.0, device=self.device)
                    t_f8 = self.timer.us(lambda a8=a8, w8=w8, one=one: torch._scaled_mm(
                        a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16), n_iter, warm)
                    row.update(fp8_us=t_f8, fp8_tflops=flops / t_f8 / 1e6, fp8_speedup=t_bf / t_f8)
                    row["cast_amax_us"] = self.timer.us(lambda a=a: (a.abs().amax(), a.to(torch.float8_e4m3fn)),
                                                        n_iter, warm)
                    del a8, w8
                except Exception as exc:  # noqa: BLE001 - a kernel the build lacks is recorded, not fatal
                    row["fp8_error"] = _short(exc)
                    self.skipped.setdefault("fp8", f"{m}x{n}x{k}: {_short(exc)}")
            rows.append(row)
            del a, w
            self.step(f"gemm {m}x{n}x{k}")
        self.free()
        return rows

    # ---- memory-bound kernels -------------------------------------------------------------------------------

    def memory_kernels(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        n_iter, warm = self.iters["memory"], self.warmup

        def add(op: str, fn: Callable[[], Any], nbytes: int, iters: int = n_iter) -> None:
            try:
                us = self.timer.us(fn, iters, warm)
            except Exception as exc:  # noqa: BLE001 - e.g. torch.compile without a compiler
                self.skipped[op] = _short(exc)
            else:
                rows.append(dict(op=op, us=us, bytes=int(nbytes), gbps=nbytes / us / 1e3))
            self.step(op)

        # each group in its own method, so that its tensors are freed when it returns
        for group in (self._elementwise, self._swiglu_softmax, self._rotary, self._masked_fill, self._optimizers):
            group(add, n_iter)
            self.free()
        return rows

    def _elementwise(self, add: Callable[..., None], n_iter: int) -> None:
        """copy, add, norms, GeLU, dropout plus add, fp32 += bf16 on an 8192x4096 bf16 tensor."""
        torch = self.torch
        import torch.nn.functional as F

        dev, bf16 = self.device, torch.bfloat16
        s, h = self.dim(8192), self.dim(4096)
        x = torch.randn(s, h, device=dev, dtype=bf16)
        y = torch.randn(s, h, device=dev, dtype=bf16)
        w_ln, b_ln = torch.ones(h, device=dev, dtype=bf16), torch.zeros(h, device=dev, dtype=bf16)
        nbytes = x.numel() * 2
        add("copy", lambda: x.clone(), 2 * nbytes)
        add("add", lambda: x + y, 3 * nbytes)
        add("layer_norm", lambda: F.layer_norm(x, (h,), w_ln, b_ln), 2 * nbytes)
        if hasattr(F, "rms_norm"):
            add("rms_norm", lambda: F.rms_norm(x, (h,), w_ln), 2 * nbytes)
        else:
            self.skipped["rms_norm"] = f"torch {torch.__version__} has no F.rms_norm"
            self.step("rms_norm")
        add("gelu", lambda: F.gelu(x, approximate="tanh"), 2 * nbytes)
        add("dropout_add", lambda: F.dropout(x, 0.1, True) + y, 3 * nbytes + x.numel())
        main_grad = torch.zeros(s, h, device=dev, dtype=torch.float32)
        add("mixed_add", lambda: main_grad.add_(x), 10 * x.numel())

    def _swiglu_softmax(self, add: Callable[..., None], n_iter: int) -> None:
        """SwiGLU (eager and compiled) on a Llama-3-8B fc1 output, fp32 softmax, fp32 cross entropy."""
        torch = self.torch
        import torch.nn.functional as F

        dev, bf16 = self.device, torch.bfloat16
        s, h = self.dim(8192), self.dim(4096)
        x = torch.randn(s, h, device=dev, dtype=bf16)
        nbytes = x.numel() * 2
        big = torch.randn(s, self.dim(14336) * 2, device=dev, dtype=bf16)
        half = big.shape[1] // 2
        swiglu_bytes = big.numel() * 2 + big.numel()
        add("swiglu_eager", lambda: F.silu(big[:, :half]) * big[:, half:], swiglu_bytes)
        add("softmax_fp32", lambda: torch.softmax(x.float(), -1), nbytes * 2 + nbytes * 4)
        logits = torch.randn(self.dim(2048), self.dim(128256 // 8), device=dev, dtype=bf16)
        target = torch.randint(0, logits.shape[1], (logits.shape[0],), device=dev)
        add("cross_entropy_fp32", lambda: F.cross_entropy(logits.float(), target), logits.numel() * 6)
        if self.quick and not self.cuda:
            self.skipped["swiglu_compiled"] = "not compiled in a CPU --quick run (compiling takes longer than the sweep)"
            self.step("swiglu_compiled")
            return
        try:
            compiled = torch.compile(lambda t: F.silu(t[:, :half]) * t[:, half:])
        except Exception as exc:  # noqa: BLE001 - compiling fails at the first call more often than here
            self.skipped["swiglu_compiled"] = _short(exc)
            self.step("swiglu_compiled")
            return
        add("swiglu_compiled", lambda: compiled(big), swiglu_bytes)

    def _rotary(self, add: Callable[..., None], n_iter: int) -> None:
        """Eager RoPE on [s, b, heads, 128] with [s, 1, 1, 128] cos/sin: ``x * cos + rotate_half(x) * sin``."""
        torch = self.torch
        dev, bf16, s = self.device, torch.bfloat16, self.dim(8192)
        heads = max(1, self.dim(5120) // 128)
        q = torch.randn(s, 1, heads, 128, device=dev, dtype=bf16)
        cos = torch.randn(s, 1, 1, 128, device=dev, dtype=bf16)
        sin = torch.randn(s, 1, 1, 128, device=dev, dtype=bf16)

        def rotary() -> Any:
            x1, x2 = q[..., :64], q[..., 64:]
            return q * cos + torch.cat((-x2, x1), dim=-1) * sin

        add("rotary_eager", rotary, 20 * q.numel())

    def _masked_fill(self, add: Callable[..., None], n_iter: int) -> None:
        """fp32 scores [b, h, s, s] filled in place through a broadcast [1, 1, s, s] bool (causal) mask."""
        torch = self.torch
        b, h, s = (1, 2, self.dim(2048)) if self.quick else (4, 16, 2048)
        scores = torch.randn(b, h, s, s, device=self.device, dtype=torch.float32)
        mask = torch.ones(s, s, device=self.device, dtype=torch.bool).triu(1).view(1, 1, s, s)
        add("masked_fill", lambda: scores.masked_fill_(mask, -10000.0), 8 * scores.numel())

    def _optimizers(self, add: Callable[..., None], n_iter: int) -> None:
        """torch's fused Adam and foreach AdamW over 8 fp32 tensors (64M parameters; --quick 64K)."""
        torch = self.torch
        per = (1 << 13) if self.quick else (1 << 23)
        params = [torch.zeros(per, device=self.device, dtype=torch.float32, requires_grad=True) for _ in range(8)]
        for p in params:
            p.grad = torch.randn(per, device=self.device, dtype=torch.float32)
        count = per * len(params)
        for op, make, per_param in (("adam", lambda: torch.optim.Adam(params, lr=1e-4, fused=True), 28),
                                    ("foreach", lambda: torch.optim.AdamW(params, lr=1e-4, foreach=True), 84)):
            try:
                opt = make()
            except Exception as exc:  # noqa: BLE001 - fused Adam on a device without it
                self.skipped[op] = _short(exc)
                self.step(op)
                continue
            add(op, opt.step, per_param * count, max(3, n_iter // 5))

    # ---- the sustained clock probe -----------------------------------------------------------------------

    def sustained_shape(self) -> tuple[int, int, int]:
        """8192^3, also under ``--quick`` on a GPU (the fit needs that shape); shrunk on a CPU under ``--quick``."""
        if self.cuda:
            return SUSTAINED_SHAPE
        return tuple(self.dim(d) for d in SUSTAINED_SHAPE)  # type: ignore[return-value]

    def sustained(self) -> list[dict[str, Any]]:
        torch = self.torch
        m, n, k = self.sustained_shape()
        a = torch.randn(m, k, device=self.device, dtype=torch.bfloat16)
        w = torch.randn(k, n, device=self.device, dtype=torch.bfloat16)
        flops = 2 * m * n * k
        probe = ClockProbe(torch, self.device) if self.cuda else None
        if probe is None:
            self.skipped["sustained_clock"] = "no SM clock on a CPU (fit-gpu keeps the base's sustained clock)"
        rows: list[dict[str, Any]] = []
        one_us = self.timer.us(lambda: a @ w, 1, 1)
        iters = max(1, min(1000, round(SAMPLE_S * 1e6 / one_us)))  # a sample every ~0.1 s (60 GEMMs on an H200)
        start = time.monotonic()
        while True:
            us = self.timer.us(lambda: a @ w, iters, 0)
            smi = probe.read() if probe is not None else ""
            rows.append(dict(t=round(time.monotonic() - start, 2), tflops=flops / us / 1e6, smi=smi))
            if self.bar is not None:
                self.bar.set_postfix_str(f"sustained {rows[-1]['t']:.0f}/{self.sustained_s:g} s")
            if time.monotonic() - start >= self.sustained_s:
                break
        if probe is not None and probe.why:
            self.skipped["sustained_clock"] = probe.why
        self.step("sustained")
        return rows

    # ---- attention -----------------------------------------------------------------------------------------

    def attention(self) -> list[dict[str, Any]]:
        torch = self.torch
        import torch.nn.functional as F

        rows = []
        n_iter, warm = self.iters["attention"], self.warmup
        for seq in ATTENTION_SEQS:
            for heads in ATTENTION_HEADS:
                s = self.dim(seq)
                batch = max(1, self.dim(ATTENTION_TOKENS) // s)
                try:
                    q, k, v = (torch.randn(batch, heads, s, 128, device=self.device, dtype=torch.bfloat16,
                                           requires_grad=True) for _ in range(3))
                    fwd = self.timer.us(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                        n_iter, warm)
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    grad = torch.randn_like(out)
                    bwd = self.timer.us(lambda out=out, q=q, k=k, v=v, grad=grad: torch.autograd.grad(
                        out, (q, k, v), grad, retain_graph=True), n_iter, warm)
                    rows.append(dict(batch=batch, heads=heads, seq=s, head_dim=128, v_dim=128, causal=True,
                                     fwd_us=fwd, bwd_us=bwd))
                    del q, k, v, out, grad
                except Exception as exc:  # noqa: BLE001 - e.g. out of memory on a small GPU
                    self.skipped[f"attention b{batch} h{heads} s{s}"] = _short(exc)
                self.step(f"attention s{s} h{heads}")
        self.free()
        return rows

    def free(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
            self.torch.cuda.empty_cache()


class ClockProbe:
    """The GPU's SM clock (MHz), power (W) and temperature (C) as ``"clock, power, temp"``: nvidia-smi's
    ``--query-gpu=clocks.sm,power.draw,temperature.gpu`` for this device (by UUID), else torch's NVML readings
    (``torch.cuda.clock_rate``, ``power_draw``, ``temperature``), else ``""`` (:attr:`why` says why)."""

    QUERY = ("--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader,nounits")

    def __init__(self, torch: Any, device: str) -> None:
        self.torch = torch
        self.device = device
        self.smi = shutil.which("nvidia-smi")
        self.why = ""
        self.select: list[str] = []
        uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", "") or "")
        if uuid:
            self.select = [f"--id={uuid if uuid.startswith(('GPU-', 'MIG-')) else 'GPU-' + uuid}"]

    def read(self) -> str:
        if self.smi:
            for select in (self.select, []) if self.select else ([],):
                try:
                    done = subprocess.run([self.smi, *select, *self.QUERY], capture_output=True, text=True, timeout=10)
                except (OSError, subprocess.SubprocessError):
                    continue
                lines = done.stdout.strip().splitlines()
                if done.returncode == 0 and lines and _clock(lines[0]):
                    if not select and self.select:
                        self.why = "nvidia-smi did not know this GPU's UUID: sampled its first GPU"
                    return lines[0].strip()
        try:
            clock = float(self.torch.cuda.clock_rate(self.device))
        except Exception as exc:  # noqa: BLE001 - torch reads NVML through pynvml, which may be missing
            self.why = f"no nvidia-smi and no NVML reading ({_short(exc)}): fit-gpu keeps the base's sustained clock"
            return ""
        if not self.why:
            self.why = "no nvidia-smi: the clock, power and temperature are torch's NVML readings"
        try:
            power = f"{float(self.torch.cuda.power_draw(self.device)) / 1e3:.2f}"  # mW -> W
            temp = f"{float(self.torch.cuda.temperature(self.device)):g}"
        except Exception:  # noqa: BLE001
            power = temp = ""
        return f"{clock:g}, {power}, {temp}"


def _clock(smi: str) -> float | None:
    try:
        value = float(smi.split(",")[0])
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:200]

MAX_SUSTAINED_S = 3600.0
"""The longest ``--sustained_s`` taken: a GPU's clock settles within a minute; days of probe are a typo."""


def run(args: Any, argv: list[str]) -> int:
    """``python -m profiling kernels``: sweep, then write the JSON atomically (nothing written on an error)."""
    import json

    from utils.io import atomic_write, guard_output

    output = guard_output(args.output)  # a folder, a link, a name too long: refused before the sweep
    device = args.device
    if device is None:
        try:
            import torch
        except ImportError as exc:
            raise ConfigError(f"profiling kernels needs torch (pip install '.[torch]'): {exc}") from None
        device = "cuda" if torch.cuda.is_available() else "cpu"
    sustained_s = args.sustained_s if args.sustained_s is not None else (2.0 if args.quick else 20.0)
    if sustained_s > MAX_SUSTAINED_S:
        raise ConfigError(f"--sustained_s {sustained_s:g}: more than {MAX_SUSTAINED_S:g} s (an hour) of the clock probe; "
                          "the clock settles within a minute (default 20)")
    sweep = Sweep(device, args.quick, sustained_s)
    command = shlex.join(["python", "-m", "profiling", *argv])
    print(f"python -m profiling kernels: {sweep.device}{' (--quick)' if args.quick else ''} -> {output}", flush=True)
    with atomic_write(output) as handle:  # opened first: a path that cannot be written fails before the sweep
        data = sweep.run(command)
        handle.write(json.dumps(data, indent=1, allow_nan=False) + "\n")
    summary = ", ".join(f"{len(data.get(key, []))} {key}" for key in ("gemm", "memory_kernels", "sustained", "attention"))
    print(f"wrote {output}: {summary}")
    for what, why in data["skipped"].items():
        print(f"note: not measured: {what}: {why}")
    if not sweep.cuda:
        print(f"note: {CPU_NOTE}")
    return 0
