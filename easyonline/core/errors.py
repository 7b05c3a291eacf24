"""Every error a job reports to its operator, each carrying the exit code it ends the job with.

2: a bad config or flag. 3: something to read from is missing or unreachable
(a checkpoint, a file, the broker). 4: more bad input than
``data_config.max_bad_fraction`` allows. 5: the cluster lost a parameter
server (restart it: training resumes from the last checkpoint). 6: another
trainer is writing to the same ``model_dir``. 7: Kafka refused the client
(authentication failed, the broker's certificate is not trusted, or an ACL
denies an operation): retrying would not help.

The classes live here, on the ground floor, so that the one place that maps
errors to exit codes (``exit_codes.py``) needs no other package; the parts
raise them.
"""

BAD_CONFIG, UNREACHABLE, BAD_INPUT, CLUSTER_FAILURE, MODEL_DIR_LOCKED, ACCESS_DENIED = 2, 3, 4, 5, 6, 7


class EasyOnlineError(Exception):
    """Base of the errors a job reports as ``error: <message>`` and ends with ``exit_code``."""

    exit_code = 1


class ConfigError(EasyOnlineError, ValueError):
    """A config problem; ``path`` is the dotted field path, e.g. ``data_config.batch_size``."""

    exit_code = BAD_CONFIG

    def __init__(self, path: str, message: str):
        self.path = path
        self.detail = message
        super().__init__(f"config field {path}: {message}" if path else f"config: {message}")


def require(condition: bool, path: str, message: str) -> None:
    """Raises ConfigError(path, message) unless ``condition``: a config check in one line."""
    if not condition:
        raise ConfigError(path, message)


class OssConfigError(EasyOnlineError, RuntimeError):
    """An ``oss://`` path cannot be used: credentials or endpoint missing, or oss2 not installed."""

    exit_code = BAD_CONFIG


class BrokerUnreachableError(EasyOnlineError, ConnectionError):
    """No Kafka broker in ``server`` answered."""

    exit_code = UNREACHABLE


class KafkaAccessError(EasyOnlineError, RuntimeError):
    """Kafka refused the client: a failed SASL login, a broker certificate the client does not trust, or an
    operation an ACL does not allow. The message names the user, the setting or the ACL; not retried."""

    exit_code = ACCESS_DENIED


class BadInputError(EasyOnlineError, RuntimeError):
    """Too much of the stream is malformed to keep training on it."""

    exit_code = BAD_INPUT


class ClusterFailure(EasyOnlineError, RuntimeError):
    """The cluster lost a parameter server (or the chief its connection): the parameters are gone.

    Restart the cluster; training resumes from the last checkpoint.
    """

    exit_code = CLUSTER_FAILURE


class ModelDirLockedError(EasyOnlineError, RuntimeError):
    """Another trainer holds the model_dir's lease (``checkpoint/writer_lock.py``)."""

    exit_code = MODEL_DIR_LOCKED


class KerasVersionError(ImportError):
    """Raised when ``tf.keras`` is Keras 3, which TFRA cannot train with."""


def error_text(error: BaseException) -> str:
    """``Name: message`` for a log line or status, the name once: kafka-python's errors already start their
    text with their class name (``KafkaTimeoutError: Failed to update metadata``), which lines formatting
    ``f"{type(e).__name__}: {e}"`` printed twice."""
    name, text = type(error).__name__, str(error)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"
