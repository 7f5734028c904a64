"""File output that never leaves a partial file behind, and text input with one clear error."""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO

from utils.errors import FormatError, UserError

STALE_TMP_S = 600.0
"""A temporary file of ours untouched for this long belongs to a writer that was killed (a live writer
keeps writing or renames it within seconds); the next write of the same file removes it."""


class OutputError(UserError):
    """An output path that cannot be written (a folder, a read-only folder, a parent that is a file)."""


def _remove_stale(directory: str, name: str) -> None:
    """Remove the temporaries of ``name`` a killed writer left: any whose writer (the process its name
    records, on this host) is gone, and any older than :data:`STALE_TMP_S` that were written on another
    host or by a writer that did not record itself."""
    _sweep(directory, _tmp_base(name), 0.0)


NAME_MAX = 255
"""Bytes one file name may take (ext4, xfs, btrfs, tmpfs; NTFS and APFS count 255 characters)."""
_TMP_TAIL = len("..") + 12 + len("-") + 6 + len("-") + 10 + len(".tmp")
"""Bytes a temporary adds to its output's name: ``.<name>.<12 hex>-<host>-<pid>.tmp`` (pid up to 10 digits)."""
_TMP_RE = re.compile(r"^\.(?P<base>.+)\.[0-9a-f]{12}(?:-(?P<host>[0-9a-f]{6})-(?P<pid>[0-9]{1,10}))?\.tmp$", re.S)
STARTUP_STALE_S = 60.0
"""A temporary of ours whose writer is gone and that is older than this is removed by any guarded writer of
its folder (:func:`guard_output`), not only by the next writer of the same file."""


def _host_tag() -> str:
    """Six hex digits of this host's name: a temporary records its writer's process id, which means
    something only on the host that wrote it (a folder can be shared over NFS)."""
    import zlib

    node = os.uname().nodename if hasattr(os, "uname") else os.environ.get("COMPUTERNAME", "")
    return f"{zlib.crc32(node.encode('utf-8', 'replace')) & 0xFFFFFF:06x}"


def _tmp_base(name: str) -> str:
    """The part of a temporary's name that names its output: the output's name, or, for a name too long to
    take ``.<random>-<host>-<pid>.tmp`` within 255 bytes (valid names of 221 to 255 bytes), its first bytes
    and a digest of the whole, so that the temporary fits and still says whose it is."""
    raw = os.fsencode(name)
    room = NAME_MAX - _TMP_TAIL
    if len(raw) <= room:
        return name
    import zlib

    digest = f"{zlib.crc32(raw):08x}{len(raw):02x}"
    return os.fsdecode(raw[:room - len(digest) - 1]) + "~" + digest


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (another user's process counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # PermissionError: it exists; anything else: do not guess it away
        return True
    return True


def _sweep(directory: str, base: str | None, min_age_s: float) -> list[str]:
    """Remove our temporaries in ``directory`` (those of one output, whose temporary base is ``base``, or of
    every output when None) that a killed writer left: written on this host, its writer's process gone and
    the file older than ``min_age_s``; written elsewhere (or by a writer that did not record itself), older
    than :data:`STALE_TMP_S`.  A live writer's temporary stays however long it writes (a sweep holds its
    output open for minutes).  Returns the paths removed."""
    import stat
    import time

    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    now, host, removed = time.time(), _host_tag(), []
    for entry in entries:
        if not (entry.startswith(".") and entry.endswith(".tmp")):
            continue
        match = _TMP_RE.match(entry)
        if match is None or (base is not None and match.group("base") != base):
            continue
        full = os.path.join(directory, entry)
        try:
            info = os.lstat(full)
            if not stat.S_ISREG(info.st_mode):
                continue  # not a file we made
            age = now - info.st_mtime
            if match.group("host") == host:  # ours on this host: its writer's process tells, however old
                stale = age >= min_age_s and not _alive(int(match.group("pid")))
            else:  # another host's, or a writer that did not record itself: only its age tells
                stale = age > STALE_TMP_S
            if stale:
                os.unlink(full)
                removed.append(full)
        except OSError:
            pass
    return removed


def _temporary(directory: str, name: str) -> tuple[int, str]:
    """A new file ``.<name>.<random>-<host>-<pid>.tmp`` in ``directory`` (``<name>`` shortened for a name
    too long to take that tail: :func:`_tmp_base`), opened exclusively with mode 0600 (what
    ``tempfile.mkstemp`` does, without importing tempfile: every command that writes a file pays that
    import otherwise).  The host and process id let a later writer tell a killed writer's leftover from
    a live writer's file."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    base, tag = _tmp_base(name), f"{_host_tag()}-{os.getpid()}"
    for _ in range(100):
        tmp = os.path.join(directory, f".{base}.{os.urandom(6).hex()}-{tag}.tmp")
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
        # surrogateescape: a file name that is not UTF-8 (decoded by Python with surrogates) is written back
        # as its own bytes instead of failing with UnicodeEncodeError (issue 28, item 10)
        kwargs = {} if "b" in mode else {"newline": newline, "encoding": "utf-8", "errors": "surrogateescape"}
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


InputPaths = Mapping[str, "str | os.PathLike | Iterable[str | os.PathLike] | None"]
"""A command's inputs for :func:`guard_output`: flag (or description) -> a path, several paths, or None."""


def _paths_of(value: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, bytes, os.PathLike)):
        return [os.fspath(value)]
    return [os.fspath(v) for v in value if v is not None]


