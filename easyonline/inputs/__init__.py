"""Sample sources: Kafka (online) and CSV files (offline), batched with a max wait."""
from easyonline.inputs.raw_batch import RawBatch, BatchSource
from easyonline.inputs.file_input import FileInput
from easyonline.inputs.kafka_input import KafkaInput
from easyonline.inputs.prefetcher import Prefetcher
