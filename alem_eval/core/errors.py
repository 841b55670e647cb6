"""Typed errors. Every failure a user can cause is one of these: the CLI prints its
one-line message and exits non-zero, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass


class AlemEvalError(Exception):
    """Base class: ``str(err)`` is a complete, single-line message for the user."""

    exit_code: int = 1

    def __str__(self) -> str:  # keep messages on one line whatever the cause
        return " ".join(super().__str__().split())


def brief(exc: BaseException, limit: int = 160) -> str:
    """A foreign exception's message for one of our one-line errors: whitespace collapsed,
    cut at ``limit`` characters with an ellipsis (its type name when it has no message)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class UsageError(AlemEvalError):
    """The command line itself is wrong (bad option value, unknown protocol, ...)."""

    exit_code = 2


class SelectorError(UsageError):
    """A selector that is malformed or matches no cell."""


class ConfigError(AlemEvalError):
    """A ``config.json`` that cannot be parsed or holds an ill-typed known key."""


class SourceError(AlemEvalError):
    """A checkpoint source (Hub or local directory) cannot provide what was asked."""


class SourceUsageError(SourceError, UsageError):
    """``--source`` names no directory: the command line is wrong (exit 2)."""


class DownloadError(SourceError):
    """A transfer from the Hub failed or produced a file that does not match the listing."""


class DatasetError(AlemEvalError):
    """A recording or dataset that cannot be written or read (full or unwritable disk, a
    damaged or foreign directory)."""


class MissingExtraError(AlemEvalError):
    """A command needs an optional dependency that is not installed; the message names the
    extra that installs it (``alem_eval.core.extras``)."""


class CheckpointError(AlemEvalError):
    """A checkpoint directory that is missing, unreadable or corrupt."""


@dataclass(frozen=True)
class LeafMismatch:
    """One differing leaf between the configured network and the checkpoint."""

    path: str
    expected: tuple[int, ...] | None  # None: the network has no such leaf
    found: tuple[int, ...] | None  # None: the checkpoint has no such leaf
    expected_dtype: str | None = None
    found_dtype: str | None = None

    def describe(self) -> str:
        if self.found is None:
            return f"{self.path}: missing in checkpoint (expected {list(self.expected or ())})"
        if self.expected is None:
            return f"{self.path}: unexpected in checkpoint (found {list(self.found)})"
        if self.expected != self.found:
            return f"{self.path}: expected {list(self.expected)}, found {list(self.found)}"
        return f"{self.path}: expected dtype {self.expected_dtype}, found {self.found_dtype}"


class ShapeMismatchError(CheckpointError):
    """The checkpoint's parameter tree does not match the network its config describes."""

    def __init__(self, where: str, mismatches: list[LeafMismatch], hints: list[str]):
        self.where = where
        self.mismatches = mismatches
        self.hints = hints
        shown = "; ".join(m.describe() for m in mismatches[:4])
        more = f"; ... {len(mismatches) - 4} more" if len(mismatches) > 4 else ""
        hint = (" hint: " + " ".join(hints)) if hints else ""
        super().__init__(
            f"{where}: config does not match the weights ({len(mismatches)} leaves differ: "
            f"{shown}{more}).{hint}"
        )


class EvaluationError(AlemEvalError):
    """Scoring could not run (incompatible env version, bad protocol settings, ...)."""
