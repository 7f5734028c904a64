"""File output that never leaves a partial file behind, and text input with one clear error."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from utils.errors import FormatError, UserError

STALE_TMP_S = 600.0
"""A temporary file of ours untouched for this long belongs to a writer that was killed (a live writer
keeps writing or renames it within seconds); the next write of the same file removes it."""


class OutputError(UserError):
    """An output path that cannot be written (a folder, a read-only folder, a parent that is a file)."""


def _remove_stale(directory: str, name: str) -> None:
    """Remove our leftover ``.<name>.XXXX.tmp`` files older than :data:`STALE_TMP_S` (a killed writer's)."""
    import time

    prefix = "." + name + "."
    try:
        entries = os.listdir(directory)
    except OSError:
        return
    now = time.time()
    for entry in entries:
        if entry.startswith(prefix) and entry.endswith(".tmp"):
            full = os.path.join(directory, entry)
            try:
                if now - os.path.getmtime(full) > STALE_TMP_S:
                    os.unlink(full)
            except OSError:
                pass


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
    them).  Parent directories are created.  A path that cannot be written raises :class:`OutputError`
    naming it (one line for the user, no traceback); stale temporaries a killed writer left beside
    ``path`` are removed first.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise OutputError(f"cannot write {path}: it is a folder (give a file name)")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        _remove_stale(directory, os.path.basename(path))
        fd, tmp = _temporary(directory, os.path.basename(path))
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_why(directory, exc)}") from None
    try:
        kwargs = {} if "b" in mode else {"newline": newline, "encoding": "utf-8"}
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
        # mkstemp creates 0600 files; give the result the permissions a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and not isinstance(exc, (BrokenPipeError,)):
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise


def check_not_input(outputs: dict[str, str | os.PathLike | None], inputs: dict[str, str | os.PathLike | None]) -> None:
    """Refuse an output that is one of the inputs (writing it would destroy the input): ``outputs`` and
    ``inputs`` map a flag (``-o/--output``) to its path.  Raises :class:`OutputError` naming both."""
    def same(a: str | os.PathLike, b: str | os.PathLike) -> bool:
        try:
            return os.path.samefile(a, b)
        except OSError:
            return os.path.abspath(a) == os.path.abspath(b)

    for out_flag, out in outputs.items():
        for in_flag, src in inputs.items():
            if out and src and os.path.exists(src) and same(out, src):
                raise OutputError(f"{out_flag} {out} is also {in_flag}: writing it would destroy that input")


def _why(directory: str, exc: OSError) -> str:
    """Why a folder cannot take a file: an ancestor that is a file, or the system's reason."""
    probe = directory
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if probe and os.path.exists(probe) and not os.path.isdir(probe):
        return f"{probe} is a file, not a folder"
    return exc.strerror or str(exc)


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


def read_lines(path: str | os.PathLike, expected: str, what: str = "") -> Iterator[str]:
    """The lines of a UTF-8 file one at a time, as ``read_text(...).splitlines()`` gives them, without
    holding the whole text (a file of 10^6 records is 80 MB of text and 10^6 line strings); the same
    :class:`FormatError` as :func:`read_text` for a file that cannot be read or decoded, raised where the
    reading meets it.  Close the iterator (or read it to the end) to close the file."""
    path = os.fspath(path)
    try:
        # newline="" ends lines at \n, \r and \r\n only, so every chunk ends where splitlines() would
        # end a line too; splitting each chunk gives the other separators splitlines() knows.
        with open(path, encoding="utf-8", newline="") as handle:
            for chunk in handle:
                yield from chunk.splitlines()
    except OSError as exc:
        raise FormatError(path, f"cannot read{' ' + what if what else ''}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise FormatError(path, f"not a text file (expected {expected})") from None
