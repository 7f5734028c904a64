"""AICB workload CSV: byte-for-byte round trips of our files, AICB's own files, clear errors."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from utils.errors import FormatError
from utils.workload import CSV_COLUMNS, CommGroup, CommType, WorkItem, Workload, parse_shapes

HEADER = ",".join(CSV_COLUMNS)


def _write(tmp_path, text, name="w.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_aicb_sample_loads_and_reproduces(examples, tmp_path):
    src = examples / "aicb_workload_L7B_megatron_tp2_pp1_mbs1.csv"
    workload = Workload.load(src)
    # AICB's LLaMA-7B tp2 file: 7 init items, the epoch marker, 140 items and the final marker
    assert len(workload) == 149
    init, first = workload.iterations()
    assert len(init) == 7 and len(first) == 140
    row = workload[10]
    assert (row.comm_type, row.comm_group, row.comm_group_size, row.msg_size) == (
        CommType.all_reduce, CommGroup.tp_group, 2, 16777216)
    # 16777216 = 2 bytes * seq 2048 * micro-batch 1 * hidden 4096
    bcast = workload[5]
    assert (bcast.comm_type, bcast.src, bcast.dst) == (CommType.broadcast, 0, None)
    # Our writer reproduces AICB's rows exactly (the legacy "[rank0 ~ rank127]" line is dropped)
    out = tmp_path / "out.csv"
    workload.dump(out)
    assert out.read_text().splitlines() == src.read_text().splitlines()[1:]


def test_round_trip_bytes(tmp_path):
    items = [
        WorkItem(CommType.all_reduce, CommGroup.dp_group, 64, 8, "init.model_setup"),
        WorkItem(CommType.broadcast, CommGroup.tp_group, 2, 24, "init.model_setup", src=0),
        WorkItem(CommType.epoch_end),
        WorkItem(CommType.computation, stage="forward.MegatronColumnLinear", shapes=((4096, 1, 5120), (5120, 7680)),
                 time_ns=539986),
        WorkItem(CommType.isend, CommGroup.pp_group, 2, 16777216, "forward_step", dst=1, additional="send_next"),
        WorkItem(CommType.all_gather, CommGroup.tp_group, 8, 123, "forward", time_ns=1.5, algbw=0.25, busbw=1e-05),
        WorkItem(CommType.epoch_end),
    ]
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    Workload(items).dump(first)
    Workload.load(first).dump(second)
    assert first.read_bytes() == second.read_bytes()
    text = first.read_text().splitlines()
    assert text[0] == HEADER
    assert text[4] == "CommType.computation,None,None,((4096 1 5120) (5120 7680)),forward.MegatronColumnLinear," \
                      "None,None,,539986,None,None,1"
    loaded = Workload.load(first)
    assert loaded[3].shapes == ((4096, 1, 5120), (5120, 7680))
    assert loaded[4].additional == "send_next" and loaded[4].dst == 1


def test_aicb_variants(tmp_path):
    text = "\n".join([
        "[rank0 ~ rank127]",
        HEADER,
        # pandas-written floats and -1 for missing cells (AICB's WorkloadWriter.fillna(-1))
        "CommType.all_reduce,CommGroup.tp_group,2.0,16777216.0,forward,-1,-1,,-1,-1,-1,1.0",
        # Python's tuple form, quoted because of its commas
        'CommType.computation,None,None,"((4096, 1, 5120), (5120, 7680))",forward.Linear,None,None,,None,None,None,1',
        "CommType.all_gather_into_tensor,CommGroup.all,4,64,init,None,None,None,None,None,None,1",
        "",
    ])
    items = Workload.load(_write(tmp_path, text)).items
    assert items[0].comm_group_size == 2 and items[0].msg_size == 16777216 and items[0].dst is None
    assert items[0].time_ns is None  # AICB's -1 for a missing cell
    assert items[1].shapes == ((4096, 1, 5120), (5120, 7680))
    assert items[2].comm_type is CommType.all_gather and items[2].comm_group is CommGroup.all_nodes
    assert items[2].additional is None


@pytest.mark.parametrize("row, message", [
    ("CommType.all_reduse,CommGroup.tp_group,2,8,fwd,None,None,,None,None,None,1",
     r"w.csv:2: comm_type: expected CommType.<name> with name one of all_reduce"),
    ("CommType.all_reduce,CommGroup.xx_group,2,8,fwd,None,None,,None,None,None,1",
     r"w.csv:2: comm_group: expected CommGroup.<name>"),
    ("CommType.all_reduce,CommGroup.tp_group,two,8,fwd,None,None,,None,None,None,1",
     r"w.csv:2: comm_group_size: expected a positive integer or None; got 'two'"),
    ("CommType.all_reduce,CommGroup.tp_group,2,8MB,fwd,None,None,,None,None,None,1",
     r"w.csv:2: msg_size: expected a byte count .* got '8MB'"),
    ("CommType.computation,None,None,((4096 x) (1 2)),fwd,None,None,,None,None,None,1",
     r"w.csv:2: msg_size: expected a byte count .*computation shapes"),
    ("CommType.all_reduce,CommGroup.tp_group,2,8,fwd,None,None,,fast,None,None,1",
     r"w.csv:2: _elapsed_time: expected a non-negative number or None; got 'fast'"),
    # NaN, negative values, a zero count, beyond int64 and a collective without its group
    ("CommType.all_reduce,CommGroup.tp_group,2,8,fwd,None,None,,nan,None,None,1",
     r"w.csv:2: _elapsed_time: expected a non-negative number or None; got 'nan'"),
    ("CommType.all_reduce,CommGroup.tp_group,2,8,fwd,None,None,,None,-3.5,None,1",
     r"w.csv:2: algbw: expected a non-negative number or None; got '-3.5'"),
    # a time no clock holds: the replay's sleep raised OverflowError (a traceback) after writing its log's header
    ("CommType.computation,None,None,0,fwd,None,None,,1e30,None,None,1",
     r"w.csv:2: _elapsed_time: '1e30' is beyond the largest time the formats hold \(9223372036854775807\)"),
    ("CommType.all_reduce,CommGroup.tp_group,NaN,8,fwd,None,None,,None,None,None,1",
     r"w.csv:2: comm_group_size: expected a positive integer or None; got 'NaN'"),
    ("CommType.all_reduce,CommGroup.tp_group,0,8,fwd,None,None,,None,None,None,1",
     r"w.csv:2: comm_group_size: expected a positive integer or None; got '0'"),
    ("CommType.all_reduce,CommGroup.tp_group,2,-1,fwd,None,None,,None,None,None,1",
     r"w.csv:2: msg_size: expected a byte count"),
    ("CommType.all_reduce,CommGroup.tp_group,2,99999999999999999999,fwd,None,None,,None,None,None,1",
     r"w.csv:2: msg_size: expected a byte count"),
    ("CommType.all_reduce,CommGroup.tp_group,2,8,fwd,-2,None,,None,None,None,1",
     r"w.csv:2: dst: expected a rank inside the group"),
    ("CommType.all_reduce,CommGroup.tp_group,2,8,fwd,None,None,,None,None,None,0",
     r"w.csv:2: count: expected a positive integer; got '0'"),
    ("CommType.all_reduce,CommGroup.tp_group,None,8,fwd,None,None,,None,None,None,1",
     r"w.csv:2: comm_group_size: all_reduce needs its group size"),
    ("CommType.all_reduce,CommGroup.tp_group,2,8,fwd",
     r"w.csv:2: expected 12 comma-separated fields .* got 5"),
])
def test_malformed_rows(tmp_path, row, message):
    with pytest.raises(FormatError, match=message):
        Workload.load(_write(tmp_path, HEADER + "\n" + row + "\n"))


def test_bad_files(tmp_path):
    with pytest.raises(FormatError, match="empty file"):
        Workload.load(_write(tmp_path, ""))
    with pytest.raises(FormatError, match=r"w.csv:1: header lacks column\(s\) msg_size"):
        Workload.load(_write(tmp_path, "comm_type,comm_group,comm_group_size,stage\n"))
    with pytest.raises(FormatError, match="cannot read"):
        Workload.load(tmp_path / "missing.csv")



def test_a_byte_order_mark_is_read_past(examples, tmp_path):
    """Excel's "CSV UTF-8" and pandas' encoding="utf-8-sig" start the file with a byte-order mark: the reader saw a
    column named '\ufeffcomm_type' and said 'header lacks column(s) comm_type' of a header that shows it."""
    source = examples / "aicb_workload_L7B_megatron_tp2_pp1_mbs1.csv"
    marked = tmp_path / "excel.csv"
    marked.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
    assert [i.comm_type for i in Workload.load(marked)] == [i.comm_type for i in Workload.load(source)]


def test_a_simai_file_is_named_as_such(examples):
    """Before: a SimAI workload file given where an AICB CSV is read (aicb.py --workload, SimAI users' first try)
    was told 'header lacks column(s) comm_type, ...', not what the file is and which command takes it."""
    with pytest.raises(FormatError, match=r"simai_micro_allreduce.txt:1: a SimAI workload file \(python -m simulator "
                                          r"-w reads it\), not an AICB workload CSV"):
        Workload.load(examples / "simai_micro_allreduce.txt")


def test_dump_is_atomic(tmp_path):
    class Boom(Exception):
        pass

    class BadGroup:
        def __str__(self):
            raise Boom()

    target = tmp_path / "out.csv"
    with pytest.raises(Boom):
        Workload([WorkItem(CommType.barrier), WorkItem(CommType.barrier, comm_group=BadGroup())]).dump(target)
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_parse_shapes():
    assert parse_shapes("((1 2 3) (3 4))") == ((1, 2, 3), (3, 4))
    with pytest.raises(ValueError):
        parse_shapes("((1 2) junk)")


_ints = st.one_of(st.none(), st.integers(0, 2**40))
_floats = st.one_of(st.none(), st.floats(0, 1e300, allow_nan=False, allow_infinity=False), st.integers(0, 10**12))
# times are bounded by int64 (a computation's ns the replay sleeps; beyond it the reader refuses the row)
_times = st.one_of(st.none(), st.floats(0, 9e18, allow_nan=False, allow_infinity=False), st.integers(0, 2**63 - 1))
_GROUPLESS = (CommType.computation, CommType.epoch_end, CommType.barrier)
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters=",\"\r\n"),
                max_size=20).map(str.strip)
_items = st.builds(
    WorkItem,
    comm_type=st.sampled_from(list(CommType)),
    comm_group=st.one_of(st.none(), st.sampled_from(list(CommGroup))),
    comm_group_size=st.one_of(st.none(), st.integers(1, 65536)),
    msg_size=st.integers(0, 2**44),
    stage=_text.filter(lambda s: s not in ("None", "nan", "NaN", "none", "null")),
    dst=_ints, src=_ints,
    additional=st.one_of(st.none(), st.sampled_from(["send_next", "recv_prev", "send_prev", "recv_next"])),
    time_ns=_times, algbw=_floats, busbw=_floats,
    count=st.integers(1, 100),
    shapes=st.one_of(st.none(), st.lists(st.lists(st.integers(1, 10**6), min_size=1, max_size=4).map(tuple),
                                         min_size=1, max_size=3).map(tuple)),
).filter(lambda item: item.comm_group_size is not None or item.comm_type in _GROUPLESS)


@settings(max_examples=150, deadline=None)
@given(st.lists(_items, max_size=20))
def test_round_trip_property(tmp_path_factory, items):
    tmp = tmp_path_factory.mktemp("rt")
    first, second = tmp / "a.csv", tmp / "b.csv"
    Workload(items).dump(first)
    loaded = Workload.load(first)
    loaded.dump(second)
    assert first.read_bytes() == second.read_bytes()
    assert [i.comm_type for i in loaded] == [i.comm_type for i in items]
    assert [i.shapes for i in loaded] == [i.shapes for i in items]