def _resolves_to(out: str, src: str) -> bool:
    """Whether writing ``out`` would write ``src``: the same file (device and inode: a hard link, or a
    symbolic link anywhere on the way) or the same resolved real path (``out`` not there yet)."""
    try:
        a, b = os.stat(out), os.stat(src)
        if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
            return True
    except (OSError, ValueError):
        pass
    try:
        return os.path.realpath(out) == os.path.realpath(src)
    except (OSError, ValueError):
        return os.path.abspath(out) == os.path.abspath(src)


def guard_output(path: str | os.PathLike, inputs: InputPaths | None = None, flag: str = "-o/--output", *,
                 own_links: Iterable[str | os.PathLike] = ()) -> str:
    """Check an output path before a command reads or writes anything; every writer calls it.

    Raises :class:`OutputError` (one line naming ``flag`` and the path) when:

    - ``path`` resolves to one of ``inputs`` (flag -> path(s)): the same real path, or the same device
      and inode, so a symbolic link to an input, a hard link of it or an input reached through a linked
      folder is caught before the input is destroyed;
    - ``path`` is itself a symbolic link the command did not create (``own_links``): writing through it
      would change a file elsewhere, replacing it would silently drop the link;
    - ``path`` is a folder, or its name is longer than :data:`NAME_MAX` bytes;
    - a folder on ``path``'s way is a file (``-o FILE/name``: the folder could not be made);
    - the nearest existing folder on ``path``'s way cannot be written (permissions, a read-only mount).

    Then it removes the temporaries a killed writer left in the output's folder: those of this output
    whose writer is gone, any of ours whose writer is gone and that are older than
    :data:`STARTUP_STALE_S` (a minute), and any written elsewhere older than :data:`STALE_TMP_S`.  A live
    writer's temporary is kept however old.  Returns ``path``.
    Valid names up to 255 bytes are accepted (:func:`atomic_write` shortens its temporary's name).
    """
    out = os.fspath(path)
    if not out:
        raise OutputError(f"{flag}: empty path (give a file name)")
    name = os.path.basename(out.rstrip("/" + (os.sep if os.sep != "/" else "")))
    if name and len(os.fsencode(name)) > NAME_MAX:
        raise OutputError(f"{flag} {out}: the file name is {len(os.fsencode(name))} bytes, more than the "
                          f"{NAME_MAX} a file system allows")
    own = {os.path.abspath(os.fspath(p)) for p in own_links}
    if os.path.islink(out) and os.path.abspath(out) not in own:
        try:
            target = os.readlink(out)
        except OSError:
            target = "?"
        raise OutputError(f"{flag} {out} is a symbolic link (to {target}): refusing to write through it or replace "
                          "it; remove the link or give its target's path")
    if os.path.isdir(out):
        raise OutputError(f"cannot write {out}: it is a folder (give a file name)")
    probe = os.path.dirname(out)
    while probe and not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if probe and os.path.exists(probe) and not os.path.isdir(probe):  # (else makedirs fails later, after the work)
        raise OutputError(f"cannot write {out}: {probe} is a file, not a folder")
    # a folder the command may not create in or write to (permissions, a read-only mount) fails the write only after
    # the work (the replay: after every rank joined); every writer makes its file or a temporary there, so say so now
    folder = probe or "."
    if os.path.isdir(folder) and not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {out}: {folder} is not writable")
    for in_flag, value in (inputs or {}).items():
        for src in _paths_of(value):
            if src and os.path.lexists(src) and not os.path.isdir(src) and _resolves_to(out, src):
                shown = in_flag if src == out or in_flag.startswith(("the ", "an ", "a ")) else f"{in_flag} {src}"
                raise OutputError(f"{flag} {out} is also {shown}: writing it would destroy that input")
    directory = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(directory):
        _sweep(directory, _tmp_base(name), 0.0)
        _sweep(directory, None, STARTUP_STALE_S)
    return out


