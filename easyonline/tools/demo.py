"""The main job of the README: a whole online-training run on the local broker.

Starts the embedded broker (tansu; ``--apache_kafka``: Apache Kafka itself,
which needs Java 17 and, the first time, Maven), streams a synthetic Criteo-shaped CTR stream
with a concept drift into it (from a separate producer process), trains
DeepFM online from samples/online.config, and prints a summary: the
prequential AUC before the drift, after it for the online model, and for a
copy of the model frozen at the drift point and scored on the same samples.

    python -m easyonline.tools.demo [--samples 500000 --drift_at 200000] [--apache_kafka]

The AUC verdicts ("recovered ... yes/NO") are printed, not exit codes: a run that completes and whose
published updates replay into the trained model exactly exits 0 whatever they say (a NO comes with a line
saying why; a stream too short to show the recovery is warned about at the start: it needs --drift_at of at
least 60,000 and 100,000 samples after it, e.g. --samples 160000 --drift_at 60000). Updates that do not
replay exactly are a defect in easyonline: the summary names the first differences and the demo exits 1.
"""
import logging
import os
import subprocess
import sys
import tempfile
import threading
from typing import List, Optional

import numpy as np
from absl import flags

from easyonline.config import load_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.tools.sample_configs import sample_config
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.callbacks import Callback
from easyonline.core.exit_codes import run_job
from easyonline.core.metrics import PrequentialMetrics
from easyonline.jobs.online_train import build_trainer
from easyonline.publish.publish_callback import IncrementalPublish
from easyonline.scoring.auc_curves import plot_auc_curves, windowed_auc
from easyonline.scoring.checkpoint_model import CheckpointModel
from easyonline.tools.apache_kafka import ApacheKafka
from easyonline.tools.apache_kafka_install import install as install_apache_kafka
from easyonline.tools.local_broker import LocalBroker
from easyonline.tools.read_updates import read_all
from easyonline.updates.codec import decode_update
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.param_ids import read_parameter_ids
from easyonline.updates.replica import ParameterReplica
from easyonline.updates.transport import StreamLocation
from easyonline.utils.cli import run_command
from easyonline.utils.logs import setup_logging

tf = ensure_legacy_keras()


log = logging.getLogger("easyonline.demo")
LINES_PER_MESSAGE = 4  # the demo's producer puts 4 samples in each message, messages round-robin over partitions
# The stream it takes to show the recovery with samples/online.config (a 50,000-sample metrics window):
# tests/integration/test_demo.py's --samples 160000 --drift_at 60000 learns before the drift (window AUC > 0.65)
# and recovers after it; the defaults (500000, 200000) have room to spare. A shorter stream runs, but its
# pre-drift window is short and the online model has no time to regain its AUC: the verdict is NO.
MIN_BEFORE_DRIFT = 60000
MIN_AFTER_DRIFT = 100000
LEARNED_AUC = 0.6  # a pre-drift window AUC under this is too near chance (0.5) to recover to
SIZES_THAT_SHOW_IT = f"--drift_at >= {MIN_BEFORE_DRIFT} and --samples >= drift_at + {MIN_AFTER_DRIFT}, " \
                     "e.g. --samples 160000 --drift_at 60000 (the defaults: 500000, 200000)"


def short_stream_warning(samples: int, drift_at: int) -> Optional[str]:
    """The warning for a stream too short to show the recovery (None when it is long enough)."""
    short = []
    if drift_at < MIN_BEFORE_DRIFT:
        short.append(f"{max(drift_at, 0):,} samples before the drift are too few to learn from")
    if samples - drift_at < MIN_AFTER_DRIFT:
        short.append(f"{max(samples - drift_at, 0):,} after it too few for the online model to recover")
    if not short:
        return None
    return (f"--samples {samples} --drift_at {drift_at}: {' and '.join(short)}; the run completes but its "
            f"recovery verdict will be NO. Sizes that show the recovery: {SIZES_THAT_SHOW_IT}")


