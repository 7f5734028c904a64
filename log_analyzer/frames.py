"""Work items as the typed pandas table a :class:`~log_analyzer.log.Log` holds: one row per item with its
iteration, the ``epoch_end`` markers apart.  The log reader and the workload summaries build on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from utils.workload import CommType, WorkItem, format_shapes

if TYPE_CHECKING:
    import pandas as pd

_INT_COLUMNS = ("comm_group_size", "msg_size", "dst", "src", "count")


def _items_frame(items: Sequence[WorkItem]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The log's rows as (items without epoch_end, epoch_end rows) with iteration numbers."""
    import pandas as pd

    rows, epochs = [], []
    iteration = 0
    for index, item in enumerate(items):
        if item.is_epoch_end:
            epochs.append({"row": index, "iteration": iteration, "time_ms": item.time_ns})
            iteration += 1
            continue
        rows.append({
            "row": index, "iteration": iteration, "comm_type": item.comm_type.value,
            "comm_group": item.comm_group.value if item.comm_group is not None else None,
            "comm_group_size": item.comm_group_size, "msg_size": item.msg_size,
            "shapes": format_shapes(item.shapes) if item.shapes is not None else None, "stage": item.stage,
            "dst": item.dst, "src": item.src, "additional": item.additional,
            # the reader keeps the CSV's _elapsed_time in time_ns; in a log it is milliseconds
            "elapsed_ms": item.time_ns, "algbw_gbps": item.algbw, "busbw_gbps": item.busbw, "count": item.count,
        })
    columns = ["row", "iteration", "comm_type", "comm_group", "comm_group_size", "msg_size", "shapes", "stage", "dst",
               "src", "additional", "elapsed_ms", "algbw_gbps", "busbw_gbps", "count"]
    frame = pd.DataFrame(rows, columns=columns)
    for column in ("row", "iteration", *_INT_COLUMNS):
        frame[column] = frame[column].astype("Int64")
    for column in ("elapsed_ms", "algbw_gbps", "busbw_gbps"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    frame["comm_type"] = pd.Categorical(frame["comm_type"], categories=[t.value for t in CommType])
    for column in ("comm_group", "shapes", "stage", "additional"):
        frame[column] = frame[column].astype("string")
    epoch_frame = pd.DataFrame(epochs, columns=["row", "iteration", "time_ms"])
    epoch_frame = epoch_frame.astype({"row": "Int64", "iteration": "Int64", "time_ms": "float64"})
    return frame, epoch_frame
