"""Evaluates checkpoints on the eval input: AUC, logloss and CTR per checkpoint, to TensorBoard and JSON lines.

A model with several tasks is evaluated per task (``EvalResult.tasks``): AUC,
logloss, CTR (and gauc / session_auc) of each binary task on its own label,
MSE of each regression task; the top-level figures are the primary task's.

With ``eval_config.metrics_set { gauc { uid_field } }`` (or ``session_auc``)
also the AUC within each user's (session's) samples, averaged; that keeps the
pass's ids, labels and scores in memory (about 20 bytes a sample).

Every checkpoint is scored on a fresh pass over the same input (the files,
or kafka_eval_input from its configured start to where the topic stands,
at most ``max_samples``), so results of successive checkpoints compare.
"""
import dataclasses
import json
import logging
import os
import time
from typing import Callable, Dict, List, Optional

import numpy as np

from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ConfigError
from easyonline.eval.checkpoint_follower import CheckpointFollower
from easyonline.features.record_parser import make_parser
from easyonline.inputs import FileInput, KafkaInput
from easyonline.inputs.raw_batch import BatchSource
from easyonline.protos import pipeline_pb2
from easyonline.scoring.checkpoint_model import CheckpointModel
from easyonline.scoring.grouped_auc import grouped_auc, grouped_auc_metrics
from easyonline.scoring.passes import parsed_batches
from easyonline.inputs.bad_input import BadInputMonitor
from easyonline.core.metrics import PrequentialMetrics, RegressionMetrics
from easyonline.core.stop_signal import STOP_SIGNAL_FILE, StopSignal
from easyonline.utils import fileio

tf = ensure_legacy_keras()
log = logging.getLogger(__name__)
PROGRESS_SECS = 10.0  # a progress line this often while one evaluation runs
RESULTS_FILE = "results.jsonl"