def learned(pre_drift_auc: Optional[float]) -> bool:
    """Whether the model had learned before the drift: the recovery verdicts compare with that AUC, and one
    near chance (a short stream's first thousands of samples) would make any later AUC a recovery."""
    return pre_drift_auc is not None and pre_drift_auc >= LEARNED_AUC


def why_not_recovered(pre_drift_auc: Optional[float], trained: int, frozen_at: Optional[int]) -> str:
    """One line saying why the online model's verdict is NO."""
    if pre_drift_auc is None or frozen_at is None:
        return (f"the stream never reached the drift ({trained:,} samples trained): raise --max_seconds, or "
                f"use {SIZES_THAT_SHOW_IT}")
    reasons = []
    if not learned(pre_drift_auc):
        reasons.append(f"the model had not learned before the drift (window AUC {pre_drift_auc:.4f} after "
                       f"{frozen_at:,} samples, under {LEARNED_AUC}; chance is 0.5)")
    after = trained - frozen_at
    if after < MIN_AFTER_DRIFT:
        reasons.append(f"too few samples after the drift for the online model to recover ({after:,} trained, "
                       f"it needs about {MIN_AFTER_DRIFT:,})")
    if not reasons:
        return (f"{after:,} samples were trained after the drift, usually enough ({MIN_AFTER_DRIFT:,}): the "
                "pre-drift window AUC may have been a lucky high; rerun, or use a longer stream")
    return "; ".join(reasons) + f". Sizes that show the recovery: {SIZES_THAT_SHOW_IT}"


def frozen_marker_label(frozen_at: int, drift_at: int) -> str:
    """The plot's label of the line where the copy was frozen: in trained samples, which is before the
    stream's drift (the first partition to reach it got there while the others lagged). Two lines, to fit."""
    return (f"copy frozen at {frozen_at:,} trained samples\n(a partition reached the stream's drift "
            f"at sample {drift_at:,})")


