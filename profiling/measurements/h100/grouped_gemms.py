"""Per-expert GEMMs of fine-grained MoE layers as Transformer Engine's GroupedLinear runs them on Hopper
(nvte_multi_tensor_gemm -> multi_stream_cublas_gemm: one cuBLASLt GEMM per expert, round-robin on 4 streams),
against one GEMM of all the rows and an 8192^3 reference.  Each variant is captured in a CUDA graph and replayed,
so the times are GPU times (no host launch cost).  FP8: torch._scaled_mm (cuBLASLt, e4m3, per-tensor scales).

Run on one GPU: ``OUT=DIR python grouped_gemms.py`` (torch only; writes DIR/grouped_gemms.json).  The H100 run of
grouped_gemms.json beside this file backs the per-expert fixed cost of mocked_model/compute/grouped.py."""
import json, os, subprocess, sys, time
import torch

dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = False
OUT = os.environ.get("OUT", ".")
res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cases": []}
streams = [torch.cuda.Stream() for _ in range(4)]
E8 = torch.float8_e4m3fn


def gtime(fn, reps=20):
    """GPU microseconds of one fn() call: captured in a graph, replayed reps times after warm-up."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps * 1e3


def operands(m, n, k, fp8, e):
    """e problems of (m x k) @ (k x n): A row-major, B column-major (TN, what cuBLASLt FP8 needs)."""
    As = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(e)]
    Bs = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(e)]
    if fp8:
        As = [x.to(E8) for x in As]
        Bs = [x.to(E8) for x in Bs]
    return As, [b.t() for b in Bs]


def mm(a, b, fp8, out_dtype):
    if fp8:
        one = torch.ones((), device=dev, dtype=torch.float32)
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=out_dtype)
    return torch.mm(a, b)


def case(name, m, n, k, e, fp8, out_dtype=torch.bfloat16):
    As, Bs = operands(m, n, k, fp8, e)
    one = torch.ones((), device=dev, dtype=torch.float32)

    def serial():
        for a, b in zip(As, Bs):
            mm(a, b, fp8, out_dtype)

    def multistream():
        cur = torch.cuda.current_stream()
        ev = torch.cuda.Event()
        ev.record(cur)
        used = streams[:min(4, e)]
        for s in used:
            s.wait_event(ev)
        for i, (a, b) in enumerate(zip(As, Bs)):
            with torch.cuda.stream(used[i % len(used)]):
                mm(a, b, fp8, out_dtype)
        for s in used:
            e2 = torch.cuda.Event()
            e2.record(s)
            cur.wait_event(e2)

    Abig = torch.cat([a.float() for a in As]).to(As[0].dtype) if not fp8 else torch.cat([a.to(torch.bfloat16) for a in As]).to(E8)
    Bone = Bs[0]

    def one_gemm():  # all the rows against one weight: the dense equivalent of the group's FLOPs
        mm(Abig, Bone, fp8, out_dtype)

    row = {"name": name, "m": m, "n": n, "k": k, "experts": e, "fp8": fp8, "flops": 2.0 * m * n * k * e}
    for label, fn in (("serial", serial), ("multistream4", multistream), ("one_gemm", one_gemm)):
        try:
            row[label + "_us"] = gtime(fn)
        except Exception as exc:  # noqa: BLE001
            row[label + "_err"] = repr(exc)[:200]
    if not fp8 and hasattr(torch, "_grouped_mm"):
        try:
            A = torch.cat(As)
            W = torch.stack([b.t().contiguous() for b in Bs])  # (e, n, k)
            offs = torch.arange(1, e + 1, device=dev, dtype=torch.int32) * m
            Wt = W.transpose(-2, -1)
            row["torch_grouped_mm_us"] = gtime(lambda: torch._grouped_mm(A, Wt, offs=offs))
        except Exception as exc:  # noqa: BLE001
            row["torch_grouped_mm_err"] = repr(exc)[:200]
    res["cases"].append(row)
    print(json.dumps(row), flush=True)
    del As, Bs, Abig
    torch.cuda.empty_cache()


def clocks():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        return repr(exc)


t0 = time.time()
for fp8 in (False, True):
    case("ref_8192", 8192, 8192, 8192, 1, fp8)
res["clock_after_ref"] = clocks()
SHAPES = {
    # Qwen3-30B-A3B, EP16: 8 local experts x 4096 routed tokens; hidden 2048, expert ffn 768 (fc1 out 1536)
    "q30": (8, [("fc1_fprop", 4096, 1536, 2048), ("fc2_fprop", 4096, 2048, 768), ("fc1_dgrad", 4096, 2048, 1536),
                ("fc2_dgrad", 4096, 768, 2048), ("fc1_wgrad", 1536, 2048, 4096), ("fc2_wgrad", 2048, 768, 4096)]),
    # Qwen3-235B-A22B, EP32: 4 local experts x 4096; hidden 4096, ffn 1536
    "q235": (4, [("fc1_fprop", 4096, 3072, 4096), ("fc2_fprop", 4096, 4096, 1536), ("fc1_dgrad", 4096, 4096, 3072),
                 ("fc2_dgrad", 4096, 1536, 4096), ("fc1_wgrad", 3072, 4096, 4096), ("fc2_wgrad", 4096, 1536, 4096)]),
    # GPT-OSS 120B, EP8: 16 local experts x 1024; hidden 2880, ffn 2880
    "oss": (16, [("fc1_fprop", 1024, 5760, 2880), ("fc2_fprop", 1024, 2880, 2880), ("fc1_dgrad", 1024, 2880, 5760),
                 ("fc2_dgrad", 1024, 2880, 2880), ("fc1_wgrad", 5760, 2880, 1024), ("fc2_wgrad", 2880, 2880, 1024)]),
    # Megatron moe_perf's Mixtral proxy, EP8: 1 local expert x 8192 (a large-expert anchor)
    "mix": (1, [("fc1_fprop", 8192, 28672, 4096), ("fc2_fprop", 8192, 4096, 14336)]),
}
for model, (e, shapes) in SHAPES.items():
    for fp8 in (False, True):
        for name, m, n, k in shapes:
            out = torch.float32 if name.endswith("wgrad") else torch.bfloat16
            case(f"{model}_{name}", m, n, k, e, fp8, out)
res["clock_end"] = clocks()
for fp8 in (False, True):
    case("ref_8192_end", 8192, 8192, 8192, 1, fp8)
res["seconds"] = time.time() - t0
with open(os.path.join(OUT, "grouped_gemms.json"), "w") as f:
    json.dump(res, f, indent=1)
print("clocks", res["clock_after_ref"], "|", res["clock_end"], "seconds", res["seconds"])
