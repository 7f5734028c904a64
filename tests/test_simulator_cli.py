"""``python -m simulator``: files, summary, and one-line errors with exit status 2 and no output."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES, run_cli

EXAMPLE = str(EXAMPLES / "simai_workload_analytical.txt")
FLAGS = ("-g", "9216", "-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "48.5")


def test_example_end_to_end(tmp_path):
    done = run_cli("-m", "simulator", "-w", EXAMPLE, *FLAGS, "-r", "run1-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    end_to_end = (tmp_path / "results" / "run1-EndToEnd.csv").read_text()
    lines = end_to_end.splitlines()
    # Values derived by hand in test_simulator_simai.py (test_totals_line, test_end_to_end_text).
    assert lines[1] == ("run1-, 40332 (0.53%), 1067010 (14.14%), 326686 (4.33%), 1222811 (16.21%), 0 (0.00%), "
                        "345984 (4.59%), 4542795 (60.20%), 2656839 (35.21%), 7545619")
    assert len(lines) == 1792 and end_to_end.endswith("\n")
    ours = (tmp_path / "results" / "run1-simai_layers.csv").read_text().splitlines()
    assert len(ours) == 1790
    header = ours[0].split(",")
    assert header[:5] == ["index", "layer_name", "fwd_compute_us", "ig_compute_us", "wg_compute_us"]
    row = dict(zip(header, ours[1 + 7].split(",")))
    assert row["layer_name"] == "attention_column" and row["fwd_comm_us"] == "87.89"
    assert row["fwd_group"] == "TP" and row["fwd_size_bytes"] == "50331648" and row["ig_algbw_gibps"] == "nan"
    # The printed summary lists every term.
    assert "Total time" in done.stdout and "7,545,619.143 us" in done.stdout
    assert "run1-EndToEnd.csv" in done.stdout


def test_result_prefix_and_folder(tmp_path):
    micro = str(EXAMPLES / "simai_micro_allreduce.txt")
    args = ("-m", "simulator", "-w", micro, "-g_p_s", "8", "-n_p_s", "8", "-q")
    # Default: results/<workload stem>-EndToEnd.csv; -g defaults to the header's all_gpus (8).
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    text = (tmp_path / "results" / "simai_micro_allreduce-EndToEnd.csv").read_text()
    # tp 8, one node: 16 MiB all-reduce = 0.015625 / 240 (A100 default) * 1e9 * 2 * 7/8 = 113932.3 ns;
    # 64 MiB: 455729.2 ns.  Compute 556000 + 1 + 1 ns per record.
    assert text.splitlines()[3] == ("embedding_layer,Analytical_test,556,0,0,114,0,0,114,137.14,240.00,"
                                    "0,-nan,0.00,0,-nan,0.00")
    # A prefix with a folder is used as given (SimAI's -r); -r_f puts a plain prefix in that folder.
    assert run_cli(*args, "-r", "out/x-", cwd=tmp_path).returncode == 0
    assert (tmp_path / "out" / "x-EndToEnd.csv").exists()
    assert run_cli(*args, "-r", "y-", "-r_f", "elsewhere", cwd=tmp_path).returncode == 0
    assert (tmp_path / "elsewhere" / "y-simai_layers.csv").exists()
    assert run_cli(*args, "-r", "dir/", cwd=tmp_path).returncode == 0
    assert (tmp_path / "dir" / "simai_micro_allreduce-EndToEnd.csv").read_text().startswith("File name, ")


AICB = str(EXAMPLES / "aicb_simai_L7B_megatron_tp2_pp1_mbs1_A100.txt")


@pytest.mark.parametrize("args, message", [
    (("-w", EXAMPLE, "-g", "100", "-g_p_s", "8", "-n_p_s", "8"), "-g 100 GPUs is not a multiple of tp*pp = 2*12 = 24"),
    (("-w", EXAMPLE, "-g", "9216", "-n_p_s", "8"), "-g_p_s/--gpus_per_server is required"),
    (("-w", EXAMPLE, "-g", "9216", "-g_p_s", "8"), "-n_p_s/--nics_per_server is required"),
    (("-w", AICB, "-g", "8", "-g_p_s", "8", "-n_p_s", "8"), "missing header keys 'pp', 'vpp', 'ga'"),
    (("-w", "missing.txt", "-g_p_s", "8", "-n_p_s", "8"), "missing.txt: cannot read"),
    (("-w", EXAMPLE, *FLAGS, "-dp_o", "1.5"), "-dp_o must be an overlap ratio between 0 and 1"),
    (("-w", EXAMPLE, *FLAGS, "-g_type", "B200"), "unknown GPU type 'B200'"),
    (("-w", EXAMPLE, "-g", "9216", "--model", "topo"),
     "--model topo needs -t/--topology FILE, or -g_p_s/--gpus_per_server"),
    (("-w", EXAMPLE, "-g", "0"), "argument -g/--gpus: expected a positive integer"),
    ((*FLAGS,), "give -w FILE (a SimAI workload) or the job's flags"),
])
def test_bad_inputs_end_with_one_line_and_no_output(tmp_path, args, message):
    done = run_cli("-m", "simulator", *args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("simulator: error: ")
    assert message in lines[0]
    assert not (tmp_path / "results").exists()


def test_warnings_go_to_stderr(tmp_path):
    # 1 NIC per server: the DP group's NIC share is fractional (SimAI would compute a negative busbw).
    done = run_cli("-m", "simulator", "-w", EXAMPLE, "-g", "9216", "-g_p_s", "8", "-n_p_s", "1", "-q", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == ""
    assert all(line.startswith("simulator: warning: ") for line in done.stderr.splitlines())
    assert "1//2 = 0" in done.stderr
