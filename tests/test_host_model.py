"""The host (CPU) model of ``--model topo`` by hand: a host-bound program, a host-device synchronisation that drains
the queue, a CUDA graph replacing its ops' host costs, the per-item costs of Transformer Engine's modules, the graph
scopes and synchronisations Megatron-core has, the recomputed modules, and the refusals (one line, exit status 2).

Constants (mocked_model/compute/host.py): a torch module call 13.48 us (TE #2053), a Transformer Engine module 2.7x
that (36.396 us), FP8 twice (72.792 us), 5 us per further kernel or per-expert launch, 10 us per host wait, a graph
replay 13.48 us.
"""

from __future__ import annotations

import pytest

from mocked_model.compute.host import (
    FP8_FACTOR,
    GRAPH_REPLAY_US,
    LAUNCH_US,
    SYNC_EVENT_COMM,
    SYNC_EVENT_NEXT,
    SYNC_US,
    SYNC_WAIT,
    TE_MODULE_US,
    TORCH_OP_US,
    HostSetup,
    graph_scope,
    host_cost,
)
from simulator.topo import engine
from simulator.topo.programs import COMM, COMPUTE, Op, Program
from tests.conftest import run_cli
from utils.config import JobConfig, TrainingConfig
from utils.model_config import ModelConfig
from utils.parallel import ParallelConfig
from utils.workload import CommType, WorkItem
from workload_generator.megatron import MegatronWorkload

US = 1e-6


def compute(name: str, gpu_us: float, host_us: float, graph: str = "", sync: int = 0) -> tuple[Op, float]:
    return Op(COMPUTE, name, "layers.0", "fwd", gpu_us * 1e3, host_us=host_us, graph=graph, host_sync=sync), gpu_us * US


def collective(name: str, us: float, host_us: float, sync: int = 0) -> tuple[Op, float]:
    return Op(COMM, name, "layers.0", "fwd", 0.0, "all_to_all", "ep_group", 1024, host_us=host_us, host_sync=sync), us * US


def play(*ops: tuple[Op, float]) -> engine.CompiledProgram:
    return engine.compile_program(Program("F", [op for op, _ in ops]), [d for _, d in ops])


# ---- the engine -------------------------------------------------------------------------------------

def test_two_kernels_behind_a_slower_host():
    # two 10 us kernels, each 30 us of CPU to issue: the CPU issues A at 30 (GPU 30-40) and B at 60 (GPU 60-70); the
    # GPU waits 30 + 20 = 50 us for the host, computes 20
    cp = play(compute("a", 10, 30), compute("b", 10, 30))
    assert cp.duration_s == pytest.approx(70 * US)
    assert cp.compute_s == pytest.approx(20 * US)
    assert cp.exposed_s["host"] == pytest.approx(50 * US)
    # a host faster than the kernels hides behind them: only the first issue shows (5 us), 5 + 10 + 10
    fast = play(compute("a", 10, 5), compute("b", 10, 5))
    assert fast.duration_s == pytest.approx(25 * US) and fast.exposed_s["host"] == pytest.approx(5 * US)
    # without host costs the engine is as it was
    assert play(compute("a", 10, 0), compute("b", 10, 0)).exposed_s.get("host", 0.0) == 0.0


def test_a_synchronisation_drains_the_queue():
    # A and B: 100 us kernels, 10 us each to issue (GPU 10-110, 110-210); the dispatch C (a 50 us all-to-all) waits
    # on the CPU for everything before it (DeepEP's received counts): the CPU, at 20, waits to 210, + 10 us of copy
    # and wait, + 10 us to issue = 230: the GPU idles 210-230, runs C 230-280; D (20 us, 40 us of CPU) is issued at
    # 270 and runs 280-300.  Host idle: 10 (A's issue) + 20 = 30 us.
    ops = (compute("a", 100, 10), compute("b", 100, 10), collective("dispatch", 50, 10, SYNC_WAIT), compute("d", 20, 40))
    cp = play(*ops)
    assert SYNC_US == 10.0
    assert cp.duration_s == pytest.approx(300 * US)
    assert cp.exposed_s["host"] == pytest.approx(30 * US)
    assert cp.exposed_s["EP"] == pytest.approx(50 * US)
    # without the wait the CPU stays ahead: C issued at 30 runs 210-260, D issued at 70 runs 260-280
    free = play(*ops[:2], collective("dispatch", 50, 10), ops[3])
    assert free.duration_s == pytest.approx(280 * US) and free.exposed_s["host"] == pytest.approx(10 * US)


