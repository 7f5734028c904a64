"""python -m topo.gen: SimAI's files byte for byte, headers and links derived by hand, clean errors.

Defaults used below (docs/topology.md section 1): gps 8, nsps 1, NVLink at -gt's nominal rate (H100: 450 GB/s
per direction = 3600Gbps; SimAI's 2880Gbps with -nvbw 2880Gbps, as the byte-for-byte checks give) / 0.000025ms, NIC 400Gbps /
0.0005ms, npa 64, psn 64, ASW-PSW 400Gbps, app 64.  Templates: AlibabaHPN bw 200Gbps, npa 128, psn 120,
app 240 (120 with --dp); DCN+ psn 8, app 8 (--dt: bw 200Gbps, npa 128).
Node ids: GPUs, NVSwitches, ASWs (set 1 then set 2), PSWs (plane 1 then plane 2), cores.
Link k (0-based) is on line k + 3.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_cli
from topo.gen import PROG, main
from utils.cli import run_main

NV = "3600Gbps 0.000025ms 0"
SIMAI_NV = ("-nvbw", "2880Gbps")
"""SimAI's NVLink default, which its own example files were written with."""
NIC400 = "400Gbps 0.0005ms 0"
NIC200 = "200Gbps 0.0005ms 0"
AP = "400Gbps 0.0005ms 0"


def generate(tmp_path: Path, capsys: pytest.CaptureFixture, *argv: str) -> tuple[str, list[str], list[str]]:
    """Run topo.gen in-process into ``tmp_path``: (file name, file lines, stdout lines)."""
    assert main([*argv, "-o", f"{tmp_path}{os.sep}"]) == 0
    out = capsys.readouterr().out.splitlines()
    path = Path(out[-1])
    assert path.parent == tmp_path
    text = path.read_text()
    assert text.endswith("\n")
    return path.name, text.split("\n")[:-1], out


def link(lines: list[str], k: int) -> str:
    return lines[2 + k]


def check_counts(lines: list[str], header: str) -> None:
    total, _, nv, other, links, _ = header.split()
    assert lines[0] == header
    assert len(lines) == 2 + int(links)
    # line 2: every switch id ascending, trailing space (SimAI's writer)
    first_switch = int(total) - int(nv) - int(other)
    assert lines[1] == " ".join(str(i) for i in range(first_switch, int(total))) + " "


# ---- the two files made by SimAI's own generator ------------------------------------------------
@pytest.mark.parametrize("argv, name", [
    (["-topo", "Spectrum-X", "-g", "16", *SIMAI_NV], "Spectrum-X_16g_8gps_400Gbps_H100"),
    (["-topo", "DCN+", "-g", "16", *SIMAI_NV], "DCN+SingleToR_16g_8gps_400Gbps_H100"),
])
def test_simai_examples_byte_for_byte(tmp_path, capsys, examples, argv, name):
    got, _, out = generate(tmp_path, capsys, *argv)
    assert got == name
    assert (tmp_path / name).read_bytes() == (examples / f"topo_{name}").read_bytes()
    # Spectrum-X: 1 segment of 8 ASWs, 64 PSWs; DCN+: ceil(16/64) = 1 segment of 1 ASW, 8 PSWs
    asw, psw = (8, 64) if name.startswith("Spectrum") else (1, 8)
    assert out[:3] == [f"asw_switch_num: {asw}", f"psw_switch_num: {psw}",
                       "Creating Topology of totally 1 segment(s), totally 1 pod(s)."]


