"""File output that never leaves a partial file behind, and text input with one clear error."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from utils.errors import FormatError


def _temporary(directory: str, name: str) -> tuple[int, str]:
    """A new file ``.<name>.<random>.tmp`` in ``directory``, opened exclusively with mode 0600 (what
    ``tempfile.mkstemp`` does, without importing tempfile: every command that writes a file pays that
    import otherwise)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name for {name} in {directory}")


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", newline: str | None = "") -> Iterator[IO]:
    """Open a temporary file next to ``path``; rename it over ``path`` only if the block succeeds.

    ``newline=""`` keeps ``\\n`` line ends on every platform (the csv module and our writers add
    them).  Parent directories are created.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = _temporary(directory, os.path.basename(path))
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