def test_the_alltoall_copy_is_waited_for_before_the_collective():
    # the metadata M (10 us GPU, 10 us CPU) ends at 20; its copy is waited for before the next collective, not the
    # permute P (30 us GPU, 10 us CPU) issued at 20 and run 20-50: the CPU waits to max(20, 20) + 10 = 30, issues the
    # all-to-all at 40, which runs 50-90 (no idle: P covers the wait); 10 us of host idle in all (M's issue)
    cp = play(compute("meta", 10, 10, sync=SYNC_EVENT_COMM), compute("permute", 30, 10), collective("a2a", 40, 10))
    assert cp.duration_s == pytest.approx(90 * US)
    assert cp.exposed_s["host"] == pytest.approx(10 * US)
    # a short permute (5 us, 20-25) leaves the GPU waiting for the issue at 40: 15 us more
    short = play(compute("meta", 10, 10, sync=SYNC_EVENT_COMM), compute("permute", 5, 10), collective("a2a", 40, 10))
    assert short.duration_s == pytest.approx(80 * US) and short.exposed_s["host"] == pytest.approx(25 * US)


def test_a_graph_replay_replaces_its_ops_host_costs():
    # three 10 us kernels of 30 us CPU each: eager, issued at 30, 60, 90: done at 100, 70 us waiting for the host;
    # captured in one graph, one replay (13.48 us) issues all three: done at 13.48 + 30
    eager = play(*(compute(n, 10, 30) for n in "abc"))
    assert eager.duration_s == pytest.approx(100 * US) and eager.exposed_s["host"] == pytest.approx(70 * US)
    graphed = play(*(compute(n, 10, 30, graph="attn:0:forward") for n in "abc"))
    assert GRAPH_REPLAY_US == TORCH_OP_US == 13.48
    assert graphed.duration_s == pytest.approx((13.48 + 30) * US)
    assert graphed.exposed_s["host"] == pytest.approx(13.48 * US)
    # two graphs (two layers): two replays; the second is issued at 26.96, while the first layer's kernels run
    two = play(compute("a", 10, 30, graph="attn:0:forward"), compute("b", 10, 30, graph="attn:1:forward"))
    assert two.duration_s == pytest.approx((26.96 + 10) * US)


# ---- per-item costs -----------------------------------------------------------------------------------

def item(stage: str, op: str, shapes=((4096, 1, 2048), (2048, 2048)), **meta) -> WorkItem:
    return WorkItem(CommType.computation, stage=stage, shapes=shapes, meta={"op": op, "layer": 0, **meta})


def test_transformer_engine_module_costs():
    fp8 = HostSetup(te=True, fp8=True, fp8_recipe="tensorwise")
    bf16 = HostSetup(te=True)
    linear = item("forward.MegatronRowLinear.layers.0.self_attention.linear_proj", "gemm", te=True, sub="attention",
                  name="layers.0.self_attention.linear_proj")
    # TE #2053: 13.48 us x 2.7 = 36.396 us; TE #761: FP8 twice that, 72.792 us
    assert TE_MODULE_US == pytest.approx(36.396) and FP8_FACTOR == 2.0
    assert host_cost(linear, bf16, 1).us == pytest.approx(36.396)
    assert host_cost(linear, fp8, 3).us == pytest.approx(72.792)
    # the weight gradient: one GEMM launch inside the same backward call
    wgrad = item("backward.MegatronRowLinear.layers.0.self_attention.linear_proj", "wgrad", te=True, sub="attention")
    assert host_cost(wgrad, fp8, 1).us == pytest.approx(LAUNCH_US)
    # grouped GEMMs of 8 local experts (GroupedLinear): the module, and per expert its GEMM, (FP8, current scaling)
    # its input's quantization (zero the amax, reduce it, compute the scale, cast: 4 launches) and 2 allocations:
    # 72.792 + 8 x 5 x (1 + 4 + 2) = 352.792; BF16: the GEMM and the split, 36.396 + 8 x 10 = 116.396
    experts = item("forward.MoEExperts.layers.0.mlp.experts.fc1", "gemm", ((32768, 2048), (8, 2048, 1536)), te=True,
                   sub="moe", tokens_per_expert=(4096,) * 8, name="layers.0.mlp.experts.fc1")
    assert host_cost(experts, fp8, 2).us == pytest.approx(352.792)
    assert host_cost(experts, bf16, 1).us == pytest.approx(116.396)
    # an eager operation of 12 kernels: one call and 11 more launches, 13.48 + 55
    meta = item("forward.MoEFlexTokenDispatcher.layers.0.mlp.dispatch", "moe_dispatch_meta", ((4096, 128),),
                sub="moe", dispatcher="flex")
    assert host_cost(meta, fp8, 12).us == pytest.approx(68.48)
    # a norm fused into LayerNormLinear: one launch; a standalone TE norm: a module; qk_layernorm: two modules
    assert host_cost(item("forward.n", "norm", in_linear=True, sub="attention"), bf16).us == pytest.approx(LAUNCH_US)
    assert host_cost(item("forward.n", "norm", sub="moe", name="layers.0.pre_mlp_layernorm"), bf16).us == \
        pytest.approx(36.396)
    assert host_cost(item("forward.n", "norm", sub="attention", name="layers.0.self_attention.qk_layernorm"),
                     bf16).us == pytest.approx(72.792)


