"""The Kafka reader child's last words are not lost to a race with its exit (inputs/reader_process.py).

A child that ends on an error (a ConfigError: the topic was recreated and on_topic_change is FAIL) puts it on
the batch queue and exits. If the trainer's wait for a batch gave up just before the error reached the pipe,
it found the child dead and reported "the Kafka reader process died" instead of the error and its exit code
(seen once in the full suite under load, test_retention_and_recreated_topics' [KAFKA_PYTHON-FAIL]).

The race is made certain here, not waited for: a real spawned child puts the error and exits, and the queue
the reader reads is the real multiprocessing queue wrapped so that its first wait gives up (returns Empty) as
the trainer's did, whatever the pipe holds. A fake of the timing only; the child, its exit and the queue are
real.
"""
import multiprocessing
import queue

import pytest

from easyonline.core.errors import ConfigError
from easyonline.inputs.reader_process import KafkaReaderProcess


def _ends_on_a_config_error(batches) -> None:
    batches.put(("error", "ConfigError", "kafka_train_input.topic", "the topic was recreated"))


def _ends_silently(batches) -> None:
    del batches


class _FirstWaitGivesUp:
    """The real queue, but its first ``get`` returns Empty as a wait that ended a moment too early."""

    def __init__(self, batches) -> None:
        self._batches, self._waits = batches, 0

    def get(self, timeout: float):
        self._waits += 1
        if self._waits == 1:
            raise queue.Empty
        return self._batches.get(timeout=timeout)


def _reader_after(child_target) -> KafkaReaderProcess:
    """A reader whose child has run ``child_target`` and exited (only its queue and process are used)."""
    context = multiprocessing.get_context("spawn")
    batches = context.Queue()
    process = context.Process(target=child_target, args=(batches,))
    process.start()
    process.join(timeout=60)
    assert process.exitcode == 0
    reader = KafkaReaderProcess.__new__(KafkaReaderProcess)
    reader._batches, reader._process = _FirstWaitGivesUp(batches), process  # pylint: disable=protected-access
    return reader


def test_an_error_the_reader_ended_on_is_raised_even_when_it_arrives_after_the_wait_gave_up():
    reader = _reader_after(_ends_on_a_config_error)
    with pytest.raises(ConfigError, match="recreated") as raised:
        reader.next_batch(timeout=0.01)
    assert raised.value.path == "kafka_train_input.topic"


def test_a_reader_that_died_without_a_word_is_still_reported_dead():
    reader = _reader_after(_ends_silently)
    with pytest.raises(RuntimeError, match="the Kafka reader process died"):
        reader.next_batch(timeout=0.01)
