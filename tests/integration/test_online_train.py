"""online_train from a Python generator and from a KafkaInput, with a user callback that stops training."""
import numpy as np

import easyonline
from easyonline.inputs import KafkaInput
from easyonline.tools.stream_producer import SyntheticCtrStream, produce
from easyonline.core.callbacks import Callback
from tests.conftest import TEST_TABLES, online_config


class StopWhenAucAbove(Callback):
    """A user's rule, written without touching easyonline: stop once the windowed AUC passes a bar."""

    def __init__(self, threshold):
        self.threshold, self.batches = threshold, 0

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.batches += 1
        auc = trainer.metrics.auc()
        if self.batches >= 5 and auc is not None and auc > self.threshold:
            trainer.stop(f"windowed AUC {auc:.3f} > {self.threshold}")


def _batches(count, batch_size=256):
    """Feature/label batches as plain numpy arrays, as a user's own pipeline would make them."""
    stream = SyntheticCtrStream()
    for start in range(0, count, batch_size):
        labels, numerics, cats = stream.arrays(start, batch_size)
        features = {f"I{i + 1}": numerics[:, i].astype(np.float32) for i in range(13)}
        features.update({f"C{j + 1}": cats[:, j] + j * 10**9 for j in range(TEST_TABLES)})  # the model's ids
        yield features, labels


def test_online_train_from_a_generator_with_a_stopping_callback(tmp_path):
    config = online_config(tmp_path / "m", **{"train_config.save_checkpoints_secs": 0})
    stopper = StopWhenAucAbove(0.75)
    summary = easyonline.online_train(config, _batches(200000), callbacks=[stopper], online=False)
    assert summary.stop_reason.startswith("windowed AUC")
    assert summary.samples < 200000 and summary.auc > 0.75
    assert summary.checkpoint is not None


def test_online_train_from_a_kafka_input_and_replaced_callbacks(broker, topic, tmp_path):
    broker.create_topic(topic, 2)
    produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 6000), partitions=2)
    config = online_config(tmp_path / "m", broker.bootstrap, topic, **{"data_config.batch_size": 500})
    source = KafkaInput(config.kafka_train_input, 500, 200)
    saves = []

    class CountCheckpoints(Callback):
        def on_checkpoint(self, trainer, path):
            saves.append(path)

    summary = easyonline.online_train(config, source, callbacks=[CountCheckpoints()], online=False,
                                      default_callbacks=False)
    assert summary.samples == 6000 and summary.positions == {0: 3000, 1: 3000}
    assert len(saves) == 1  # only the final one: the config's 600 s schedule was replaced
