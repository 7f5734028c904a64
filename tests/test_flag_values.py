"""Odd numbers in flags (issue 21, item 7): NaN, infinities, negatives, zero, values past int64 and unknown
activations are refused when the flags are parsed, with one line naming the flag, exit status 2, and no
file written."""

from __future__ import annotations

import argparse
import math

import pytest

from utils import cli, cli_flags
from utils.cli import ALL_GROUPS, INFERENCE, run_main


def _refused(capsys, main, argv: list[str], needle: str, out_path=None) -> str:
    with pytest.raises(SystemExit) as exc:
        run_main(lambda: main(argv), "prog")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert needle in lines[0], lines[0]
    if out_path is not None:
        assert not out_path.exists()
    return lines[0]


# ---- the shared argparse types ------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400", "NaN", "Infinity"])
def test_number_types_refuse_non_finite(text):
    for kind in (cli.integer, cli.positive_int, cli.non_negative_int, cli.number, cli.positive_number,
                 cli.non_negative, cli.fraction, cli.probability):
        with pytest.raises(argparse.ArgumentTypeError):
            kind(text)


def test_integer_limits_and_spellings():
    assert cli.integer("5e8") == 500_000_000
    assert cli.integer("1_000") == 1000
    assert cli.integer(str(cli.INT64_MAX)) == 2**63 - 1
    with pytest.raises(argparse.ArgumentTypeError, match="beyond"):
        cli.integer("1e30")
    with pytest.raises(argparse.ArgumentTypeError, match="whole"):
        cli.integer("2.5")


@pytest.mark.parametrize("kind, good, bad", [
    (cli.positive_int, ["1", "8"], ["0", "-1"]),
    (cli.non_negative_int, ["0", "3"], ["-1"]),
    (cli.positive_number, ["0.5", "48.5"], ["0", "-2"]),
    (cli.non_negative, ["0", "1.5"], ["-0.1"]),
    (cli.fraction, ["1", "0.3"], ["0", "1.01"]),
    (cli.probability, ["0", "0.1"], ["1", "-0.1"]),
    (cli.pp_rank_type, ["-1", "0", "3"], ["-2"]),
])
def test_ranges(kind, good, bad):
    for text in good:
        assert math.isfinite(kind(text))
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            kind(text)


def test_every_numeric_job_flag_has_a_checking_type():
    """The audit of utils/cli.py: no flag takes Python's bare int or float (which accept NaN, infinities and
    any sign)."""
    from utils import cli_types

    checked = {cli.integer, cli.positive_int, cli.non_negative_int, cli.number, cli.positive_number, cli.non_negative,
               cli.fraction, cli.probability, cli.pp_rank_type, cli_flags._size, str, None, cli_types.int_pair,
               cli_types.int_tuple, cli_types.at_least_one, cli_types.path_text}
    flags = [f for group in ALL_GROUPS.values() for f in group] + list(INFERENCE)
    loose = [f.names[0] for f in flags if f.type not in checked]
    assert loose == []
    # every integer flag that counts something refuses 0 and negatives unless 0 has a meaning
    may_be_zero = {"pp_rank", "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                   "param_persistence_threshold", "model_persistence_threshold", "max_live_parameters",
                   "prefetch_bucket_size", "multi_all_reduce_enable", "n_dense_layers", "n_shared_expert", "q_lora_rank",
                   "warmup", "seed", "mtp_num_layers", "speculative_tokens"}
    for f in flags:
        if f.type in (cli.integer, cli.non_negative_int) and f.dest not in may_be_zero:
            raise AssertionError(f"{f.names[0]} takes 0 or a negative count")


# ---- the entries ----------------------------------------------------------------------------------------

BASE = ["--model_name", "gpt_tiny", "--world_size", "2", "--global_batch", "2"]


@pytest.mark.parametrize("flag, value, needle", [
    ("--moe_expert_capacity_factor", "inf", "expected a finite number, got 'inf'"),
    ("--moe_expert_capacity_factor", "nan", "expected a finite number, got 'nan'"),
    ("--moe_expert_capacity_factor", "0", "expected a positive number"),
    ("--moe_routing_skew", "-1", "expected a number >= 0"),
    ("--num_experts", "0", "expected a positive integer, got '0'"),
    ("--n_shared_expert", "-1", "expected an integer >= 0"),
    ("--hidden_size", "1e30", "beyond the largest integer"),
    ("--world_size", "inf", "expected a finite integer"),
    ("--hidden_dropout", "1.5", "expected a probability in [0, 1)"),
    ("--reduce_bucket_size", "-1", "expected a positive integer"),
    ("--activation_func", "tanhh", "invalid choice: 'tanhh'"),
])
def test_generator_refuses_odd_numbers(tmp_path, capsys, flag, value, needle):
    from workload_generator.generate_megatron_workload import main

    out = tmp_path / "w.csv"
    line = _refused(capsys, main, [*BASE, flag, value, "-o", str(out)], needle, out)
    assert flag in line


