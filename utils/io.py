"""File output that never leaves a partial file behind, and text input with one clear error."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from utils.errors import FormatError


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", newline: str | None = "") -> Iterator[IO]:
    """Open a temporary file next to ``path``; rename it over ``path`` only if the block succeeds.

    ``newline=""`` keeps ``\\n`` line ends on every platform (the csv module and our writers add
    them).  Parent directories are created.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        kwargs = {} if "b" in mode else {"newline": newline, "encoding": "utf-8"}
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
        # mkstemp creates 0600 files; give the result the permissions a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_text(path: str | os.PathLike, expected: str, what: str = "") -> str:
    """The whole text of a UTF-8 file (line ends as written), or a :class:`FormatError` naming it:
    ``cannot read[ what]: <reason>`` or ``not a text file (expected <expected>)``."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except OSError as exc:
        raise FormatError(path, f"cannot read{' ' + what if what else ''}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise FormatError(path, f"not a text file (expected {expected})") from None
