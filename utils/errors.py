"""Errors a user can cause (bad flags, bad files).

Every entry point catches :class:`UserError` and prints its message as one line on stderr with
exit status 2; anything else is a bug in the toolkit and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """An error caused by the user's input; the message names the input and what was expected."""


class ConfigError(UserError):
    """An impossible or unsupported configuration (flags, presets, parallel layout)."""


class FormatError(UserError):
    """A malformed input file.  The message carries the file name and, where known, the line."""

    def __init__(self, path: str, message: str, line: int | None = None, field: str | None = None):
        where = f"{path}:{line}" if line is not None else str(path)
        if field:
            where += f": {field}"
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.field = field