def test_synchronisations_where_megatron_has_them():
    flex = HostSetup(dispatcher="flex", ep=16)
    a2a = WorkItem(CommType.all_to_all, stage="forward.MoEFlexTokenDispatcher", msg_size=1,
                   meta={"deepep": ("dispatch", 4096, 4096, 128, 8, 1.0), "layer": 0, "sub": "moe"})
    assert host_cost(a2a, flex).sync == SYNC_WAIT                    # DeepEP / HybridEP: the CPU waits for the counts
    assert host_cost(a2a, flex).us == pytest.approx(TORCH_OP_US)
    back = WorkItem(CommType.all_to_all, stage="backward.MoEFlexTokenDispatcher", msg_size=1, meta=a2a.meta)
    assert host_cost(back, flex).sync == 0                           # backward reuses the handle
    # the alltoall dispatcher: the counts' copy after their all-gather over the expert ranks, waited for before the
    # token all-to-all; with moe_preprocess graphed the copy follows the graph (its last op: permutation 1); without
    # expert ranks to gather from, the copy follows the metadata and is waited for before the next op
    meta = item("forward.MoEAlltoAllTokenDispatcher.layers.0.mlp.dispatch", "moe_dispatch_meta", ((4096, 128),),
                sub="moe", dispatcher="alltoall")
    counts = WorkItem(CommType.all_gather, stage="forward.MoEAlltoAllTokenDispatcher", msg_size=1,
                      meta={"counts": True, "layer": 0, "sub": "moe", "name": "layers.0.mlp.dispatch"})
    permute = item("forward.MoEAlltoAllTokenDispatcher.layers.0.mlp.dispatch", "moe_permute", sub="moe",
                   name="layers.0.mlp.dispatch")
    eager, graphed = HostSetup(ep=8), HostSetup(ep=8, graph_impl="transformer_engine",
                                                 graph_scopes=("moe_router", "moe_preprocess"))
    assert [host_cost(i, eager).sync for i in (meta, counts, permute)] == [0, SYNC_EVENT_COMM, 0]
    assert [host_cost(i, graphed).sync for i in (meta, counts, permute)] == [0, 0, SYNC_EVENT_COMM]
    assert host_cost(meta, HostSetup(ep=1)).sync == SYNC_EVENT_NEXT
    assert host_cost(counts, HostSetup(ep=8, drop_and_pad=True)).sync == 0


