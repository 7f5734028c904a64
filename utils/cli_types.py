"""argparse value types shared by the command lines (numbers, integers written as ``5e8``, fractions).

Every type refuses NaN and infinities, and the integer types values beyond int64, with one line naming the
value; the flag tables (:mod:`utils.cli_flags`) pick the type that states each flag's range."""

from __future__ import annotations

import argparse
import math

INT64_MAX = 2**63 - 1
"""The largest integer a flag takes: every count and size lands in an int64 column of some file."""


def integer(text: str) -> int:
    """argparse type: an integer, also written as ``5e8`` or ``1_000`` (AICB's bucket sizes are often
    given so); NaN, infinities and values beyond int64 are refused."""
    clean = str(text).strip().replace("_", "")
    try:
        value: float = int(clean)
    except ValueError:
        try:
            value = float(clean)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite integer, got {text!r}")
    if value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    if abs(int(value)) > INT64_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is beyond the largest integer taken ({INT64_MAX})")
    return int(value)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def path_text(text: str) -> str:
    """argparse type of a file or folder flag: any path but an empty one, which the commands would take as the flag
    not given (``--workload "$FILE"`` with FILE unset replayed a generated workload instead)."""
    if not text:
        raise argparse.ArgumentTypeError("empty path (give a file or folder)")
    return text


def pp_rank_type(text: str) -> int:
    """argparse type of ``--pp_rank``: a stage index >= 0, or AICB's -1 (meaning 0)."""
    value = integer(text)
    if value < -1:
        raise argparse.ArgumentTypeError(f"expected a pipeline stage >= 0 (or AICB's -1), got {text!r}")
    return value


def number(text: str) -> float:
    """argparse type: a finite real number (NaN and infinities are refused)."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


finite_float = number


def positive_number(text: str) -> float:
    """argparse type: a finite number > 0."""
    value = number(text)
    if not value > 0.0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


finite_positive_float = positive_number


def fraction(text: str) -> float:
    """argparse type: a number in (0, 1]."""
    value = number(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}")
    return value


def probability(text: str) -> float:
    """argparse type: a probability in [0, 1) (a dropout rate)."""
    value = number(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got {text!r}")
    return value


def non_negative(text: str) -> float:
    """argparse type: a finite number >= 0."""
    value = number(text)
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def spellings(name: str) -> list[str]:
    """Every spelling of a long flag: ``--a_b`` and ``--a-b`` (Megatron users type both)."""
    if name.startswith("--"):
        body = name[2:]
        return list(dict.fromkeys([name, "--" + body.replace("-", "_"), "--" + body.replace("_", "-")]))
    return [name]


def int_pair(text: str) -> tuple[int, int]:
    """argparse type: two integers separated by a comma (``--window_size 128,0``), each >= -1."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected two integers separated by a comma, got {text!r}")
    left, right = integer(parts[0]), integer(parts[1])
    if left < -1 or right < -1:
        raise argparse.ArgumentTypeError(f"expected integers >= -1 (-1: unbounded), got {text!r}")
    return left, right


def int_tuple(text: str) -> tuple[int, ...]:
    """argparse type: positive integers separated by commas (``--hierarchical_context_parallel_sizes 2,4``)."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return tuple(positive_int(p) for p in parts)


def at_least_one(text: str) -> float:
    """argparse type: a finite number >= 1 (a ratio such as the busiest expert's load over the mean)."""
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {text!r}")
    return value