class DriftMonitor(Callback):
    """At the drift point: records the online AUC and freezes a copy of the model; then scores each
    later batch with the frozen copy too, over the same sliding window as the online metrics.

    The drift point is where the stream is, not how many samples were trained: the reader does not
    interleave partitions evenly, so by the 60,000th trained sample one partition may already be far
    into the drifted part while the other lags. The model is frozen after the first batch that reached
    the drift in any partition (sample ``4 * (offset * partitions + partition)`` sits at that offset).
    """

    def __init__(self, drift_at: int, stop_after: int, frozen_dir: str, partitions: int):
        self.drift_message = drift_at // LINES_PER_MESSAGE
        self.partitions = partitions
        self.drift_at = drift_at
        self.stop_after = stop_after
        self.frozen_dir = frozen_dir
        self.pre_drift_auc: Optional[float] = None
        self.frozen_model = None
        self.frozen_metrics = None
        # Every trained sample's label and online score, and the frozen copy's score from the freeze on (the plot).
        self.labels: List[np.ndarray] = []
        self.online_scores: List[np.ndarray] = []
        self.frozen_scores: List[np.ndarray] = []
        self.frozen_at: Optional[int] = None

    def _freeze(self, trainer) -> None:
        path = tf.train.Checkpoint(model=trainer.model).write(os.path.join(self.frozen_dir, "frozen"))
        self.frozen_model = CheckpointModel(trainer.config)
        self.frozen_model.restore(path)
        self.frozen_metrics = PrequentialMetrics(trainer.metrics.window_samples)
        self.pre_drift_auc = trainer.metrics.auc()
        self.frozen_at = sum(len(labels) for labels in self.labels)
        log.info("drift point reached: online window AUC %.4f; model frozen for comparison", self.pre_drift_auc)

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs) -> None:
        trained = trainer.samples_trained()
        self.labels.append(np.asarray(parsed_batch.labels).reshape(-1))
        self.online_scores.append(np.asarray(probs).reshape(-1))
        reached = any(offset * self.partitions + partition >= self.drift_message
                      for partition, offset in trainer.positions.items())
        if self.frozen_model is None and reached:
            self._freeze(trainer)
        elif self.frozen_model is not None:
            frozen = self.frozen_model.score(parsed_batch.features)
            self.frozen_metrics.update(parsed_batch.labels.numpy(), frozen)
            self.frozen_scores.append(np.asarray(frozen).reshape(-1))
        if trained >= self.stop_after:
            trainer.stop(f"the demo stream's {self.stop_after} samples were trained")


    def plot(self, path: str, window: int) -> None:
        """A PNG of windowed AUC over the trained stream: the online model against its frozen copy."""
        labels, online = np.concatenate(self.labels), np.concatenate(self.online_scores)
        step = max(window // 5, 1)
        curves = {"online": windowed_auc(labels, online, window, step)}
        if self.frozen_at is not None and self.frozen_scores:
            frozen = np.concatenate([online[:self.frozen_at], np.concatenate(self.frozen_scores)])
            curves["frozen at the drift"] = windowed_auc(labels, frozen, window, step, start=self.frozen_at)
        label = frozen_marker_label(self.frozen_at, self.drift_at) if self.frozen_at is not None else \
            f"the stream's drift at sample {self.drift_at:,} was not reached"
        plot_auc_curves(path, curves, self.frozen_at or 0, label, "easyonline demo: DeepFM on a drifting stream")


def check_updates(config, trainer) -> Optional[dict]:
    """Replays the published update stream into a replica and compares it with the trained model."""
    publish = next((c for c in trainer.callbacks if isinstance(c, IncrementalPublish)), None)
    if publish is None:
        return None
    records = read_all(StreamLocation.from_config(config.train_config.incr_save_config))
    replica = ParameterReplica(publish.model_name)
    for _, data in records:
        replica.apply(decode_update(data))
    return {"messages": len(records), "bytes": sum(len(d) for _, d in records),
            "last_sequence": replica.next_sequence - 1,
            "differences": differences_from_model(replica, trainer.model, read_parameter_ids(config.model_dir))}


def define_flags() -> None:
    """Defined on demand, so importing this module never clashes with other commands' flags."""
    flags.DEFINE_integer("samples", 500000, "Samples in the stream.")
    flags.DEFINE_integer("drift_at", 200000, "Sample index of the concept drift.")
    flags.DEFINE_integer("partitions", 2, "Partitions of the samples topic.")
    flags.DEFINE_float("rate", 0, "Producer rate in samples/s (0: as fast as it can).")
    flags.DEFINE_string("config", sample_config("online.config"),
                        "Pipeline config; kafka server, topic and model_dir are set by the demo.")
    flags.DEFINE_string("model_dir", "", "Where checkpoints go (default: a new temporary directory).")
    flags.DEFINE_float("max_seconds", 900, "Give up after this long.")
    flags.DEFINE_bool("apache_kafka", False, "Run on Apache Kafka itself (one KRaft broker started here; needs Java "
                      "17, and Maven the first time to fetch it) instead of the embedded tansu broker.")
    flags.DEFINE_string("png", "", "Where to write the plot of windowed AUC, online vs frozen (default: auc.png in "
                        "the demo's work directory; 'none': no plot). Needs matplotlib (a dev dependency).")


def main(argv) -> int:
    del argv
    setup_logging("INFO")
    return run_job(_demo)


def _demo() -> int:
    FLAGS = flags.FLAGS
    warning = short_stream_warning(FLAGS.samples, FLAGS.drift_at)
    if warning:
        log.warning("%s", warning)

    work = tempfile.mkdtemp(prefix="easyonline-demo-")
    model_dir = FLAGS.model_dir or os.path.join(work, "model")
    if FLAGS.apache_kafka:
        install_apache_kafka()
        broker_name, broker_cm = "Apache Kafka", ApacheKafka(1, work_dir=os.path.join(work, "apache-kafka"))
    else:
        broker_name, broker_cm = "local broker", LocalBroker(log_path=os.path.join(work, "broker.log"))
    with broker_cm as broker:
        broker.create_topic("samples", FLAGS.partitions)
        producer = subprocess.Popen(
            [sys.executable, "-m", "easyonline.tools.stream_producer", f"--bootstrap={broker.bootstrap}",
             "--topic=samples", f"--samples={FLAGS.samples}", f"--drift_at={FLAGS.drift_at}",
             f"--partitions={FLAGS.partitions}", f"--rate={FLAGS.rate}", f"--lines_per_message={LINES_PER_MESSAGE}"])
        try:
            config = load_pipeline_config(FLAGS.config)
            config.model_dir = model_dir
            config.kafka_train_input.server = broker.bootstrap
            config.kafka_train_input.topic = "samples"
            incr = config.train_config.incr_save_config
            if config.train_config.HasField("incr_save_config") and incr.WhichOneof("storage") == "kafka":
                incr.kafka.server = broker.bootstrap
            validate_pipeline_config(config, online=True)
            monitor = DriftMonitor(FLAGS.drift_at, FLAGS.samples, os.path.join(work, "frozen"), FLAGS.partitions)
            trainer = build_trainer(config, online=True, callbacks=[monitor])
            timer = threading.Timer(FLAGS.max_seconds, lambda: trainer.stop("demo time limit"))
            timer.daemon = True
            timer.start()
            summary = trainer.run()
            timer.cancel()
            updates = check_updates(config, trainer)
        finally:
            producer.terminate()
            producer.wait()
    online_auc = summary.auc
    frozen_auc = monitor.frozen_metrics.auc() if monitor.frozen_metrics else None
    pre = monitor.pre_drift_auc
    fmt = lambda v: "-" if v is None else f"{v:.4f}"
    print()
    print(f"easyonline demo: online DeepFM on a drifting stream ({broker_name})")
    for line in summary.lines():
        print("  " + line)
    print(f"  prequential AUC before the drift (window ending at sample {FLAGS.drift_at}): {fmt(pre)}")
    print(f"  prequential AUC at the end, online model:                 {fmt(online_auc)}")
    print(f"  AUC at the end, model frozen at the drift point:          {fmt(frozen_auc)}")
    recovered = learned(pre) and online_auc is not None and online_auc >= pre - 0.02
    frozen_ok = learned(pre) and frozen_auc is not None and frozen_auc >= pre - 0.02
    print(f"  online model recovered to within 0.02 of pre-drift AUC:   {'yes' if recovered else 'NO'}")
    if not recovered:
        print(f"    why: {why_not_recovered(pre, trainer.samples_trained(), monitor.frozen_at)}")
    print(f"  frozen model recovered to within 0.02 of pre-drift AUC:   {'yes' if frozen_ok else 'no'}")
    if updates is not None:
        print(f"  updates published: {updates['messages']} messages, {updates['bytes']} bytes, "
              f"last sequence {updates['last_sequence']}")
        print(f"  replaying them rebuilds the trained model exactly:       "
              f"{'yes' if not updates['differences'] else 'NO: ' + '; '.join(updates['differences'][:3])}")
    print(f"  model_dir: {model_dir}")
    if FLAGS.png != "none":
        png = FLAGS.png or os.path.join(work, "auc.png")
        try:
            monitor.plot(png, window=config.train_config.metrics_window_samples)
            print(f"  plot of windowed AUC, online vs frozen:                   {png}")
        except ImportError as e:
            print(f"  no plot: {e}")
    if updates is not None and updates["differences"]:
        log.error("the published updates do not rebuild the trained model exactly: a defect in easyonline, "
                  "please report it with this log")
        return 1
    return 0


def run() -> None:
    run_command(define_flags, main)


if __name__ == "__main__":
    run()
