"""Errors and exit codes: each operator-facing error ends a job with its code; anything else is a bug, re-raised."""
import pytest

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core import errors
from easyonline.core.exit_codes import exit_code_of, run_job


@pytest.mark.parametrize("error, code", [
    (errors.ConfigError("data_config.batch_size", "must be >= 1"), 2),
    (errors.OssConfigError("no credentials for oss://bucket"), 2),
    (errors.BrokerUnreachableError("no broker at 127.0.0.1:1"), 3),
    (FileNotFoundError(2, "No such file or directory", "/models/ckpt"), 3),
    (TimeoutError("no answer in 30 s"), 3),
    (errors.BadInputError("9 of the last 17 lines were rejected"), 4),
    (errors.ClusterFailure("lost ps 1"), 5),
    (errors.KafkaAccessError("User:nobody may not READ topic t"), 7),
    (errors.EasyOnlineError("a generic operator-facing error"), 1),
])
def test_each_error_maps_to_its_code(error, code):
    assert exit_code_of(error) == code


@pytest.mark.parametrize("error", [
    ValueError("a bug"), KeyError("x"), RuntimeError("boom"), ConnectionError("not the broker check's"),
    OSError("disk"), errors.KerasVersionError("tf.keras is Keras 3"),
])
def test_other_errors_are_bugs(error):
    assert exit_code_of(error) == 0


def test_the_codes_are_the_documented_numbers():
    assert (errors.BAD_CONFIG, errors.UNREACHABLE, errors.BAD_INPUT, errors.CLUSTER_FAILURE) == (2, 3, 4, 5)
    assert (errors.MODEL_DIR_LOCKED, errors.ACCESS_DENIED) == (6, 7)


def test_error_classes_are_also_the_builtin_kinds_callers_catch():
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.BrokerUnreachableError, ConnectionError)
    assert issubclass(errors.BadInputError, RuntimeError) and issubclass(errors.ClusterFailure, RuntimeError)
    assert issubclass(errors.KerasVersionError, ImportError)


def test_config_error_names_its_path():
    error = errors.ConfigError("train_config.num_steps", "must be >= 0")
    assert error.path == "train_config.num_steps"
    assert str(error) == "config field train_config.num_steps: must be >= 0"
    assert str(errors.ConfigError("", "empty file")) == "config: empty file"


def test_run_job_returns_the_jobs_own_code():
    assert run_job(lambda: 0) == 0
    assert run_job(lambda: 7) == 7


def _raises(error):
    def job():
        raise error
    return job


@pytest.mark.parametrize("error, code, text", [
    (errors.ConfigError("model_dir", "is required"), 2, "error: config field model_dir: is required\n"),
    (errors.BrokerUnreachableError("no broker at h:1"), 3, "error: no broker at h:1\n"),
    (FileNotFoundError("checkpoint /m/ckpt-5 not found"), 3, "error: checkpoint /m/ckpt-5 not found\n"),
    (errors.BadInputError("too much garbage"), 4, "error: too much garbage\n"),
    (errors.ClusterFailure("lost ps 0"), 5, "error: lost ps 0\n"),
    (errors.KafkaAccessError("Kafka refused user 'x': authentication failed"), 7,
     "error: Kafka refused user 'x': authentication failed\n"),
])
def test_run_job_reports_operator_errors_on_stderr(error, code, text, capsys):
    assert run_job(_raises(error)) == code
    out, err = capsys.readouterr()
    assert out == "" and err == text


def test_run_job_re_raises_a_plain_bug(capsys):
    bug = ZeroDivisionError("division by zero")
    with pytest.raises(ZeroDivisionError) as e:
        run_job(_raises(bug))
    assert e.value is bug  # the same exception, traceback intact
    assert capsys.readouterr().err == ""  # no "error:" line for a bug


def test_run_job_does_not_swallow_interrupts():
    with pytest.raises(KeyboardInterrupt):
        run_job(_raises(KeyboardInterrupt()))
    with pytest.raises(SystemExit):
        run_job(_raises(SystemExit(9)))