def test_cli_process_writes_simai_example(tmp_path, examples):
    proc = run_cli("-m", "topo.gen", "-topo", "Spectrum-X", "-g", "16", *SIMAI_NV, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["asw_switch_num: 8", "psw_switch_num: 64",
                                        "Creating Topology of totally 1 segment(s), totally 1 pod(s).",
                                        "Spectrum-X_16g_8gps_400Gbps_H100"]
    assert proc.stderr == ""
    written = tmp_path / "Spectrum-X_16g_8gps_400Gbps_H100"
    assert written.read_bytes() == (examples / "topo_Spectrum-X_16g_8gps_400Gbps_H100").read_bytes()
    assert os.listdir(tmp_path) == [written.name]  # no temporary file left


# ---- headers listed in docs/topology.md section 5/6 ------------------------------------------------
@pytest.mark.parametrize("argv, header", [
    (["-topo", "Spectrum-X", "-g", "16"], "90 8 2 72 544 H100"),
    (["-topo", "AlibabaHPN", "-g", "16"], "154 8 2 136 1968 H100"),
    (["-topo", "DCN+", "-g", "16"], "27 8 2 9 40 H100"),
    (["-topo", "Spectrum-X"], "4736 8 512 128 12288 H100"),
    (["--ro", "-g", "144", "-gps", "72", "-gt", "GB200", "-nvbw", "7200Gbps", "-bw", "800Gbps", "-psn", "8",
      "-npa", "64", "-app", "72"], "226 72 2 80 864 GB200"),
])
def test_documented_headers(tmp_path, capsys, argv, header):
    _, lines, _ = generate(tmp_path, capsys, *argv)
    check_counts(lines, header)


# ---- the five shapes at 16 and 128 GPUs, derived by hand ----------------------------------------
def test_rail_single_tor_128(tmp_path, capsys):
    name, lines, out = generate(tmp_path, capsys, "-topo", "Spectrum-X", "-g", "128")
    assert name == "Spectrum-X_128g_8gps_400Gbps_H100"
    # servers 128/8 = 16 -> NVSwitches 128..143; segments ceil(128/(64*8)) = 1 -> 8 ASWs 144..151;
    # PSWs 152..215.  total 128+16+8+64 = 216, other 8+64 = 72, links 64*8 + 128 + 128 = 768
    check_counts(lines, "216 8 16 72 768 H100")
    assert link(lines, 0) == f"0 128 {NV}"
    assert link(lines, 1) == f"0 144 {NIC400}"
    # GPU 77: server 9 -> NVSwitch 128+9 = 137; rail 77 % 8 = 5 -> ASW 144+5 = 149; links 2*77, 2*77+1
    assert link(lines, 154) == f"77 137 {NV}"
    assert link(lines, 155) == f"77 149 {NIC400}"
    assert link(lines, 255) == f"127 151 {NIC400}"
    # ASW-PSW from link 2*128 = 256: ASW outer, PSW inner; link 256 + 64*3 + 10 = ASW 147, PSW 162
    assert link(lines, 256) == f"144 152 {AP}"
    assert link(lines, 458) == f"147 162 {AP}"
    assert link(lines, 767) == f"151 215 {AP}"
    assert out[0] == "asw_switch_num: 8"


def test_rail_single_tor_custom_name(tmp_path, capsys):
    # no -topo, --ro: the same wiring under SimAI's custom name
    name, lines, _ = generate(tmp_path, capsys, "--ro", "-g", "128")
    assert name == "Rail_Opti_SingleToR_128g_8gps_400Gbps_H100"
    check_counts(lines, "216 8 16 72 768 H100")
    assert link(lines, 155) == f"77 149 {NIC400}"


def test_rail_dual_tor_single_plane_16(tmp_path, capsys):
    name, lines, _ = generate(tmp_path, capsys, "-topo", "AlibabaHPN", "-g", "16")
    assert name == "AlibabaHPN_16g_8gps_DualToR_SinglePlane_200Gbps_H100"
    # NVSwitches 16,17; segments ceil(16/(128*8)) = 1 -> 2*8 = 16 ASWs: set 1 18..25, set 2 26..33;
    # 120 PSWs 34..153.  links 120*16 + 2*16 + 16 = 1968
    check_counts(lines, "154 8 2 136 1968 H100")
    # GPU 13: links 3*13 .. 3*13+2: NVSwitch 16 + 13//8 = 17, ASW 18 + 13%8 = 23, ASW 26 + 5 = 31
    assert lines[2 + 39: 2 + 42] == [f"13 17 {NV}", f"13 23 {NIC200}", f"13 31 {NIC200}"]
    # ASW-PSW from link 3*16 = 48; link 48 + 120*9 + 5 = ASW 18+9 = 27, PSW 34+5 = 39
    assert link(lines, 48) == f"18 34 {AP}"
    assert link(lines, 1133) == f"27 39 {AP}"
    assert link(lines, 1967) == f"33 153 {AP}"


def test_rail_dual_tor_single_plane_128(tmp_path, capsys):
    _, lines, _ = generate(tmp_path, capsys, "-topo", "AlibabaHPN", "-g", "128")
    # NVSwitches 128..143; 1 segment -> ASWs set 1 144..151, set 2 152..159; PSWs 160..279
    # total 128+16+16+120 = 280, other 136, links 120*16 + 2*128 + 128 = 2304
    check_counts(lines, "280 8 16 136 2304 H100")
    # GPU 100: server 12 -> 140; rail 4 -> 148 and 156; links 300..302
    assert lines[2 + 300: 2 + 303] == [f"100 140 {NV}", f"100 148 {NIC200}", f"100 156 {NIC200}"]
    assert link(lines, 384) == f"144 160 {AP}"
    assert link(lines, 2303) == f"159 279 {AP}"


def test_rail_dual_tor_dual_plane_16(tmp_path, capsys):
    name, lines, _ = generate(tmp_path, capsys, "-topo", "AlibabaHPN", "--dp", "-g", "16")
    assert name == "AlibabaHPN_16g_8gps_DualToR_DualPlane_200Gbps_H100"
    # as single plane, but PSWs 34..93 plane 1, 94..153 plane 2; links 60*16 + 32 + 16 = 1008
    check_counts(lines, "154 8 2 136 1008 H100")
    assert lines[2:5] == [f"0 16 {NV}", f"0 18 {NIC200}", f"0 26 {NIC200}"]
    # set-1 ASWs 18..25 to plane 1: links 48 .. 48 + 8*60 - 1 = 527; then set 2 to plane 2
    assert link(lines, 48) == f"18 34 {AP}"
    assert link(lines, 527) == f"25 93 {AP}"
    assert link(lines, 528) == f"26 94 {AP}"
    assert link(lines, 1007) == f"33 153 {AP}"


def test_rail_dual_tor_dual_plane_128(tmp_path, capsys):
    _, lines, _ = generate(tmp_path, capsys, "-topo", "AlibabaHPN", "--dp", "-g", "128")
    # ASWs 144..151 / 152..159; PSWs plane 1 160..219, plane 2 220..279; links 60*16 + 256 + 128 = 1344
    check_counts(lines, "280 8 16 136 1344 H100")
    assert link(lines, 384) == f"144 160 {AP}"
    assert link(lines, 384 + 8 * 60) == f"152 220 {AP}"
    assert link(lines, 1343) == f"159 279 {AP}"


def test_rail_dual_plane_custom(tmp_path, capsys):
    name, lines, _ = generate(tmp_path, capsys, "--ro", "--dt", "--dp", "-g", "16")
    assert name == "Rail_Opti_16g_8gps_DualToR_DualPlane_400Gbps_H100"
    # custom defaults: 400Gbps, npa 64, psn 64 (32 per plane); 16 ASWs 18..33, PSWs 34..97
    # total 16+2+16+64 = 98, other 80, links 32*16 + 2*16 + 16 = 560
    check_counts(lines, "98 8 2 80 560 H100")
    assert link(lines, 48 + 8 * 32) == f"26 66 {AP}"


def test_no_rail_single_tor_128(tmp_path, capsys):
    _, lines, _ = generate(tmp_path, capsys, "-topo", "DCN+", "-g", "128")
    # segments ceil(128/64) = 2 -> ASWs 144, 145; PSWs 146..153; total 128+16+2+8 = 154, other 10,
    # links 8*2 + 128 + 128 = 272
    check_counts(lines, "154 8 16 10 272 H100")
    # GPU 63 -> ASW 144 + 63//64 = 144; GPU 64 -> 145
    assert lines[2 + 126: 2 + 130] == [f"63 135 {NV}", f"63 144 {NIC400}", f"64 136 {NV}", f"64 145 {NIC400}"]
    assert link(lines, 256) == f"144 146 {AP}"
    assert link(lines, 264) == f"145 146 {AP}"
    assert link(lines, 271) == f"145 153 {AP}"


def test_no_rail_custom_name(tmp_path, capsys):
    # no flags: custom, not rail-optimised, single ToR; default psn 64
    name, lines, _ = generate(tmp_path, capsys, "-g", "16")
    assert name == "No_Rail_Opti_16g_8gps_SingleToR_400Gbps_H100"
    check_counts(lines, "83 8 2 65 96 H100")  # 16+2+1+64 = 83; links 64 + 16 + 16 = 96


def test_no_rail_dual_tor_16(tmp_path, capsys):
    name, lines, _ = generate(tmp_path, capsys, "-topo", "DCN+", "--dt", "-g", "16")
    assert name == "DCN+DualToR_16g_8gps_200Gbps_H100"
    # npa 128: ceil(16/128) = 1 segment of 2 ASWs: 18 (set 1), 19 (set 2); PSWs 20..27
    # total 16+2+2+8 = 28, other 10, links 8*2 + 2*16 + 16 = 64
    check_counts(lines, "28 8 2 10 64 H100")
    assert lines[2 + 15: 2 + 18] == [f"5 16 {NV}", f"5 18 {NIC200}", f"5 19 {NIC200}"]
    assert link(lines, 48) == f"18 20 {AP}"
    assert link(lines, 56) == f"19 20 {AP}"
    assert link(lines, 63) == f"19 27 {AP}"


def test_no_rail_dual_tor_128(tmp_path, capsys):
    name, lines, _ = generate(tmp_path, capsys, "-topo", "DCN+", "--dt", "-g", "128")
    assert name == "DCN+DualToR_128g_8gps_200Gbps_H100"
    # ceil(128/128) = 1 segment: ASWs 144, 145; PSWs 146..153; links 16 + 256 + 128 = 400
    check_counts(lines, "154 8 16 10 400 H100")
    assert lines[2 + 381: 2 + 384] == [f"127 143 {NV}", f"127 144 {NIC200}", f"127 145 {NIC200}"]
    assert link(lines, 384) == f"144 146 {AP}"
    assert link(lines, 399) == f"145 153 {AP}"


def test_no_rail_dual_tor_custom_name(tmp_path, capsys):
    name, lines, _ = generate(tmp_path, capsys, "--dt", "-g", "16")
    assert name == "No_Rail_Opti_16g_8gps_DualToR_400Gbps_H100"
    # npa 64, psn 64: ASWs 18, 19; PSWs 20..83; links 64*2 + 32 + 16 = 176
    check_counts(lines, "84 8 2 66 176 H100")


def test_flags_written_verbatim(tmp_path, capsys):
    name, lines, _ = generate(tmp_path, capsys, "-topo", "Spectrum-X", "-g", "16", "-gps", "4", "-nsps", "2",
                              "-nvbw", "1.8Tbps", "-nl", "25ns", "-bw", "100Gbps", "-l", "1us", "-er", "0.001",
                              "-apbw", "800Gbps", "-gt", "H20")
    assert name == "Spectrum-X_16g_4gps_100Gbps_H20"
    # servers 16/4 = 4, NVSwitches 4*2 = 8 (16..23); ceil(16/(64*4)) = 1 segment of 4 ASWs 24..27;
    # PSWs 28..91.  total 16+8+4+64 = 92, other 68, links 16*2 + 16 + 64*4 = 304
    check_counts(lines, "92 4 8 68 304 H20")
    # GPU 5: server 1 owns NVSwitches 16 + 1*2 = 18, 19; rail 5 % 4 = 1 -> ASW 25
    assert lines[2 + 15: 2 + 18] == ["5 18 1.8Tbps 25ns 0.001", "5 19 1.8Tbps 25ns 0.001", "5 25 100Gbps 1us 0.001"]
    assert link(lines, 48) == "24 28 800Gbps 1us 0.001"  # SimAI reuses -l for ASW-PSW links


# ---- beyond SimAI ------------------------------------------------------------------------------
def test_ap_latency_flag(tmp_path, capsys):
    _, lines, _ = generate(tmp_path, capsys, "-topo", "DCN+", "-g", "16", "-apl", "2us")
    assert link(lines, 1) == f"0 18 {NIC400}"
    assert link(lines, 32) == "18 19 400Gbps 2us 0"


def test_nvl72(tmp_path, capsys):
    name, lines, out = generate(tmp_path, capsys, "-topo", "NVL72")
    assert name == "NVL72_576g_72gps_800Gbps_GB200"
    # 576 GPUs = 8 domains of 72 -> 8 NVSwitches 576..583; ceil(576/(64*72)) = 1 segment of 72 ASWs
    # 584..655; 64 PSWs 656..719.  total 576+8+72+64 = 720, other 136, links 576 + 576 + 64*72 = 5760
    check_counts(lines, "720 72 8 136 5760 GB200")
    # GPU 150: domain 2 -> NVSwitch 578; rail 150 % 72 = 6 -> ASW 590
    assert lines[2 + 300: 2 + 302] == ["150 578 7200Gbps 0.000025ms 0", "150 590 800Gbps 0.0005ms 0"]
    assert link(lines, 1152) == "584 656 800Gbps 0.0005ms 0"
    assert out[2] == "Creating Topology of totally 1 segment(s), totally 1 pod(s)."


def test_nvl_general(tmp_path, capsys):
    name, lines, _ = generate(tmp_path, capsys, "-topo", "NVL", "--gps", "36", "-g", "144")
    assert name == "NVL_144g_36gps_800Gbps_GB200"
    # 4 domains -> NVSwitches 144..147; app max(64, 36) = 64 >= 36 per segment; 36 ASWs 148..183;
    # PSWs 184..247; total 144+4+36+64 = 248, other 100, links 144 + 144 + 64*36 = 2592
    check_counts(lines, "248 36 4 100 2592 GB200")


def test_pods_with_core_tier(tmp_path, capsys):
    name, lines, out = generate(tmp_path, capsys, "-topo", "Spectrum-X", "-g", "32", "--pods", "2", "-psn", "4")
    assert name == "Spectrum-X_32g_8gps_2pods_400Gbps_H100"
    # 16 GPUs per pod, ceil(16/512) = 1 segment of 8 ASWs per pod: pod 0 36..43, pod 1 44..51;
    # PSWs pod 0 52..55, pod 1 56..59; a PSW serves 8 ASWs * 400G = 3.2T, / (1 * 400G) = 8 cores 60..67.
    # total 32+4+16+8+8 = 68, other 32, links 32 NV + 32 NIC + 16*4 ASW-PSW + 8*8 PSW-core = 192
    check_counts(lines, "68 8 4 32 192 H100")
    assert out == ["asw_switch_num: 16", "psw_switch_num: 8", "core_switch_num: 8",
                   "Creating Topology of totally 2 segment(s), totally 2 pod(s).", str(tmp_path / name)]
    # GPU 16 = pod 1 local 0 -> ASW 44; GPU 27 = pod 1 local 11, rail 3 -> ASW 47
    assert link(lines, 33) == f"16 44 {NIC400}"
    assert link(lines, 55) == f"27 47 {NIC400}"
    assert link(lines, 64) == f"36 52 {AP}"
    assert link(lines, 96) == f"44 56 {AP}"  # pod 1 starts after 8*4 = 32 pod-0 links
    assert link(lines, 127) == f"51 59 {AP}"
    assert link(lines, 128) == f"52 60 {AP}"
    assert link(lines, 191) == f"59 67 {AP}"


def test_pods_oversubscription_and_core_flags(tmp_path, capsys):
    _, lines, _ = generate(tmp_path, capsys, "-topo", "Spectrum-X", "-g", "32", "--pods", "2", "-psn", "4",
                           "--oversub", "2", "-pcbw", "800Gbps", "-pcl", "5us")
    # cores: ceil(3.2T / (2 * 800G)) = 2 -> 60, 61; total 62, other 26, links 32+32+64 + 8*2 = 144
    check_counts(lines, "62 8 4 26 144 H100")
    assert link(lines, 128) == "52 60 800Gbps 5us 0"
    assert link(lines, 143) == "59 61 800Gbps 5us 0"


def test_pods_dual_plane_cores_split(tmp_path, capsys):
    _, lines, _ = generate(tmp_path, capsys, "-topo", "AlibabaHPN", "--dp", "-g", "32", "--pods", "2", "-psn", "4",
                           "-csn", "6")
    # per pod 16 GPUs: 16 ASWs; pod 0 36..51, pod 1 52..67; PSWs pod 0 68..71 (plane 1 68,69), pod 1 72..75;
    # cores 76..78 plane 1, 79..81 plane 2.  links 32 + 64 + (32 ASWs * 2 PSWs) + 8 PSWs * 3 = 184
    check_counts(lines, "82 8 4 46 184 H100")
    assert link(lines, 160) == f"68 76 {AP}"
    assert link(lines, 166) == f"70 79 {AP}"  # PSW 70 is pod 0 plane 2


# ---- warnings ----------------------------------------------------------------------------------
def test_asn_warning_names_value_used(tmp_path, capsys):
    assert main(["-topo", "DCN+", "-g", "16", "-asn", "3", "-o", f"{tmp_path}/"]) == 0
    err = capsys.readouterr().err.splitlines()
    # 1 segment x 1 ASW
    assert err == ["topo.gen: warning: -asn 3 disagrees with 16 GPUs: 1 segment(s) x 1 ASW(s) per segment; "
                   "using asw_switch_num 1 (as SimAI does)"]


def test_template_forced_switch_warns_and_builds_simai_file(tmp_path, capsys, examples):
    assert main(["-topo", "DCN+", "-g", "16", "--dp", *SIMAI_NV, "-o", f"{tmp_path}/"]) == 0
    assert capsys.readouterr().err == "topo.gen: warning: --dp ignored: -topo DCN+ forces it off (as SimAI does)\n"
    name = "DCN+SingleToR_16g_8gps_400Gbps_H100"
    assert (tmp_path / name).read_bytes() == (examples / f"topo_{name}").read_bytes()


# ---- errors: one line, exit 2, no file ------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["-g", "20"], "-g 20 is not a multiple of -gps 8"),
    (["-topo", "Spectrum-X", "-g", "8192"],
     # ceil(8192/512) = 16 segments > int(64/8) = 8
     "capacity overflow in Rail_Opti_SingleToR: 8192 GPUs need 16 segments of -npa 64 x -gps 8 = 512 GPUs, "
     "but one pod holds at most int(-app 64 / -gps 8) = 8 segment(s)"),
    (["-topo", "DCN+", "--dt", "-g", "1024"],
     # ceil(1024/128) = 8 > int(8/2) = 4
     "capacity overflow in No_Rail_Opti_DualToR: 1024 GPUs need 8 segments of -npa 128 GPUs, "
     "but one pod holds at most int(-app 8 / 2) = 4 segment(s)"),
    (["-topo", "AlibabaHPN", "-g", "31744"],
     # ceil(31744/1024) = 31 > int(240/8) = 30
     "31744 GPUs need 31 segments"),
    (["--ro", "-g", "144", "-gps", "72", "-npa", "64"], "int(-app 64 / -gps 72) = 0 segment(s)"),
    (["-topo", "NVL36"], "-topo 'NVL36' is not a known template; known: Spectrum-X, AlibabaHPN, DCN+, NVL72, NVL"),
    (["--dp"], "--dp (dual plane) needs a rail-optimised dual-ToR fabric"),
    (["--ro", "--dp"], "--dp (dual plane) needs dual ToR"),
    (["-topo", "AlibabaHPN", "--dp", "-psn", "7"], "-psn 7 is odd"),
    (["-bw", "400"], "-bw: bandwidth '400' has no unit"),
    (["-nl", "fast"], "-nl: not a latency: 'fast'"),
    (["-er", "2"], "-er: error rate must lie in [0, 1]"),
    (["-gt", "H100 SXM"], "-gt 'H100 SXM' must be one word"),
    (["-g", "x"], "argument -g/--gpu: invalid integer: 'x'"),
    (["-g", "0"], "-g must be at least 1, got 0"),
    (["-psn", "0"], "-psn must be at least 1, got 0"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["-csn", "4"], "-csn describes the core tier, which only exists with --pods > 1"),
    (["--pods", "2", "-csn", "4", "--oversub", "2"], "give -csn (core switches) or --oversub"),
    (["--pods", "3", "-g", "16"], "-g 16 GPUs do not split into --pods 3 pods"),
    (["-topo", "NVL72", "-gps", "8"], "-topo NVL72 has 72 GPUs per NVLink domain, not -gps 8"),
    # rates and delays an ns-3 DataRate / Time cannot hold (they made infinite times downstream), and NVSwitches asked
    # for where --nvlink has none (was silently ignored)
    (["-bw", "1e-3bps"], "-bw: bandwidth '1e-3bps' is outside the 1 bps to"),
    (["--server_nic_bw", "1e300Gbps"], "--server_nic_bw: bandwidth '1e300Gbps' is outside the 1 bps to"),
    (["-l", "1e300h"], "-l: latency '1e300h' is beyond the"),
    (["-g", "16", "--gpus_per_nic", "2", "--nvlink", "pairs", "-nsps", "4"],
     "-nsps 4 asks for NVSwitches, which --nvlink pairs has none of"),
])
def test_errors_one_line_exit_2_no_file(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        run_main(lambda: main([*argv, "-o", f"{tmp_path}/"]), PROG)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("topo.gen: error: "), captured.err
    assert message in lines[0]
    assert os.listdir(tmp_path) == []


def test_error_in_process_no_traceback(tmp_path):
    proc = run_cli("-m", "topo.gen", "-g", "20", "-gps", "8", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == ("topo.gen: error: -g 20 is not a multiple of -gps 8: GPU g sits on server g // gps "
                           "(SimAI crashes with IndexError and leaves a partial file)\n")
    assert os.listdir(tmp_path) == []


def test_output_file_and_permissions(tmp_path, capsys):
    target = tmp_path / "sub" / "my.topo"
    assert main(["-topo", "DCN+", "-g", "16", "-o", str(target)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == str(target)
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_switch_listed_twice_in_a_server_line_says_so(tmp_path, capsys):
    # a hand-edited '#server pcie_switch 16 16' read "node 16 is both a pcie_switch and a pcie_switch"
    from topo import read_topology
    from utils.errors import FormatError

    assert main(["-g", "16", "--gpus_per_nic", "2", "-o", str(tmp_path / "t.txt")]) == 0
    capsys.readouterr()
    text = (tmp_path / "t.txt").read_text()
    first = text.split("#server pcie_switch ", 1)[1].split()[0]
    edited = tmp_path / "e.txt"
    edited.write_text(text.replace(f"#server pcie_switch {first} ", f"#server pcie_switch {first} {first} "))
    with pytest.raises(FormatError, match=f"node {first} is listed twice as a pcie_switch"):
        read_topology(edited)
