"""Runs a KafkaInput in a child process and hands its batches to the trainer.

Fetching with kafka-python is Python work (about 2 us per record here even
with the compiled record decoder, 14 us with kafka-python's own). In a
thread of the trainer's process that work holds the GIL and delays the
launch of every training step; in a child process it runs on the other core
without contention. The child sends each batch as one joined bytes blob plus
its positions; commits go the other way. The child is started with "spawn"
(forking a process that runs TensorFlow threads is unsafe) and imports no
TensorFlow. It ignores SIGINT and SIGTERM (a terminal's Ctrl-C signals the
whole process group): the trainer stops cleanly and then closes it; a trainer
that dies takes it along (SIGKILL, PR_SET_PDEATHSIG).

Given a ``VectorCsvParser`` the child also parses each batch (in C, or numpy
where the C decoder was not built; features, not lines, cross over), so the
trainer's process spends its CPU on training; a batch that parser declines
goes over as lines, for CsvParser. Parsed batches cross in shared memory
(batch_slots.py), with only their layout on the queue.
"""
import multiprocessing
import os
import queue
import signal
import time
from typing import Dict, Optional, Tuple

from easyonline.core.errors import BrokerUnreachableError, ConfigError, KafkaAccessError
from easyonline.inputs.batch_slots import BatchSlots, slot_bytes_for, unlink_quietly
from easyonline.features.vector_csv import VectorCsvParser
from easyonline.inputs.kafka_input import KafkaInput
from easyonline.inputs.raw_batch import BatchSource, BlobLines, RawBatch
from easyonline.protos import pipeline_pb2
from easyonline.utils import garbage
from easyonline.utils.child_process import die_with_parent, ignore_stop_signals, stop_signals_blocked

# The reader's errors the trainer raises as they are (each carries its exit code); others: RuntimeError.
_KNOWN_ERRORS = {"BrokerUnreachableError": BrokerUnreachableError, "KafkaAccessError": KafkaAccessError}


def _child(kafka_bytes: bytes, batch_size: int, batch_timeout_ms: int, checkpoint_positions, path: str,
           max_message_bytes: int, vector_parser, batches: "multiprocessing.Queue",
           commands: "multiprocessing.Queue", partition_share=None, trainer_pid: int = 0,
           checkpoint_topic: str = "", slots_spec: Optional[Tuple[str, int, int]] = None,
           checkpoint_topic_id: str = "") -> None:
    # Ctrl-C (or SIGTERM to the process group) is the trainer's to handle: it stops cleanly and then closes
    # this reader. A reader that died of it first made the trainer fail ("the Kafka reader process died").
    ignore_stop_signals()
    # A trainer killed outright (SIGKILL, the OOM killer) cannot close its reader: it must not live on.
    die_with_parent(signal.SIGKILL)  # (SIGTERM is ignored above)
    if trainer_pid and os.getppid() != trainer_pid:
        return  # the trainer died before the line above took effect
    kafka = pipeline_pb2.KafkaInput.FromString(kafka_bytes)
    slots = None
    if slots_spec is not None:
        try:
            slots = BatchSlots(*slots_spec, create=False)  # mapped before "ready": the trainer then unlinks it
        except (OSError, ValueError):
            slots = None  # every batch goes through the queue
    slot_batches = 0
    try:
        source = KafkaInput(kafka, batch_size, batch_timeout_ms, checkpoint_positions, path,
                            max_message_bytes=max_message_bytes, partition_share=partition_share,
                            checkpoint_topic=checkpoint_topic, checkpoint_topic_id=checkpoint_topic_id)
    except ConfigError as e:
        batches.put(("error", "ConfigError", e.path, e.detail))
        return
    except Exception as e:  # pylint: disable=broad-except
        batches.put(("error", type(e).__name__, str(e)))
        return
    garbage.settle()  # the client's per-message objects would trigger full collections (utils/garbage.py)
    batches.put(("ready", source.start_offsets, source.start_mode, [tp.partition for tp in source.partitions],
                 source.offsets_skipped, source.topic_id))
    next_idle_report = 0.0
    try:
        while True:
            try:
                command = commands.get_nowait()
            except queue.Empty:
                command = None
            if command is not None:
                if command[0] == "close":
                    break
                source.commit(command[1])
            batch = source.next_batch(0.2)
            if batch is None:
                if time.time() >= next_idle_report:  # so an offline run learns that it caught up
                    next_idle_report = time.time() + 0.5
                    try:
                        batches.put_nowait(("idle", source.idle_lag))
                    except queue.Full:
                        pass
                continue
            lines = batch.lines
            assert isinstance(lines, BlobLines)  # KafkaInput's batches are one blob
            vectors = None
            if vector_parser is not None:
                vectors = vector_parser.parse_blob(lines.blob, len(lines))
                if vectors is None and lines.has_empty_line():  # declined for them: parse() skips empty lines
                    vectors = vector_parser.parse(lines)
            blob = lines.blob
            layout = slots.write(slot_batches, blob, vectors) if slots is not None and vectors is not None else None
            item: tuple
            if layout is not None:
                item = ("slot", slot_batches, layout, batch.positions, batch.lag, batch.messages,
                        batch.empty_messages, batch.rejected, batch.offsets_skipped, batch.topic_id)
                slot_batches += 1
            else:
                item = ("batch", blob, vectors, batch.positions, batch.lag, batch.messages,
                        batch.empty_messages, batch.rejected, batch.offsets_skipped, batch.topic_id)
            while True:
                try:
                    batches.put(item, timeout=0.2)
                    break
                except queue.Full:
                    try:
                        command = commands.get_nowait()
                    except queue.Empty:
                        continue
                    if command[0] == "close":
                        source.close()
                        return
                    source.commit(command[1])
    except ConfigError as e:  # on_offset_out_of_range: FAIL_OUT_OF_RANGE while reading
        batches.put(("error", "ConfigError", e.path, e.detail))
    except Exception as e:  # pylint: disable=broad-except
        batches.put(("error", type(e).__name__, str(e)))
    source.close()


