"""Error types of the stack.

Every error names the bad value and says how to fix it. Each class subclasses the
matching builtin (``ValueError``, ``KeyError``-like lookups raise ``ValueError`` so the
message is printed verbatim) so callers can catch either.
"""

from __future__ import annotations

import os


class EmbodiedError(Exception):
    """Base class of all errors raised by ``embodied``.

    Args:
        message: What went wrong, naming the bad value.
        fix: How to fix it; appended to the message as ``fix: ...``.
    """

    def __init__(self, message: str, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(f"{message} (fix: {fix})" if fix else message)

    def in_file(self, path: str | os.PathLike[str], what: str = "") -> EmbodiedError:
        """The same error, its message prefixed with the file it came from (and ``what``)."""
        label = f"{what} {str(path)!r}" if what else repr(str(path))
        if str(path) in self.message:
            return self
        err = type(self).__new__(type(self))
        EmbodiedError.__init__(err, f"{label}: {self.message}", self.fix)
        return err


class ConfigError(EmbodiedError, ValueError):
    """A configuration value is out of range or inconsistent."""


class UnknownNameError(EmbodiedError, ValueError):
    """A name (env, task, policy, controller, ...) is not registered."""


class ActionError(EmbodiedError, ValueError):
    """An action has the wrong shape or non-finite values."""


class CompatibilityError(EmbodiedError, ValueError):
    """A policy does not match an environment (action dim, cameras, image size)."""


class RenderError(EmbodiedError, RuntimeError):
    """Headless rendering is not available."""


class DatasetError(EmbodiedError, OSError):
    """A dataset file is missing, unreadable or has the wrong layout."""


class CheckpointError(EmbodiedError, ValueError):
    """A checkpoint folder is missing files, keys or statistics."""


class SafetyFault(EmbodiedError, RuntimeError):
    """A safety rule stopped the loop (stale state, e-stop, disconnect)."""