def safe_name(value: str, flag: str, folder: str | os.PathLike | None = None) -> str:
    """``value`` of ``flag`` as one file or folder name inside ``folder``: refused (one line naming the
    flag) when it is empty, ``.`` or ``..``, holds a path separator or a NUL, is absolute, or is longer than
    :data:`NAME_MAX` bytes, since any of these would put what the command writes somewhere else."""
    text = os.fspath(value)
    where = f" (a name inside {os.fspath(folder)})" if folder is not None else " (a name, not a path)"
    seps = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    if not text.strip():
        raise OutputError(f"{flag}: empty name{where}")
    if text in (".", "..") or any(s in text for s in seps) or "\0" in text or os.path.isabs(text):
        raise OutputError(f"{flag} {text!r}: expected a name without '/', '..' or a leading '/'{where}: it would "
                          "write outside its folder")
    if len(os.fsencode(text)) > NAME_MAX:
        raise OutputError(f"{flag}: a name of {len(os.fsencode(text))} bytes, more than the {NAME_MAX} a file "
                          "system allows")
    return text


def name_in_folder(folder: str | os.PathLike, value: str, flag: str) -> str:
    """``folder/value`` with ``value`` checked by :func:`safe_name` (it stays inside ``folder``)."""
    return os.path.join(os.fspath(folder), safe_name(value, flag, folder))


LOCK_WAIT_S = 600.0
"""How long :func:`folder_lock` waits for another writer before it gives up with one line."""


@contextmanager
def folder_lock(folder: str | os.PathLike, name: str = ".lock", note: Callable[[str], None] | None = None,
                wait_s: float = LOCK_WAIT_S) -> Iterator[str]:
    """Hold an exclusive lock (``fcntl.flock``) on ``folder/name`` for the block: writers that read,
    merge and rewrite files of one folder (a profiling database) take it so that two at once do not lose
    each other's rows.  The folder is created.  When another process holds the lock, ``note`` (default:
    one line on stderr) says so once, then the lock is waited for up to ``wait_s`` seconds
    (:class:`OutputError` after that).  The lock file stays (removing it would let a third writer lock a
    new file while the second holds the old one).  Yields the lock file's path.  Without ``fcntl``
    (Windows) the block runs unlocked."""
    import time

    directory = os.fspath(folder)
    lock_path = os.path.join(directory, name)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield lock_path
        return
    try:
        os.makedirs(directory, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as exc:
        raise OutputError(f"cannot lock {lock_path}: {_why(directory, exc)}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            (note or (lambda text: print(text, file=sys.stderr, flush=True)))(
                f"note: waiting for {lock_path}: another process is writing into {directory}")
            deadline, pause = time.monotonic() + wait_s, 0.05
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise OutputError(f"{lock_path}: another process held this lock for {wait_s:.0f} s; is a "
                                          "writer stuck? (the lock goes with the process that holds it)") from None
                    time.sleep(pause)
                    pause = min(pause * 2, 1.0)
        yield lock_path
    finally:
        os.close(fd)  # closing the descriptor releases the lock


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


def refuse_device(path: str | os.PathLike, expected: str, handle: IO | None = None) -> None:
    """Refuse a character or block device (``/dev/zero``, ``/dev/urandom``: endless bytes that a reader would hold
    until memory runs out) with a :class:`FormatError`; a pipe (``-w <(...)``) is read as a file.  ``handle``: the
    open file to check (else the path is stat'ed; a path that cannot be stat'ed is left to the reader's error)."""
    try:
        mode = os.fstat(handle.fileno()).st_mode if handle is not None else os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise FormatError(os.fspath(path), f"a device, not a file (expected {expected})")


def not_a_file(path: str | os.PathLike) -> str:
    """Why ``path``, which ``os.path.isfile`` refused, is no input file: ``no such file``, ``a folder, not a
    file``, ``a device, not a file`` (``/dev/zero``) or ``not a regular file`` (a pipe, a socket)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "no such file"
    if stat.S_ISDIR(mode):
        return "a folder, not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a file"
    return "not a regular file"


TEXT_ENCODING = "utf-8-sig"
"""How the readers decode: UTF-8, a leading byte-order mark skipped (a file saved by Excel as "CSV UTF-8" starts with one,
and its first column's name then failed every header check)."""


def read_text(path: str | os.PathLike, expected: str, what: str = "") -> str:
    """The whole text of a UTF-8 file (line ends as written), or a :class:`FormatError` naming it:
    ``cannot read[ what]: <reason>``, ``not a text file (expected <expected>)`` or, for a device such as
    ``/dev/zero``, ``a device, not a file``."""
    path = os.fspath(path)
    try:
        # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8", pandas' utf-8-sig) is read past, not taken as text
        with open(path, encoding=TEXT_ENCODING, newline="") as handle:
            refuse_device(path, expected, handle)
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
        with open(path, encoding=TEXT_ENCODING, newline="") as handle:
            refuse_device(path, expected, handle)
            for chunk in handle:
                yield from chunk.splitlines()
    except OSError as exc:
        raise FormatError(path, f"cannot read{' ' + what if what else ''}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise FormatError(path, f"not a text file (expected {expected})") from None