class KafkaReaderProcess(BatchSource):
    """Same contract as KafkaInput (``start_offsets``, ``start_mode``, ``commit``), reading in a child process."""

    def __init__(self, kafka: pipeline_pb2.KafkaInput, batch_size: int, batch_timeout_ms: int,
                 checkpoint_positions: Optional[Dict[int, int]] = None, path: str = "kafka_train_input",
                 depth: int = 4, start_timeout: float = 120.0, max_message_bytes: int = 0,
                 vector_parser: Optional["VectorCsvParser"] = None,
                 partition_share: Optional[Tuple[int, int]] = None, checkpoint_topic: str = "",
                 checkpoint_topic_id: str = ""):
        context = multiprocessing.get_context("spawn")
        self._batches = context.Queue(maxsize=depth)
        self._commands = context.Queue()
        self._parser = vector_parser
        # depth + 2 slots suffice (see batch_slots.py); one more for margin.
        self._slots = BatchSlots.create(depth + 3, slot_bytes_for(batch_size, len(vector_parser.id_names),
                                                                  len(vector_parser.dense_names),
                                                                  len(vector_parser.label_names),
                                                                  vector_parser.ragged_row_bytes,
                                                                  len(vector_parser.ragged_names))) \
            if vector_parser is not None else None
        slots_spec = (self._slots.path, self._slots.count, self._slots.slot_bytes) if self._slots else None
        self._process = context.Process(
            target=_child, name="easyonline-kafka-reader", daemon=True,
            args=(kafka.SerializeToString(), batch_size, batch_timeout_ms, checkpoint_positions, path,
                  max_message_bytes, vector_parser, self._batches, self._commands, partition_share, os.getpid(),
                  checkpoint_topic, slots_spec, checkpoint_topic_id))
        with stop_signals_blocked():  # the child starts ignoring them (see _child)
            self._process.start()
        try:
            first = self._batches.get(timeout=start_timeout)
        except queue.Empty:
            self.close()
            raise TimeoutError(f"{path}: the Kafka reader did not start within {start_timeout:.0f}s") from None
        finally:
            if self._slots is not None:  # the child has mapped it (or failed): no file to leave behind
                unlink_quietly(self._slots.path)
        if first[0] == "error":
            self._process.join(timeout=5)
            if first[1] == "ConfigError":
                raise ConfigError(first[2], first[3])
            raise _KNOWN_ERRORS.get(first[1], RuntimeError)(first[2])
        _, self.start_offsets, self.start_mode, self.partitions, self.offsets_skipped, self.topic_id = first

    def next_batch(self, timeout: float) -> Optional[RawBatch]:
        try:
            item = self._batches.get(timeout=timeout)
        except queue.Empty:
            if self._process.is_alive():
                return None
            try:  # its last words (an error it ended on) may reach the pipe just after the wait above gave up
                item = self._batches.get(timeout=1.0)
            except queue.Empty:
                raise RuntimeError("the Kafka reader process died") from None
        if item[0] == "error":
            if item[1] == "ConfigError":
                raise ConfigError(item[2], item[3])
            if item[1] in _KNOWN_ERRORS:
                raise _KNOWN_ERRORS[item[1]](item[2])
            raise RuntimeError(f"reading Kafka failed: {item[1]}: {item[2]}")
        if item[0] == "idle":
            self.idle_lag = item[1]
            return None
        self.idle_lag = None
        if item[0] == "slot":  # copied out before the next get (the ring's rule, batch_slots.py)
            _, index, layout, positions, lag, messages, empty, rejected, skipped, topic_id = item
            slots, parser = self._slots, self._parser
            assert slots is not None and parser is not None  # (the child sends slots only when both exist)
            blob, vectors = slots.read(index, layout, parser.id_names, parser.dense_names, parser.label_names,
                                       parser.ragged_names, parser.ragged_dtypes)
        else:
            _, blob, vectors, positions, lag, messages, empty, rejected, skipped, topic_id = item
        parsed = None
        if vectors is not None:
            # why: ParsedBatch holds tensors; the child imports this module and must not load TensorFlow
            from easyonline.features.csv_parser import ParsedBatch  # pylint: disable=g-import-not-at-top
            parsed = ParsedBatch.from_vectors(vectors)
        return RawBatch(BlobLines(blob), positions, lag=lag, messages=messages, empty_messages=empty,
                        rejected=rejected, parsed=parsed, offsets_skipped=skipped, topic_id=topic_id)

    @property
    def pid(self) -> Optional[int]:
        """The reader process's id (its CPU is not this process's)."""
        return self._process.pid

    def commit(self, positions: Dict[int, int]) -> None:
        self._commands.put(("commit", dict(positions)))

    def close(self) -> None:
        if self._process.is_alive():
            self._commands.put(("close",))
            self._process.join(timeout=15)
        if self._process.is_alive():
            self._process.kill()  # (it ignores SIGTERM)
            self._process.join(timeout=5)
        if self._slots is not None:
            self._slots.close()