def test_activation_func_means_the_mlp(tmp_path, capsys):
    """AICB's --activation_func: swiglu builds the SwiGLU MLP (fc1 doubled), gelu the plain one; a value that
    contradicts --swiglu is refused."""
    from utils.cli import parse_job

    job, _ = parse_job([*BASE, "--activation_func", "swiglu"], "p", "d")
    assert job.model.swiglu
    job, _ = parse_job(["--model_name", "llama_7B", "--world_size", "1", "--activation_func", "gelu"], "p", "d")
    assert not job.model.swiglu  # the flag wins over the preset's SwiGLU
    from workload_generator.generate_megatron_workload import main

    out = tmp_path / "w.csv"
    _refused(capsys, main, [*BASE, "--swiglu", "--activation_func", "gelu", "-o", str(out)],
             "--activation_func gelu contradicts --swiglu", out)


@pytest.mark.parametrize("argv, needle", [
    (["--pods", "2", "--oversub", "inf"], "--oversub/--oversubscription: expected a finite number, got 'inf'"),
    (["--pods", "2", "--oversub", "nan"], "expected a finite number, got 'nan'"),
    (["--pods", "2", "--oversub", "0"], "expected a positive number, got '0'"),
])
def test_topo_gen_refuses_odd_numbers(tmp_path, capsys, argv, needle):
    from topo.gen import main

    out = tmp_path / "t.txt"
    _refused(capsys, main, ["-topo", "Spectrum-X", "-g", "128", *argv, "-o", str(out)], needle, out)


@pytest.mark.parametrize("flag, value", [("-nic", "nan"), ("-nic", "inf"), ("-nv", "inf"), ("-nv", "nan"),
                                         ("-dp_o", "nan"), ("--pp_busbw", "inf")])
def test_simulator_refuses_non_finite_bandwidths(tmp_path, capsys, examples, flag, value):
    from simulator.cli import main

    prefix = tmp_path / "r-"
    _refused(capsys, main, ["-w", str(examples / "simai_micro_allreduce.txt"), "-g", "8", "-g_p_s", "8",
                            "-n_p_s", "8", flag, value, "-r", str(prefix)], f"expected a finite number, got '{value}'")
    assert list(tmp_path.iterdir()) == []


def test_servers_must_be_whole(tmp_path, capsys):
    """12 GPUs on 8-GPU servers: SimAI's analytical model would place groups on one and a half servers (a job
    smaller than a server, -g 4 -g_p_s 8, stays valid: part of one server)."""
    from simulator.cli import main

    prefix = tmp_path / "r-"
    _refused(capsys, main, ["--gpu_type", "H100", "--model_name", "gpt_tiny", "--world_size", "12", "--global_batch",
                            "12", "-g_p_s", "8", "-n_p_s", "8", "-r", str(prefix)],
             "-g 12 GPUs is not a multiple of -g_p_s 8 GPUs per server")
    assert list(tmp_path.iterdir()) == []


def test_topology_of_fewer_gpus_than_a_server_is_refused(tmp_path, capsys):
    """8 GPUs per server on a 3-GPU topology: the generator refuses -g 3 with -gps 8, and the simulator refuses
    -g_p_s 8 against a topology file of 3 GPUs per server."""
    from simulator.cli import main
    from topo.gen import main as topo_main

    _refused(capsys, topo_main, ["-topo", "Spectrum-X", "-g", "3", "-gps", "8", "-o", str(tmp_path / "t8")],
             "-g 3 is not a multiple of -gps 8", tmp_path / "t8")
    topo = tmp_path / "t3"
    assert topo_main(["-topo", "Spectrum-X", "-g", "3", "-gps", "3", "-o", str(topo)]) == 0
    capsys.readouterr()
    _refused(capsys, main, ["-t", str(topo), "--gpu_type", "H100", "--model_name", "gpt_tiny", "--world_size", "3",
                            "--global_batch", "3", "-g_p_s", "8", "-r", str(tmp_path / "r-")],
             f"-g_p_s 8 contradicts {topo}, which has 3 GPUs per server")


def test_inference_entry_refuses_odd_numbers(tmp_path, capsys):
    from workload_generator.SimAI_inference_workload_generator import main

    out = tmp_path / "i.txt"
    _refused(capsys, main, ["DeepSeek-671B", "--moe_routing_skew", "nan", "--output", str(out)],
             "expected a finite number", out)
    _refused(capsys, main, ["DeepSeek-671B", "--aiob_forward_loops", "0", "--output", str(out)],
             "expected a positive integer", out)


def test_the_list_and_ratio_types():
    from utils.cli_types import at_least_one, int_pair, int_tuple

    assert int_pair("128,0") == (128, 0) and int_pair("-1, 4096") == (-1, 4096)
    assert int_tuple("2,4") == (2, 4) and at_least_one("1.25") == 1.25
    for kind, text in ((int_pair, "128"), (int_pair, "-2,0"), (int_pair, "a,b"), (int_tuple, "2,0"), (int_tuple, ""),
                       (at_least_one, "0.9"), (at_least_one, "nan"), (at_least_one, "inf")):
        with pytest.raises(argparse.ArgumentTypeError):
            kind(text)
