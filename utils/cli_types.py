"""argparse value types shared by the command lines (numbers, integers written as ``5e8``, fractions)."""

from __future__ import annotations

import argparse


def integer(text: str) -> int:
    """argparse type: an integer, also written as ``5e8`` or ``1_000`` (AICB's bucket sizes are often
    given so)."""
    try:
        value = float(text.replace("_", "")) if any(c in text for c in ".eE") else int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer: {text!r}") from None
    if value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(value)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = integer(text)
    except argparse.ArgumentTypeError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def number(text: str) -> float:
    """argparse type: a real number."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def positive_number(text: str) -> float:
    """argparse type: a number > 0."""
    value = number(text)
    if not value > 0.0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def fraction(text: str) -> float:
    """argparse type: a number in (0, 1]."""
    value = number(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}")
    return value


def non_negative(text: str) -> float:
    """argparse type: a number >= 0."""
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
