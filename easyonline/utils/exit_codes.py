"""The exit codes every job shares, and the one place that maps errors to them.

2: a bad config or flag. 3: something to read from is missing or unreachable
(a checkpoint, a file, the broker). 4: more bad input than
data_config.max_bad_fraction allows. 5: the cluster lost a parameter server
(restart it: training resumes from the last checkpoint).
"""
import sys
from typing import Callable

BAD_CONFIG, UNREACHABLE, BAD_INPUT, CLUSTER_FAILURE = 2, 3, 4, 5


def exit_code_of(error: BaseException) -> int:
    """The exit code for an error a job reports to the operator; 0 for one that is a bug (re-raised)."""
    from easyonline.config.errors import ConfigError  # pylint: disable=g-import-not-at-top
    from easyonline.inputs.kafka_client import BrokerUnreachableError  # pylint: disable=g-import-not-at-top
    from easyonline.train.bad_input import BadInputError  # pylint: disable=g-import-not-at-top
    from easyonline.utils.oss import OssConfigError  # pylint: disable=g-import-not-at-top
    if isinstance(error, (ConfigError, OssConfigError)):
        return BAD_CONFIG
    if isinstance(error, (BrokerUnreachableError, FileNotFoundError, TimeoutError)):
        return UNREACHABLE
    if isinstance(error, BadInputError):
        return BAD_INPUT
    if type(error).__name__ == "ClusterFailure":  # not imported: that would load TensorFlow for every job
        return CLUSTER_FAILURE
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
