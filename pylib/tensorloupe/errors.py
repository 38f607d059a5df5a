"""One error family for everything tensorloupe refuses to read.

Every error names the file, the format, and where possible the byte offset, what was expected and
what was found, so a message can be shown to a user as it is. Raw IndexError, struct.error,
UnicodeDecodeError and friends never escape a reader: they are converted at the boundary with
`raise ... from`.
"""

from __future__ import annotations


class TensorloupeError(Exception):
    """Base of every error tensorloupe raises on purpose."""

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
            details.append(f"at byte {self.offset}")
        if self.expected is not None:
            details.append(f"expected {self.expected}")
        if self.found is not None:
            details.append(f"found {self.found}")
        return f"{text} ({'; '.join(details)})" if details else text

    def located(self, *, file: str | None = None, format: str | None = None) -> "TensorloupeError":
        """Fill in the file and format where a lower layer did not know them."""
        if self.file is None:
            self.file = file
        if self.format is None:
            self.format = format
        return self


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


class Cancelled(TensorloupeError):
    """A long operation was cancelled by its progress callback."""
