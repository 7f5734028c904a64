"""SimAI 1.7's size-dependent bandwidth-efficiency ratio tables and their lookup.

Values as listed in docs/simai_analytical.md, "Size-dependent efficiency ratio" (SimAI ships them as
``nic_ratio.csv``, ``nvlink_ratio.csv`` and ``ata_ratio.csv``).  Rows are message sizes in bytes
(16 MiB .. 16 GiB); columns are node counts 1, 2, 4, 8, 16, 32, 64, 128 and "Multi".  The nvlink
and ata tables have no 32/64/128 columns: SimAI reads the empty cells as 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cfloat import f32

NODE_COLUMNS = {1: 0, 2: 1, 4: 2, 8: 3, 16: 4, 32: 5, 64: 6, 128: 7, 9: 8}
"""Node count -> column.  SimAI codes the "Multi" column as node count 9, so a computed node count
of exactly 9 also lands there; any other node count uses the 16 column."""
DEFAULT_COLUMN = NODE_COLUMNS[16]

_SIZES = (16777216, 33554432, 67108864, 134217728, 268435456, 536870912, 1073741824, 2147483648, 4294967296,
          8589934592, 17179869184)
_NIC = """
.45 .32 .24 .13 .05 .044 .021 .0087 .86
.55 .47 .38 .24 .11 .052 .042 .021225 .92
.65 .50 .53 .39 .21 .106 .051 .04405 .94
.69 .67 .67 .54 .38 .205 .107 .0533 .94
.73 .85 .77 .69 .57 .387 .209 .1027 .94
.76 .89 .85 .78 .73 .562 .384 .1902 .95
.77 .92 .93 .90 .76 .74 .563 .314575 .96
.78 .94 .94 .94 .92 .758 .745 .553525 .96
.79 .95 .95 .95 .95 .923 .755 .740175 .96
.80 .95 .96 .96 .96 .953 .914 .7648 .96
.81 .96 .96 .96 .96 .957 .958 .919175 .96
"""
# nvlink and ata: columns 1 2 4 8 16 Multi; the 32/64/128 cells are empty (= 1) in SimAI's files.
_NVLINK = """
.45 .55 .34 .16 .08 .86
.55 .68 .60 .34 .16 .92
.65 .74 .71 .62 .33 .94
.69 .80 .74 .70 .65 .94
.73 .84 .79 .78 .72 .94
.76 .86 .86 .82 .75 .95
.77 .87 .87 .86 .83 .96
.78 .87 .87 .87 .86 .96
.79 .88 .88 .88 .87 .96
.80 .88 .88 .88 .88 .96
.81 .88 .88 .88 .88 .96
"""
_ATA = """
.44 .52 .67 .64 .62 .86
.51 .63 .68 .67 .66 .92
.60 .72 .83 .82 .66 .94
.65 .76 .90 .85 .72 .94
.70 .79 .92 .87 .75 .94
.71 .80 .94 .89 .81 .95
.74 .81 .94 .92 .85 .96
.76 .81 .95 .93 .88 .96
.77 .80 .95 .94 .89 .96
.78 .80 .95 .94 .90 .96
.78 .80 .95 .94 .90 .96
"""


@dataclass(frozen=True)
class RatioTable:
    """One ratio table: ``rows[i][column]`` is the efficiency at ``sizes[i]`` bytes."""

    name: str
    sizes: tuple[float, ...]
    rows: tuple[tuple[float, ...], ...]

    @property
    def max_size(self) -> int:
        """The last row's size in bytes (16 GiB); SimAI aborts above it."""
        return int(self.sizes[-1])

    def lookup(self, size_bytes: int, node_count: int) -> float:
        """The ratio for a message of ``size_bytes`` over ``node_count`` nodes, as a float32.

        Size 0 gives 1; below the first row the first row; otherwise linear interpolation between
        the bracketing rows; the result divided by the last (16 GiB) row of the same column.  Sizes
        above 16 GiB are clamped to the last row (SimAI throws there; callers warn).  Arithmetic in
        double, returned through float as SimAI's ``getValue`` returns ``float``.
        """
        column = NODE_COLUMNS.get(node_count, DEFAULT_COLUMN)
        if size_bytes == 0:
            return 1.0
        last = self.rows[-1][column]
        if size_bytes < self.sizes[0]:
            return f32(self.rows[0][column] / last)
        sizes = self.sizes
        for i in range(len(sizes) - 1):
            size1, size2 = sizes[i], sizes[i + 1]
            if size1 <= size_bytes <= size2:
                value1, value2 = self.rows[i][column], self.rows[i + 1][column]
                # SimAI's interpolate(): value1 + (value2 - value1) * (size - size1) / (size2 - size1)
                return f32((value1 + (value2 - value1) * (size_bytes - size1) / (size2 - size1)) / last)
        return f32(last / last)


def _table(name: str, text: str, padded: bool) -> RatioTable:
    rows = []
    for line in text.strip().splitlines():
        values = [float(v) for v in line.split()]
        if padded:  # 1 2 4 8 16 | 32 64 128 empty (= 1) | Multi
            values = values[:5] + [1.0, 1.0, 1.0] + values[5:]
        rows.append(tuple(values))
    return RatioTable(name, tuple(float(s) for s in _SIZES), tuple(rows))


NIC = _table("nic", _NIC, padded=False)
NVLINK = _table("nvlink", _NVLINK, padded=True)
ATA = _table("ata", _ATA, padded=True)
