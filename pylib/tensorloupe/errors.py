"""One error family for everything tensorloupe refuses to read.

Every error names the file, the format, and where possible the byte offset, what was expected and
what was found, so a message can be shown to a user as it is. Raw IndexError, struct.error,
UnicodeDecodeError and friends never escape a reader: they are converted at the boundary with
`raise ... from`.
"""

from __future__ import annotations

import struct
import zlib


class TensorloupeError(Exception):
    """Base of every error tensorloupe raises on purpose."""

    # the dangerous globals a pickle named before this error stopped it: a real unpickler has
    # already run them by then (set by unpickling/machine.py; see formats/pytorch/loadpath.py)
    dangerous: tuple = ()

    def __init__(self, message: str, *, file: str | None = None, format: str | None = None,
                 offset: int | None = None, expected: object = None, found: object = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.format = format
        self.offset = offset
        self.expected = expected
        self.found = found

    def __str__(self) -> str:
        where = ": ".join(part for part in (self.file, self.format) if part)
        text = f"{where}: {self.message}" if where else self.message
        details = []
        if self.offset is not None:
            details.append(f"at byte {shown(self.offset)}")
        if self.expected is not None:
            details.append(f"expected {shown(self.expected)}")
        if self.found is not None:
            details.append(f"found {shown(self.found)}")
        return f"{text} ({'; '.join(details)})" if details else text

    def located(self, *, file: str | None = None, format: str | None = None) -> "TensorloupeError":
        """Fill in the file and format where a lower layer did not know them."""
        if self.file is None:
            self.file = file
        if self.format is None:
            self.format = format
        return self


def shown(value) -> str:
    """A value for a message; an integer grouped (1,234,567), as every number a person reads.
    str() refuses integers of more than 4,300 digits (ValueError), and a header can make one:
    those are described by their size instead. A bool is said as a bool."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > 14000:
            return f"an integer of {value.bit_length():,} bits"
        return f"{value:,}"
    return str(value)


# What a parser's own arithmetic and slicing can raise on hostile bytes. Readers catch this tuple
# where they parse and re-raise it as one of their FormatErrors (`raise error(...) from e`), so that
# nothing of it reaches a user as a traceback.
LOW_LEVEL_ERRORS = (IndexError, KeyError, TypeError, ValueError, OverflowError, RecursionError,
                    EOFError, UnicodeError, struct.error, zlib.error)


class ErrorFactory:
    """Builds one reader's errors: the file and format are said once, each error adds its message,
    byte offset, what was expected and what was found. Every reader makes one:

        error = ErrorFactory(source.name, FORMAT)
        raise error(TruncatedError, "the header ends early", offset=8, expected="8 bytes", found=3)
    """

    __slots__ = ("file", "format")

    def __init__(self, file: str | None, format: str | None):
        self.file, self.format = file, format

    def __call__(self, cls: type["TensorloupeError"], message: str, **where) -> "TensorloupeError":
        return cls(message, file=self.file, format=self.format, **where)


class FormatError(TensorloupeError):
    """The bytes do not follow the format they claim to be."""


class TruncatedError(FormatError):
    """The file ends before the bytes its own header promises."""

    def __init__(self, message: str, **kw):
        # The likeliest cause, said once in every format's words (a hostile count reads the same
        # way, hence the question mark).
        if "truncated" not in message:
            message += " (truncated?)"
        super().__init__(message, **kw)


class UnknownFormatError(FormatError):
    """No reader recognises the file (including LFS pointers and saved HTML pages)."""


class LimitError(FormatError):
    """A count or size in the file exceeds a safety limit (a resource bomb or a lying header)."""


class UnsupportedError(TensorloupeError):
    """The file is valid but asks for something we cannot do (e.g. values of an unknown dtype)."""


class UsageError(TensorloupeError):
    """The caller asked for something that does not exist (unknown tensor, bad region)."""


class UnreadableError(UsageError):
    """The file named cannot be read at all (it does not exist, is not permitted, is a
    device): the CLI exits 3, "the file cannot be read", not 2. A UsageError still, for callers
    that catch what the user named wrongly."""


class FetchError(UnreadableError):
    """A URL's bytes could not be fetched (the network, the server, a deadline, a refused
    redirect): the file cannot be read, so the CLI exits 3 as for an unreadable file."""


class Cancelled(TensorloupeError):
    """A long operation was cancelled by its progress callback."""
