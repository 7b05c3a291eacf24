"""What the trainer reads from: the source, its parser and its dead-letter sink, chosen from the config.

Kafka (``kafka_train_input``) is read by a reader process that decodes
records and, for plain CSV, parses them too (see reader_process.py); files
(``file_train_input``) are read in this process. Rejected samples go to
``data_config.dead_letter_topic`` when one is set.
"""
import logging
from typing import Dict, Optional, Tuple

from easyonline.config.kafka_settings import extra_consumer_config
from easyonline.features import FeatureSpecs
from easyonline.features.record_parser import make_parser
from easyonline.features.vector_csv import VectorCsvParser, array_path_refusal
from easyonline.inputs import fast_records
from easyonline.inputs.dead_letter import DeadLetterSink
from easyonline.inputs.file_input import FileInput
from easyonline.inputs.raw_batch import BatchSource
from easyonline.inputs.reader_process import KafkaReaderProcess
from easyonline.protos import pipeline_pb2
from easyonline.utils import fileio

log = logging.getLogger(__name__)


def stream_topic(config: pipeline_pb2.PipelineConfig) -> str:
    """The topic training reads ("" for files): checkpoints save it beside their positions."""
    return config.kafka_train_input.topic if config.HasField("kafka_train_input") else ""


def build_source(config: pipeline_pb2.PipelineConfig, specs: FeatureSpecs,
                 positions: Optional[Dict[int, int]] = None,
                 partition_share: Optional[Tuple[int, int]] = None, positions_topic: str = "",
                 positions_topic_id: str = "") -> BatchSource:
    """The configured training input, starting at ``positions`` (a checkpoint's) when given.

    ``positions_topic``: the topic the checkpoint's positions are for (see
    ``inputs.start_position.usable_checkpoint_positions``) and Kafka's id of it; "" if unknown.

    ``partition_share=(i, n)``: only the Kafka partitions p with ``p % n == i`` (the i-th of n cluster trainers),
    or for files, the paths i, i + n, i + 2n, ...
    """
    data = config.data_config
    if config.HasField("kafka_train_input"):
        refusal = array_path_refusal(specs, data)
        parser = None if refusal else VectorCsvParser(specs)
        log.info("input: a reader process decodes Kafka records %s and parses %s",
                 "in C" if fast_records.native_available() else "in Python (C decoder not built)",
                 f"in TensorFlow on the trainer ({refusal})" if parser is None else
                 "in C" if parser.native else "with numpy (C decoder not built)")
        return KafkaReaderProcess(config.kafka_train_input, data.batch_size, data.batch_timeout_ms,
                                  checkpoint_positions=positions or None, max_message_bytes=data.max_message_bytes,
                                  vector_parser=parser, partition_share=partition_share,
                                  checkpoint_topic=positions_topic, checkpoint_topic_id=positions_topic_id)
    paths = list(config.file_train_input.paths)
    if partition_share is not None:  # a cluster trainer reads its share of the files
        paths = paths[partition_share[0]::partition_share[1]]
    return FileInput(paths, data.batch_size)


def build_parser(config: pipeline_pb2.PipelineConfig, specs: FeatureSpecs):
    """The parser of lines the source does not parse itself (CSV in TensorFlow, JSON, a user's parse_fn)."""
    return make_parser(specs, config.data_config)


def build_dead_letter(config: pipeline_pb2.PipelineConfig) -> Optional[DeadLetterSink]:
    """The dead-letter sink ``data_config.dead_letter_topic`` names, on the training input's brokers."""
    if config.data_config.dead_letter_topic and config.HasField("kafka_train_input"):
        return DeadLetterSink(config.kafka_train_input.server, config.data_config.dead_letter_topic,
                              fileio.basename(config.model_dir),
                              extra_consumer_config(config.kafka_train_input, "kafka_train_input"))
    return None
