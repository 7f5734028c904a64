"""SimAI workload file model: reading every example, round trips, strict/lenient modes, errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from utils.errors import FormatError
from workload_generator.simai import SimAIHeader, SimAILayer, SimAIWorkload
from workload_generator.simai_tokens import VALID_TOKENS

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 2 vpp: 4 ga: 3 all_gpus: 8 "
          "checkpoints: 0 checkpoint_initiates: 0 pp_comm: 1024")
REC = "attn\t-1\t10\tALLREDUCE\t4096\t20\tNONE\t0\t30\tALLGATHER\t8192\t100"


def text(*records: str, header: str = HEADER, count: int | None = None) -> str:
    return "\n".join([header, str(len(records) if count is None else count), *records]) + "\n"


def expect_error(body: str, line: int, field: str, match: str, strict: bool = True) -> FormatError:
    with pytest.raises(FormatError, match=match) as info:
        SimAIWorkload.loads(body, path="w.txt", strict=strict)
    assert info.value.path == "w.txt"
    assert info.value.line == line
    assert info.value.field == field
    assert str(info.value).startswith(f"w.txt:{line}: {field}: ")
    return info.value


# ---- the example files ----------------------------------------------------------------------

def test_analytical_example_loads_strictly(examples):
    w = SimAIWorkload.read(examples / "simai_workload_analytical.txt")
    h = w.header
    assert (h.policy, h.tp, h.ep, h.pp, h.vpp, h.ga, h.all_gpus) == ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", 2, 16, 12, 8, 24,
                                                                     9216)
    assert h.pp_comm == 50331648          # written "pp_comm 50331648", without the colon
    assert h.checkpoints == () and h.checkpoint_initiates == ()
    assert len(w) == 1789 and not w.warnings
    assert w.records[0] == SimAILayer("grad_gather", -1, 1, "NONE", 0, 1, "NONE", 0, 1, "ALLGATHER", 2807758848, 100)
    assert w.records[-1].name == "optimizer4" and w.records[-1].fwd_size_bytes == 4
    assert w.require("tp", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm") == (2, 16, 12, 8, 24, 9216, 50331648)


def test_micro_example_loads(examples):
    # Space-aligned fields, trailing blanks, no pp_comm key and no newline at the end of the file.
    raw = (examples / "simai_micro_allreduce.txt").read_bytes()
    assert not raw.endswith(b"\n")
    w = SimAIWorkload.read(examples / "simai_micro_allreduce.txt")
    assert [r.fwd_size_bytes for r in w] == [16777216, 67108864]
    assert w.records[0] == SimAILayer("embedding_layer", -1, 556000, "ALLREDUCE", 16777216, 1, "NONE", 0, 1, "NONE", 0, 1)
    assert w.header.tp == 8 and w.header.pp == 1 and w.header.pp_comm is None
    # Writing needs every transformer key: pp_comm is named, then the file round-trips.
    with pytest.raises(FormatError, match="missing header key 'pp_comm'"):
        w.dumps()
    w.header.pp_comm = 0
    again = SimAIWorkload.loads(w.dumps())
    assert again.records == w.records and again.header.pp_comm == 0


def test_aicb_example_loads_leniently(examples):
    path = examples / "aicb_simai_L7B_megatron_tp2_pp1_mbs1_A100.txt"
    w = SimAIWorkload.read(path, strict=False)
    assert len(w) == 76 and w.records[0].fwd_comm == "BROADCAST"
    assert w.header.tp == 2 and w.header.ep is None and w.header.pp is None
    # AICB's incomplete header: each missing key is named when a consumer needs it.
    with pytest.raises(FormatError) as info:
        w.require("tp", "ep", "pp", "ga")
    assert info.value.line == 1 and info.value.field == "ep, pp, ga"
    assert "missing header keys 'ep', 'pp', 'ga'" in str(info.value) and str(path) in str(info.value)
    # Strictly, its BROADCAST token is refused with file, line and field.
    with pytest.raises(FormatError, match="unknown comm token 'BROADCAST'") as info:
        SimAIWorkload.read(path)
    assert (info.value.line, info.value.field) == (3, "fwd_comm")


# ---- round trips ----------------------------------------------------------------------------

def test_written_file_round_trips_byte_identically(examples, tmp_path):
    original = SimAIWorkload.read(examples / "simai_workload_analytical.txt")
    first = tmp_path / "a.txt"
    second = tmp_path / "b.txt"
    original.write(first)
    reread = SimAIWorkload.read(first)
    assert reread.records == original.records
    assert reread.header == original.header
    built = SimAIHeader.transformer(tp=2, ep=16, pp=12, vpp=8, ga=24, all_gpus=9216, pp_comm=50331648)
    assert built == original.header and built.format() == original.header.format()
    reread.write(second)
    assert first.read_bytes() == second.read_bytes()
    lines = first.read_text().splitlines()
    # One record per line, tab-separated, pp_comm with a colon and an integer.
    assert lines[0].endswith("checkpoints: 0 checkpoint_initiates: 0 pp_comm: 50331648")
    assert lines[1] == "1789"
    assert lines[2] == "grad_gather\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLGATHER\t2807758848\t100"
    assert len(lines) == 1791


def test_header_key_order_and_unknown_keys_are_kept():
    header = ("HYBRID_TRANSFORMER custom: a b model_parallel_NPU_group: 4 pp: 1 ep: 1 vpp: 2 ga: 1 all_gpus: 4 "
              "checkpoints: 2 3 5 checkpoint_initiates: 0 pp_comm: 0")
    w = SimAIWorkload.loads(text(REC, header=header))
    assert w.header.extra == {"custom": "a b"}
    assert w.header.checkpoints == (3, 5) and w.require("checkpoints") == (2,)
    assert w.dumps().splitlines()[0] == header


def test_pp_comm_spellings():
    base = "HYBRID_TRANSFORMER model_parallel_NPU_group: 2 ep: 1 pp: 2 vpp: 1 ga: 1 all_gpus: 4"
    for spelling in ("pp_comm: 6291456", "pp_comm 6291456", "pp_comm: 6291456.0", "pp_comm 6291456.000"):
        for strict in (True, False):
            w = SimAIWorkload.loads(text(REC, header=f"{base} {spelling}"), strict=strict)
            assert w.header.pp_comm == 6291456
    # A fraction: SimAI's stoi reads the leading integer; strict mode refuses it.
    w = SimAIWorkload.loads(text(REC, header=f"{base} pp_comm: 6291456.5"), strict=False)
    assert w.header.pp_comm == 6291456 and "stoi" in w.warnings[0]
    expect_error(text(REC, header=f"{base} pp_comm: 6291456.5"), 1, "pp_comm", "expected an integer")


def test_records_on_any_line_breaks_read_leniently():
    flat = " ".join(REC.split("\t") * 3)
    reflowed = "\n".join(flat.replace(" ", "\n", 5).split(" ", 7)) + "\n\n"
    w = SimAIWorkload.loads(text(reflowed, count=3), strict=False)
    assert len(w) == 3 and all(r == w.records[0] for r in w)
    assert w.records[0] == SimAILayer("attn", -1, 10, "ALLREDUCE", 4096, 20, "NONE", 0, 30, "ALLGATHER", 8192, 100)
    # Trailing data after N records: ignored with a warning, as SimAI ignores it.
    w = SimAIWorkload.loads(text(REC, REC, count=1), strict=False)
    assert len(w) == 1 and "ignored" in w.warnings[0]


def test_customized_policy_has_a_thirteenth_field():
    header = "HYBRID_CUSTOMIZED"
    w = SimAIWorkload.loads(text(REC + "\tDATA", header=header))
    assert w.records[0].policy == "DATA"
    assert SimAIWorkload.loads(w.dumps()).records == w.records
    expect_error(text(REC, header=header), 3, "policy", "expected 13 fields, found 12")


def test_non_transformer_policy_needs_no_keys():
    w = SimAIWorkload.loads(text(REC, header="DATA"))
    assert not w.header.is_transformer
    assert w.dumps() == text(REC, header="DATA")
    with pytest.raises(FormatError, match="missing header key 'model_parallel_NPU_group'"):
        w.require("tp")


# ---- errors name file, line and field ---------------------------------------------------------

def test_bad_token_strict_only():
    body = text(REC, REC.replace("ALLGATHER", "ALLGATHER_TP"))
    expect_error(body, 4, "wg_comm", "unknown comm token 'ALLGATHER_TP'")
    assert SimAIWorkload.loads(body, strict=False).records[1].wg_comm == "ALLGATHER_TP"


def test_wrong_field_count():
    expect_error(text(REC.rsplit("\t", 1)[0]), 3, "update_ns", "expected 12 fields, found 11.*missing field 'update_ns'")
    expect_error(text(REC + "\t7"), 3, "update_ns", "expected 12 fields, found 13")
    # Leniently the record is completed from the next line; an incomplete last record is an error.
    expect_error(text(REC.rsplit("\t", 1)[0]), 3, "update_ns", "incomplete record: 11 of 12 fields", strict=False)


def test_record_count_mismatch():
    expect_error(text(REC, count=2), 2, "record count", "announces 2 records but the file holds 1")
    expect_error(text(REC, count=2), 2, "record count", "announces 2 records", strict=False)
    expect_error(text(REC, REC, count=1), 4, "record count", "more records than the 1 announced")
    expect_error(text(REC, count=0).replace("\n0\n", "\nmany\n"), 2, "record count", "number of layer records")


def test_non_integer_numbers():
    bad = REC.replace("\t10\t", "\t1.5\t", 1)
    for strict in (True, False):
        expect_error(text(REC, bad), 4, "fwd_compute_ns", r"expected a non-negative integer \(ns\), got '1.5'", strict)
    expect_error(text(REC.replace("\t8192\t", "\t-8\t")), 3, "wg_size_bytes", r"\(bytes\), got '-8'")
    expect_error(text(REC.replace("\t-1\t", "\tx\t")), 3, "dependency", "expected an integer, got 'x'")


def test_header_errors():
    expect_error(text(REC, header="HYBRID_TRANSFORMERS model_parallel_NPU_group: 2"), 1, "policy", "unknown policy")
    expect_error(text(REC, header=HEADER.replace("ga: 3", "ga: three")), 1, "ga", "expected an integer")
    expect_error(text(REC, header=HEADER.replace("ga: 3", "ga: 3 4")), 1, "ga", "unexpected tokens")
    # Leniently an unreadable value is kept aside and reported when the key is needed.
    w = SimAIWorkload.loads(text(REC, header=HEADER.replace("ga: 3", "ga: three")), path="w.txt", strict=False)
    with pytest.raises(FormatError, match="'ga' has value 'three', expected an integer") as info:
        w.require("tp", "ga")
    assert (info.value.line, info.value.field) == (1, "ga")
    zero = SimAIWorkload.loads(text(REC, header=HEADER.replace("vpp: 4", "vpp: 0")), path="w.txt")
    with pytest.raises(FormatError, match="'vpp' is 0, must be at least 1"):
        zero.require("vpp")
    expect_error("", 1, "policy", "empty first line")
    expect_error(HEADER + "\n", 2, "record count", "line 2 must hold N")


def test_read_missing_file(tmp_path):
    with pytest.raises(FormatError, match="cannot read"):
        SimAIWorkload.read(tmp_path / "nope.txt")


# ---- the writer validates ---------------------------------------------------------------------

def good() -> SimAIWorkload:
    return SimAIWorkload(SimAIHeader.transformer(tp=2, ep=1, pp=2, vpp=4, ga=3, all_gpus=8, pp_comm=1024),
                         [SimAILayer("attn", -1, 10, "ALLREDUCE", 4096, 20, "NONE", 0, 30, "ALLGATHER", 8192, 100)])


@pytest.mark.parametrize("change, line, field, match", [
    (lambda w: setattr(w.records[0], "fwd_comm", "BROADCAST"), 3, "fwd_comm", "comm token 'BROADCAST'"),
    (lambda w: setattr(w.records[0], "ig_size_bytes", -1), 3, "ig_size_bytes", "must not be negative"),
    (lambda w: setattr(w.records[0], "wg_compute_ns", 1.5), 3, "wg_compute_ns", "expected an integer"),
    (lambda w: setattr(w.records[0], "name", "two words"), 3, "name", "one token"),
    (lambda w: setattr(w.header, "ga", None), 1, "ga", "missing header key 'ga'"),
    (lambda w: setattr(w.header, "pp_comm", 6291456.0), 1, "pp_comm", "expected an integer"),
    (lambda w: setattr(w.header, "pp_comm", 0), 1, "pp_comm", "0 exactly when pp is 1"),
    (lambda w: setattr(w.header, "policy", "TRANSFORMER"), 1, "policy", "unknown policy"),
])
def test_writer_refuses_what_simai_would_warn_about(tmp_path, change, line, field, match):
    w = good()
    change(w)
    target = tmp_path / "out.txt"
    with pytest.raises(FormatError, match=match) as info:
        w.write(target)
    assert (info.value.line, info.value.field) == (line, field)
    assert str(target) in str(info.value)
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_writer_accepts_numpy_style_integers():
    class Index:  # an integer type that is not int (numpy.int64 behaves so)
        def __index__(self) -> int:
            return 7

    w = good()
    w.records[0].update_ns = Index()
    assert w.dumps().splitlines()[2].endswith("\t7")


# ---- property test ----------------------------------------------------------------------------

names = st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll", "Nd"), whitelist_characters="_.-"),
                min_size=1, max_size=12).filter(lambda s: s.isascii())
sizes = st.integers(min_value=0, max_value=2**63)
tokens = st.sampled_from(sorted(VALID_TOKENS))
records = st.builds(SimAILayer, names, st.integers(-5, 5), sizes, tokens, sizes, sizes, tokens, sizes, sizes, tokens,
                    sizes, sizes)


@settings(max_examples=60, deadline=None)
@given(st.lists(records, max_size=20), st.lists(st.sampled_from([" ", "\t", "\n", "  \t", "\n\n"]), min_size=1))
def test_property_round_trip(layer_records, separators):
    w = SimAIWorkload(SimAIHeader.transformer(tp=2, ep=1, pp=1, vpp=1, ga=1, all_gpus=2, pp_comm=0), layer_records)
    dumped = w.dumps()
    back = SimAIWorkload.loads(dumped)
    assert back.records == layer_records
    assert back.dumps() == dumped
    # SimAI's view: the same tokens with any whitespace between them read to the same records.
    flat = [tok for r in layer_records for tok in map(str, r.fields())]
    body = "".join(tok + separators[i % len(separators)] for i, tok in enumerate(flat))
    assert SimAIWorkload.loads(dumped.split("\n", 2)[0] + f"\n{len(layer_records)}\n" + body, strict=False).records \
        == layer_records