def test_graph_scopes():
    setup = HostSetup(graph_impl="transformer_engine", graph_scopes=("attn", "moe_router", "moe_preprocess"),
                      dispatcher="alltoall", ep=8)
    qkv = item("forward.MegatronColumnLinear.layers.0.self_attention.linear_qkv", "gemm", sub="attention")
    router = item("forward.MoERouter.layers.0.mlp.router", "gemm", sub="moe", name="layers.0.mlp.router")
    meta = item("forward.MoE.layers.0.mlp.dispatch", "moe_dispatch_meta", ((4096, 128),), sub="moe")
    permute = item("forward.MoE.layers.0.mlp.dispatch", "moe_permute", sub="moe", name="layers.0.mlp.dispatch")
    fc1 = item("forward.MoEExperts.layers.0.mlp.experts.fc1", "gemm", sub="moe", name="layers.0.mlp.experts.fc1")
    assert [graph_scope(i, setup) for i in (qkv, router, meta, permute, fc1)] == \
        ["attn", "moe_router", "moe_router", "moe_router", ""]
    assert host_cost(router, setup) .graph == "moe_router:0:forward" and host_cost(router, setup).us == 0.0
    assert host_cost(fc1, setup).us > 0 and not host_cost(fc1, setup).graph
    # the flex dispatcher permutes after its all-to-all: outside moe_preprocess
    assert graph_scope(permute, HostSetup(graph_impl="transformer_engine", graph_scopes=setup.graph_scopes,
                                          dispatcher="flex")) == ""
    # no scope: whole layers (not the output layer); none: nothing
    out = item("forward.MegatronOutputLayer.output_layer", "gemm", layer=None)
    whole = HostSetup(graph_impl="transformer_engine")
    assert graph_scope(qkv, whole) == "layer" and graph_scope(out, whole) == ""
    assert graph_scope(qkv, HostSetup()) == ""


# ---- whole jobs ------------------------------------------------------------------------------------

MOE = ModelConfig(name="tiny_moe", hidden_size=64, num_layers=2, num_attention_heads=4, ffn_hidden_size=128,
                  vocab_size=256, normalization="RMSNorm", position_embedding_type="rope", num_experts=4,
                  moe_router_topk=2, moe_ffn_hidden_size=128, add_bias_linear=True, swiglu=True)


def items_of(**training) -> list[WorkItem]:
    parallel = ParallelConfig(world_size=4, ep=2, micro_batch=1, global_batch=4)
    job = JobConfig(MOE, parallel, TrainingConfig(seq_length=32, computation_enable=True, moe_grouped_gemm=True,
                                                  **training))
    return [i for i in MegatronWorkload(job)() if i.is_computation and (i.meta or {}).get("layer") == 0]


def test_selective_recompute_of_layernorm_and_moe_act():
    stages = [i.stage for i in items_of(recompute="selective", recompute_modules=("layernorm", "moe_act"))]
    # the MoE layer's pre-MLP norm is its own TE module (recomputed); the input norm is inside LayerNormLinear (not);
    # the experts' activation is recomputed before fc2's backward; core attention is not (not in the modules)
    assert "recompute.MegatronRMSNorm.layers.0.pre_mlp_layernorm" in stages
    assert "recompute.MegatronRMSNorm.layers.0.input_layernorm" not in stages
    act = stages.index("recompute.MoEExperts.layers.0.mlp.experts.activation")
    assert act < stages.index("backward.MoEExperts.layers.0.mlp.experts.fc2")
    assert not any(s.startswith("recompute.MegatronCoreAttention") for s in stages)
    # Megatron's default modules: the attention core only
    default = [i.stage for i in items_of(recompute="selective")]
    assert [s for s in default if s.startswith("recompute")] == \
        ["recompute.MegatronCoreAttention.layers.0.self_attention.core_attention"]


MLA = ModelConfig(name="tiny_mla", hidden_size=128, num_layers=2, num_attention_heads=4, ffn_hidden_size=256,
                  vocab_size=256, num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=64, n_dense_layers=1,
                  normalization="RMSNorm", swiglu=True, position_embedding_type="rope", multi_latent_attention=True,
                  q_lora_rank=64, kv_lora_rank=32, qk_head_dim=16, qk_pos_emb_head_dim=8, v_head_dim=16)