@dataclasses.dataclass
class EvalResult:
    checkpoint: str
    step: int
    samples: int
    auc: Optional[float]
    logloss: Optional[float]
    ctr: Optional[float]
    rejected: int
    seconds: float
    evaluated_at: float
    gauc: Optional[float] = None  # with eval_config's gauc / session_auc, else None
    session_auc: Optional[float] = None
    #: every task's figures by task name (auc, logloss, ctr, gauc, session_auc of a binary task; mse,
    #: label_mean of a regression task); the fields above are the primary task's when it is binary
    tasks: Dict[str, Dict[str, Optional[float]]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def check_eval_input(config: pipeline_pb2.PipelineConfig) -> None:
    if not config.HasField("kafka_eval_input") and not config.file_eval_input.paths:
        raise ConfigError("kafka_eval_input", "the eval job needs kafka_eval_input (server, topic) or "
                          "file_eval_input (paths)")
    if config.HasField("kafka_eval_input") and not (config.kafka_eval_input.server and config.kafka_eval_input.topic):
        raise ConfigError("kafka_eval_input", "needs server and topic")


def eval_source(config: pipeline_pb2.PipelineConfig) -> BatchSource:
    """kafka_eval_input (from its offset_info / offset_time / earliest), else file_eval_input."""
    check_eval_input(config)
    data = config.data_config
    if config.HasField("kafka_eval_input"):
        section = pipeline_pb2.KafkaInput()
        section.CopyFrom(config.kafka_eval_input)
        section.group = ""  # the eval job commits nothing: no consumer group, so it needs no ACL on one
        return KafkaInput(section, data.batch_size, data.batch_timeout_ms, path="kafka_eval_input",
                          max_message_bytes=data.max_message_bytes)
    return FileInput(config.file_eval_input.paths, data.batch_size)


class Evaluator:
    """Scores checkpoints of ``config.model_dir`` on the eval input; results go to ``eval_dir``."""

    def __init__(self, config: pipeline_pb2.PipelineConfig, eval_dir: str, max_samples: int = 0,
                 make_source: Optional[Callable[[], BatchSource]] = None):
        self.config = config
        self.eval_dir = eval_dir
        self.max_samples = max_samples
        if make_source is None:
            check_eval_input(config)
        self._make_source = make_source or (lambda: eval_source(config))
        self.model = CheckpointModel(config)
        self.parser = make_parser(self.model.specs, config.data_config)
        self.grouped = grouped_auc_metrics(config, self.model.specs)
        os.makedirs(eval_dir, exist_ok=True)
        self.results_path = os.path.join(eval_dir, RESULTS_FILE)
        self._writer = tf.summary.create_file_writer(eval_dir)
        self.stop_signal = StopSignal()

    def evaluate(self, checkpoint: str) -> EvalResult:
        started = time.time()
        step = self.model.restore(checkpoint)
        tasks = list(self.model.model.tasks) if self.model.model is not None else []
        metrics = {task.name: PrequentialMetrics(window_samples=2**62) if task.kind == "binary"
                   else RegressionMetrics(window_samples=2**62) for task in tasks}  # one window: the whole pass
        samples = 0
        bad_input = BadInputMonitor(self.config.data_config)
        source = self._make_source()
        log.info("evaluating %s (step %d)", checkpoint, step)
        next_progress = time.time() + PROGRESS_SECS
        # for gauc / session_auc: each batch's labels and scores of every binary task, and the ids that group them
        binary = [task for task in tasks if task.kind == "binary"] if self.grouped else []
        kept_labels: Dict[str, List[np.ndarray]] = {task.name: [] for task in binary}
        kept_probs: Dict[str, List[np.ndarray]] = {task.name: [] for task in binary}
        kept_keys: Dict[str, List[np.ndarray]] = {m.name: [] for m in self.grouped}
        try:
            for batch in parsed_batches(source, self.parser, bad_input, self.max_samples,
                                        should_stop=self.stop_signal.should_stop):
                labels = batch.labels_by_name(self.model.specs.label_names[0])
                predictions = self.model.score_tasks(batch.features)
                targets = self.model.model.tasks.targets(labels) if tasks else {}
                for task in tasks:
                    task_labels = np.asarray(targets[task.name])
                    metrics[task.name].update(task_labels, predictions[task.name])
                    if task.name in kept_labels:
                        kept_labels[task.name].append(task_labels)
                        kept_probs[task.name].append(np.asarray(predictions[task.name]))
                for metric in self.grouped:
                    kept_keys[metric.name].append(np.asarray(batch.features[metric.feature]))
                samples += batch.size
                if time.time() >= next_progress:
                    next_progress = time.time() + PROGRESS_SECS
                    log.info("step %d: scored %d samples (%.0f/s)", step, samples,
                             samples / max(time.time() - started, 1e-9))
        finally:
            source.close()
            bad_input.close()
        figures = {task.name: metrics[task.name].figures() for task in tasks}
        for name in kept_labels:
            if kept_labels[name]:
                labels, probs = np.concatenate(kept_labels[name]), np.concatenate(kept_probs[name])
                figures[name].update({m.name: grouped_auc(np.concatenate(kept_keys[m.name]), labels, probs,
                                                          m.reduction) for m in self.grouped})
            else:
                figures[name].update({m.name: None for m in self.grouped})
        primary = figures[tasks[0].name] if tasks else {}
        grouped = {m.name: primary.get(m.name) for m in self.grouped}
        result = EvalResult(checkpoint, step, samples, primary.get("auc"), primary.get("logloss"),
                            primary.get("ctr"), bad_input.total, time.time() - started, time.time(), **grouped,
                            tasks=figures)
        self._write(result)
        return result

    def _write(self, result: EvalResult) -> None:
        with self._writer.as_default(step=result.step):
            for name in ("auc", "logloss", "ctr", "gauc", "session_auc"):
                value = getattr(result, name)
                if value is not None:
                    tf.summary.scalar(f"eval_{name}", value)
            for task, values in result.tasks.items():  # eval_mse of a regression model, eval_auc/<task> of several
                for name, value in values.items():
                    single_binary = len(result.tasks) == 1 and "auc" in values
                    if value is not None and not single_binary:
                        tf.summary.scalar(f"eval_{name}" if len(result.tasks) == 1 else f"eval_{name}/{task}", value)
            tf.summary.scalar("eval_samples", result.samples)
        self._writer.flush()
        with open(self.results_path, "a") as f:
            f.write(result.to_json() + "\n")
        fmt = lambda v: "-" if v is None else f"{v:.4f}"
        if len(result.tasks) > 1 or (result.tasks and result.auc is None):
            figures = " ".join(f"{name}{'' if len(result.tasks) == 1 else '_' + task}={fmt(value)}"
                               for task, values in result.tasks.items() for name, value in values.items())
        else:
            grouped = "".join(f" {m.name}={fmt(getattr(result, m.name))}" for m in self.grouped)
            figures = f"auc={fmt(result.auc)}{grouped} logloss={fmt(result.logloss)} ctr={fmt(result.ctr)}"
        log.info("evaluated step %d: %s samples=%d rejected=%d in %.1fs (%s)", result.step, figures,
                 result.samples, result.rejected, result.seconds, result.checkpoint)

    def follow(self, poll_secs: float = 5.0, max_evaluations: int = 0, idle_timeout_secs: float = 0,
               stop_grace_secs: float = 30.0, on_result: Callable[[EvalResult], None] = lambda r: None) -> str:
        """Evaluates each new checkpoint until stopped; returns why it stopped.

        Stops on SIGTERM/SIGINT, after ``max_evaluations``, after ``idle_timeout_secs`` without a new
        checkpoint, or once the trainer's stop file is in model_dir and no new checkpoint (the trainer's
        final save) came for ``stop_grace_secs``.
        """
        self.stop_signal.install_signal_handlers()
        follower = CheckpointFollower(self.config.model_dir)
        stop_file = fileio.join(self.config.model_dir, STOP_SIGNAL_FILE)
        evaluations, last_new = 0, time.time()
        stop_seen = None
        while not self.stop_signal.should_stop():
            if stop_seen is None and fileio.exists(stop_file):
                stop_seen = time.time()
            for path in follower.new_checkpoints():
                if self.stop_signal.should_stop():
                    break
                try:
                    on_result(self.evaluate(path))
                except (tf.errors.NotFoundError, FileNotFoundError) as e:
                    log.warning("checkpoint %s disappeared before it was evaluated: %s", path, e)
                    continue
                evaluations += 1
                last_new = time.time()
                if max_evaluations and evaluations >= max_evaluations:
                    return f"evaluated {evaluations} checkpoint(s)"
            if stop_seen is not None and time.time() - max(stop_seen, last_new) > stop_grace_secs:
                return f"found stop signal {stop_file} and no newer checkpoint"
            if idle_timeout_secs and time.time() - last_new > idle_timeout_secs:
                return f"no new checkpoint for {idle_timeout_secs:.0f}s"
            deadline = time.time() + poll_secs
            while time.time() < deadline and not self.stop_signal.should_stop():
                time.sleep(0.2)
        return self.stop_signal.reason

    def close(self) -> None:
        self._writer.close()
