"""The one place that turns an error into a job's exit code (the codes: ``errors.py``)."""
import sys
from typing import Callable

from easyonline.core.errors import BAD_CONFIG, BAD_INPUT, CLUSTER_FAILURE, UNREACHABLE, EasyOnlineError  # noqa: F401  (re-exported)


def exit_code_of(error: BaseException) -> int:
    """The exit code for an error a job reports to the operator; 0 for one that is a bug (re-raised)."""
    if isinstance(error, EasyOnlineError):
        return error.exit_code
    if isinstance(error, (FileNotFoundError, TimeoutError)):
        return UNREACHABLE
    return 0


def run_job(job: Callable[[], int]) -> int:
    """Runs ``job``; an operator-facing error becomes ``error: <message>`` on stderr and its exit code."""
    try:
        return job()
    except Exception as e:  # pylint: disable=broad-except
        code = exit_code_of(e)
        if not code:
            raise
        print(f"error: {e}", file=sys.stderr)
        return code