def test_selective_recompute_of_mla_up_proj_and_dense_mlp():
    # DeepSeek-V3's H100 recipe (Megatron-Bridge, 25.09): --recompute_modules mla_up_proj mlp, refused before.
    # mla_up_proj: the q/kv norms and up projections (CheckpointWithoutOutput) again after linear_proj's backward and
    # before core attention's, their SP all-gathers included; mlp: the dense layer's MLP (te_checkpoint), its norm fused
    # into fc1, again at the start of its backward, fc2's reduce-scatter included; the MoE layer's MLP is not recomputed
    parallel = ParallelConfig(world_size=4, tp=2, ep=2, micro_batch=1, global_batch=2, sequence_parallel=True)
    job = JobConfig(MLA, parallel, TrainingConfig(seq_length=32, computation_enable=True, moe_grouped_gemm=True,
                                                  recompute="selective", recompute_modules=("mla_up_proj", "mlp")))
    items = [i for i in MegatronWorkload(job)() if (i.meta or {}).get("layer") == 0 and not i.stage.startswith("forward")]
    stages = [i.stage for i in items]
    attn = stages.index("recompute.MegatronColumnLinear.layers.0.self_attention.linear_q_up_proj")
    assert stages.index("backward.MegatronRowLinear.layers.0.self_attention.linear_proj") < attn
    assert attn < stages.index("backward.MegatronCoreAttention.layers.0.self_attention.core_attention")
    assert "recompute.MegatronColumnLinear.layers.0.self_attention.linear_kv_up_proj" in stages
    assert "recompute.MegatronLinear.layers.0.self_attention.linear_kv_down_proj" not in stages
    fc1 = stages.index("recompute.MegatronColumnLinear.layers.0.mlp.linear_fc1")
    assert stages.index("recompute.MegatronRMSNorm.layers.0.pre_mlp_layernorm") < fc1
    assert fc1 < stages.index("recompute.MegatronRowLinear.layers.0.mlp.linear_fc2") < \
        stages.index("backward.MegatronRowLinear.layers.0.mlp.linear_fc2")
    # with SP, each recomputed up projection and fc1 gathers its input again, fc2 reduce-scatters its output again
    recomputed = [i.comm_type.name for i in items if i.stage.startswith("recompute") and not i.is_computation]
    assert recomputed == ["all_gather", "reduce_scatter", "all_gather", "all_gather"]
    moe = [i.stage for i in MegatronWorkload(job)() if (i.meta or {}).get("layer") == 1]
    assert not any(s.startswith("recompute") and ".mlp." in s for s in moe)
    # the memory estimate drops what the checkpoints discard: Q, K and V; the dense MLP's normed input and inner tensors
    from mocked_model.memory import layer_activation_bytes

    core_attn = JobConfig(MLA, parallel, TrainingConfig(seq_length=32, computation_enable=True, moe_grouped_gemm=True,
                                                        recompute="selective"))
    for layer in (0, 1):
        assert layer_activation_bytes(job, layer) < layer_activation_bytes(core_attn, layer)


def test_expert_bias_is_added_per_expert():
    # biases with grouped GEMMs: TEGroupedMLP._apply_bias, per expert t + b * p, then cat and the cast: with 2 local
    # experts 2 x 2 + 2 = 6 kernels forward, 5 x 2 + 1 = 11 backward
    from mocked_model.compute import item_kernels

    bias = [i for i in items_of() if (i.meta or {}).get("op") == "moe_expert_bias"]
    assert [i.stage.split(".")[0] for i in bias] == ["forward", "backward"]
    assert [sum(k.count for k in item_kernels(i)) for i in bias] == [6, 11]


@pytest.mark.parametrize("flags, words", [
    (["--cuda_graph_impl", "transformer_engine"], "--cuda_graph_scope: capturing whole layers"),
    (["--cuda_graph_impl", "transformer_engine", "--cuda_graph_scope", "moe_preprocess"], "needs moe_router"),
    (["--cuda_graph_scope", "attn"], "needs --cuda_graph_impl"),
    (["--cuda_graph_impl", "transformer_engine", "--cuda_graph_scope", "full_iteration"], "needs --cuda_graph_impl local"),
    (["--recompute_modules", "moe_act"], "--recompute_modules needs --recompute_granularity selective"),
    (["--recompute_granularity", "selective", "--recompute_modules", "moe"], "--recompute_modules moe is not modelled"),
    (["--recompute_granularity", "selective", "--recompute_modules", "mla_up_proj"], "needs multi-latent attention"),
])
def test_bad_graph_scopes_and_modules(tmp_path, flags, words):
    done = run_cli("-m", "simulator", "--model", "topo", "-g_p_s", "8", "--gpu_type", "H100", "--model_name",
                   "qwen3_30B_A3B", "--moe_enable", "--world_size", "16", "--global_batch", "32",
                   "--expert_model_parallel_size", "16", *flags, cwd=tmp_path)
    assert done.returncode == 2
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not list(tmp_path.iterdir())
