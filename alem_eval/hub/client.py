"""Talking to the Hugging Face Hub through ``huggingface_hub``: the client floor, what every
request says about alem-eval, quiet client logs, and one-line errors.

:func:`check_hub_client` refuses a client older than the API the hub modules call
(:data:`HF_HUB_MIN_VERSION`, the floor pyproject.toml declares too).
:func:`translate_error` turns a client or network exception into a one-line
:class:`~alem_eval.core.errors.SourceError` / :class:`~alem_eval.core.errors.DownloadError`, or
:class:`Unreachable` when the endpoint cannot be used right now and the cache may still serve.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from alem_eval.core.errors import DownloadError, SourceError, brief
from alem_eval.hub.state import os_reason

# The oldest huggingface_hub whose API matches the calls of the hub modules: ``hf_hub_download``
# takes ``tqdm_class`` from 1.1.0 on. pyproject.toml declares the same floor (a test checks both).
HF_HUB_MIN_VERSION = "1.1.0"
LIBRARY_NAME = "alem-eval"  # sent with every Hub request (user agent), with __version__


class Unreachable(SourceError):
    """The endpoint cannot be used right now; the cache may still serve."""


def check_hub_client() -> None:
    """Raise SourceError if the installed huggingface_hub is older than the API used here."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        have = version("huggingface_hub")
    except PackageNotFoundError:
        raise SourceError(
            "huggingface_hub is not installed; install alem-eval with its dependencies"
        ) from None
    if _release(have) < _release(HF_HUB_MIN_VERSION):
        raise SourceError(
            f"huggingface_hub {have} is too old: alem-eval needs "
            f">={HF_HUB_MIN_VERSION} "
            f"(pip install 'huggingface-hub>={HF_HUB_MIN_VERSION}')"
        )


def _release(version: str) -> tuple[int, ...]:
    """``"1.1.0rc1"`` -> (1, 1, 0): the release numbers, enough to compare with a floor."""
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:3])


@contextlib.contextmanager
def quiet_hub_logs() -> Iterator[None]:
    """huggingface_hub logs retries and fallbacks as warnings; our errors say it in one line."""
    logger = logging.getLogger("huggingface_hub")
    if os.environ.get("ALEM_EVAL_DEBUG"):
        yield
        return
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


def _network_errors() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for mod, names in (
        ("httpx2", ("TransportError",)),
        ("httpx", ("TransportError",)),
        ("requests.exceptions", ("ConnectionError", "Timeout")),
    ):
        try:
            m = __import__(mod, fromlist=list(names))
        except ImportError:
            continue
        types += [getattr(m, n) for n in names if hasattr(m, n)]
    return tuple(types)


def translate_error(
    exc: BaseException, what: str, *, repo: str, revision: str, endpoint: str, cache_dir: Path
) -> Exception:
    """A one-line error for a huggingface_hub / network exception about ``what`` in
    ``repo@revision`` at ``endpoint`` (:class:`Unreachable` if the cache may still serve)."""
    from huggingface_hub import errors as hf_errors
    from huggingface_hub.utils import OfflineModeIsEnabled

    cause = exc.__cause__ if isinstance(exc, ValueError) and exc.__cause__ else exc
    if isinstance(cause, OfflineModeIsEnabled):
        return Unreachable("offline mode is on (HF_HUB_OFFLINE)")
    if isinstance(cause, hf_errors.RevisionNotFoundError):
        return SourceError(f"revision {revision!r} not found in Hub repo {repo!r} at {endpoint}")
    if isinstance(cause, hf_errors.RepositoryNotFoundError):
        return SourceError(
            f"Hub repo {repo!r} not found at {endpoint} "
            "(or it is private or gated and no valid token was given)"
        )
    if isinstance(cause, hf_errors.LocalEntryNotFoundError):  # the client's "and not cached"
        inner = cause.__cause__
        if inner is not None and inner is not cause:
            return translate_error(
                inner, what, repo=repo, revision=revision, endpoint=endpoint, cache_dir=cache_dir
            )
        return Unreachable(f"cannot reach the Hub at {endpoint}")
    if isinstance(cause, getattr(hf_errors, "EntryNotFoundError", ())):
        return DownloadError(f"{what}: not found in {repo}@{revision}")
    if isinstance(cause, hf_errors.HfHubHTTPError):
        status = getattr(getattr(cause, "response", None), "status_code", None)
        if status is not None and status >= 500:
            return Unreachable(f"the Hub at {endpoint} answered HTTP {status}")
        return DownloadError(f"{what}: HTTP {status} from {endpoint} ({brief(cause)})")
    if isinstance(cause, _network_errors()):
        return Unreachable(f"cannot reach the Hub at {endpoint} ({brief(cause)})")
    if isinstance(cause, OSError) and cause.errno is not None:
        return DownloadError(f"cannot write {what} to the cache at {cache_dir}: {os_reason(cause)}")
    return DownloadError(f"{what}: {type(cause).__name__}: {brief(cause)}")
