"""Runs EasyRec configs end to end here: each given a Kafka input, loaded, trained, exported, served and replayed.

A user coming from EasyRec can check their configs (``--configs DIR``); the project judges EasyRec's own
multi-task and ranking samples (MultiTower, DBMTL, MMoE, ESMM, DCN, DIN, BST) with it (``--mirror``). Installed,
not a bench script, because the tests run its parts (a config's generated stream, its Kafka input, the replay
check) as a user's check would, and tools/bench/ scripts are leaves no test imports.

For each config, as a user coming from EasyRec would run it: its file inputs
(``train_input_path``, ``eval_input_path``) are replaced by a
``kafka_train_input`` on the local broker and ``input_type: KafkaInput``
(``with_kafka_input``), and it is loaded by the trainer's own loader
(``load_pipeline_config``: EasyRec's forms are read by config/easyrec_compat.py)
and validated. Then, one step after another, each stopping the config at its
first error:

- trained: a stream generated from the config's own ``input_fields`` and
  feature configs (``sample_lines``: ids for id features, numbers for raw
  features, separated ids for tag features, 0/1 labels for binary tasks,
  numbers for regression ones) goes through the local broker and is trained
  to its end (offline mode), with incremental publishing to an update topic;
- exported: ``python -m easyonline.export`` of the final checkpoint;
- served: ``python -m easyonline.serve`` answers a REST predict of rows built
  from the same fields with every task's outputs (``probs_<tower>`` /
  ``y_<tower>``, or ``probs`` / ``y`` for one task), finite numbers;
- replay-equal: the published updates, replayed into a fresh replica from the
  topic's start, equal the trained model bit for bit (every table's keys and
  rows, every dense parameter).

A config that does not load reports the ConfigError (the field and why): that
is docs/easyrec.md's table. Prints a table and JSON (``--json FILE`` writes it
too); exits 1 unless every family run (all, without ``--only``) has at least one sample passing every step.

    python -m easyonline.tools.easyrec_samples [--configs DIR | --mirror EASYREC_GIT_DIR] [--samples 3000]

Without ``--configs``, the families' ``samples/model_config`` files are
taken from the EasyRec git directory (``git show``) into a temporary
directory; nothing of EasyRec is kept. tests/integration/test_easyrec_multitask.py,
test_easyrec_vector_raw.py and test_easyrec_losses.py run these functions on small configs of their own.
"""
import argparse
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from typing import Dict, List, Optional, Sequence

import numpy as np

from easyonline.config import load_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.core.errors import ConfigError
from easyonline.export.exporter import export_saved_model
from easyonline.features import build_feature_specs
from easyonline.features.feature_spec import is_raw_sequence
from easyonline.jobs.online_train import build_trainer
from easyonline.models.builder import model_tasks as tasks_of
from easyonline.protos import pipeline_pb2
from easyonline.serve.process import ServingProcess
from easyonline.tasks.output_names import prediction_names
from easyonline.tools.local_broker import LocalBroker
from easyonline.tools.stream_producer import produce
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.param_ids import read_parameter_ids
from easyonline.updates.readers import KafkaUpdateReader
from easyonline.updates.replica import replay
from easyonline.utils import preloaded_python
from easyonline.utils.logs import setup_logging

# the directory holding the package: the children (export, serve) find it on PYTHONPATH from a checkout too
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAMILIES = ("multi_tower", "dbmtl", "mmoe", "esmm", "dcn", "din", "bst")
STEPS = ("loaded", "trained", "exported", "served", "replay_equal")
FieldType = pipeline_pb2.DataConfig.FieldType
FeatureType = pipeline_pb2.FeatureConfig.FeatureType
_INTS = (FieldType.INT32, FieldType.INT64)
_FLOATS = (FieldType.FLOAT, FieldType.DOUBLE)


@dataclasses.dataclass
class SampleResult:
    """How far one config got: the steps passed in order, the first error, what it trained and served."""
    name: str
    family: str
    model_class: str = ""
    passed: List[str] = dataclasses.field(default_factory=list)
    error: str = ""
    samples: int = 0
    outputs: List[str] = dataclasses.field(default_factory=list)
    published: int = 0
    seconds: Dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.passed == list(STEPS)


def family_of(name: str) -> str:
    """The family a sample's file name belongs to (its prefix), or ""."""
    return next((f for f in FAMILIES if os.path.basename(name).startswith(f + "_")), "")


def extract_configs(mirror: str, out_dir: str, families: Sequence[str] = FAMILIES) -> List[str]:
    """The families' ``samples/model_config/*.config`` of an EasyRec git directory, written to ``out_dir``."""
    listing = subprocess.run(["git", "-C", mirror, "ls-tree", "-r", "--name-only", "HEAD", "samples/model_config"],
                             capture_output=True, text=True, check=True).stdout.split()
    paths = []
    for name in listing:
        base = os.path.basename(name)
        if base.endswith(".config") and any(base.startswith(f + "_") for f in families):
            text = subprocess.run(["git", "-C", mirror, "show", f"HEAD:{name}"], capture_output=True, check=True).stdout
            path = os.path.join(out_dir, base)
            with open(path, "wb") as f:
                f.write(text)
            paths.append(path)
    return sorted(paths)


_FILE_INPUT = re.compile(r"^\s*(train_input_path|eval_input_path)\s*:.*$", re.M)
_INPUT_TYPE = re.compile(r"(\binput_type\s*:\s*)(\w+Input\w*)")


def with_kafka_input(text: str, server: str, topic: str) -> str:
    """The user's edit of a file-input sample: its input paths replaced by a ``kafka_train_input`` and its
    ``data_config.input_type`` by ``KafkaInput`` (an input field's ``input_type: STRING`` is left alone)."""
    text = _FILE_INPUT.sub("", text)
    text = _INPUT_TYPE.sub(lambda m: m.group(1) + "KafkaInput", text)
    return f'kafka_train_input {{ server: "{server}" topic: "{topic}" }}\n' + text


def load_sample(path: str, server: str, topic: str, model_dir: str, updates_topic: str,
                batch_size: int = 256) -> pipeline_pb2.PipelineConfig:
    """The sample given a Kafka input, loaded and validated as the trainer does, with publishing to
    ``updates_topic`` on; the sample's batch size is lowered to train a few thousand samples in several steps."""
    with open(path) as f:
        text = with_kafka_input(f.read(), server, topic)
    edited = os.path.join(os.path.dirname(model_dir), os.path.basename(path))
    with open(edited, "w") as f:
        f.write(text)
    edits = {"model_dir": model_dir, "data_config.batch_size": batch_size, "data_config.batch_timeout_ms": 200,
             "train_config.save_checkpoints_secs": 0, "train_config.log_step_count_secs": 5,
             "train_config.incr_save_config": {"sparse_save_steps": 2, "dense_save_steps": 3,
                                               "kafka": {"server": server, "topic": updates_topic}}}
    config = load_pipeline_config(edited, json.dumps(edits))
    validate_pipeline_config(config)
    return config


def model_tasks(config: pipeline_pb2.PipelineConfig):
    """The config's tasks (models/builder.py), each with its label and kind."""
    return tasks_of(config, build_feature_specs(config))


def expected_outputs(config: pipeline_pb2.PipelineConfig) -> List[str]:
    """Each task's prediction output the export serves (``probs_ctr``, ``y_price``; ``probs`` for one task)."""
    return prediction_names(model_tasks(config))


def _feature_of_input(config: pipeline_pb2.PipelineConfig) -> Dict[str, pipeline_pb2.FeatureConfig]:
    """The feature config reading each input field (a combo's parts are read as themselves elsewhere)."""
    found: Dict[str, pipeline_pb2.FeatureConfig] = {}
    for feature in config.feature_configs:
        if feature.feature_type != FeatureType.ComboFeature and feature.input_names:
            found.setdefault(feature.input_names[0], feature)
    return found


class SampleGenerator:
    """CSV lines of a config's ``input_fields``, and the same samples as REST rows.

    Each id feature draws from a small skewed vocabulary (so ids repeat and
    are trained); raw features are numbers (spanning their boundaries or
    min_val..max_val; a vector's raw_input_dim numbers joined by its
    separator); tag features 1-3 ids joined by their separator;
    sequence features 0-8 ids (as many in every sequence of a sample, as one
    attention needs), drawn from the vocabulary of the key they are compared
    with (so a sequence names items the stream also shows as targets), or
    numbers spanning the boundaries of a bucketized one; 1-3 of them at each
    position of a sequence with ``seq_multi_sep``; ``raw_input_dim`` numbers at
    each position of a sequence of numbers without boundaries.
    Binary labels are 0/1 from a hidden logistic model of the first id
    feature, a later binary label only where the first is 1 (as a purchase
    needs a click); regression labels are numbers.
    """

    def __init__(self, config: pipeline_pb2.PipelineConfig, seed: int = 5, vocab: int = 60):
        self.config = config
        self.fields = list(config.data_config.input_fields)
        self.separator = config.data_config.separator
        self.features = _feature_of_input(config)
        tasks = model_tasks(config)
        self.label_kind = {t.label_name: t.kind for t in tasks}
        self.labels = set(config.data_config.label_fields) | set(self.label_kind)
        self.rng = np.random.default_rng(seed)
        self.vocab = vocab
        self.weights = self.rng.normal(0, 1.5, vocab)
        self._probs = 1.0 / np.arange(1, vocab + 1) ** 1.1
        self._probs /= self._probs.sum()
        fields = {f.input_name: f for f in self.fields}
        names = {(f.feature_name or f.input_names[0]): f.input_names[0] for f in config.feature_configs}
        # each sequence's paired key (the i-th key of its attention): its field gives the sequence's ids
        self._key_field = {names[h]: fields[names[k]] for g in config.model_config.feature_groups
                           for seq in g.sequence_features for m in seq.seq_att_map for k, h in zip(m.key, m.hist_seq)}
        self._sequence_count = 0

    def _id(self, field: pipeline_pb2.DataConfig.Field, index: int):
        return index if field.input_type in _INTS else f"{field.input_name}_{index}"

    def _value(self, field: pipeline_pb2.DataConfig.Field, hidden: int):
        feature = self.features.get(field.input_name)
        if feature is not None and feature.feature_type == FeatureType.RawFeature:
            if feature.boundaries:
                low, high = feature.boundaries[0] - 1, feature.boundaries[-1] + 1
            elif feature.max_val > feature.min_val:
                low, high = feature.min_val, feature.max_val
            else:
                low, high = 0.0, 10.0
            if feature.raw_input_dim > 1:  # a vector: raw_input_dim numbers joined by the feature's separator
                numbers = self.rng.uniform(low, high, feature.raw_input_dim)
                return feature.separator.join(str(round(float(n), 4)) for n in numbers)
            number = self.rng.uniform(low, high)
            return int(number) if field.input_type in _INTS else round(float(number), 4)
        if feature is not None and feature.feature_type == FeatureType.SequenceFeature and (
                feature.seq_multi_sep or is_raw_sequence(feature)):
            return self._multi_valued(feature, field)
        if feature is not None and feature.feature_type == FeatureType.SequenceFeature and feature.boundaries:
            numbers = self.rng.uniform(feature.boundaries[0] - 1, feature.boundaries[-1] + 1, self._sequence_count)
            return feature.separator.join(str(round(float(n), 2)) for n in numbers)  # bucketized, as RawFeature
        if feature is not None and feature.feature_type == FeatureType.SequenceFeature:
            ids = self.rng.choice(self.vocab, self._sequence_count, p=self._probs)
            key = self._key_field.get(field.input_name, field)
            return feature.separator.join(str(self._id(key, int(i))) for i in ids)
        if feature is not None and feature.feature_type == FeatureType.TagFeature:
            count = int(self.rng.integers(1, 4))
            ids = self.rng.choice(self.vocab, count, p=self._probs)
            return feature.separator.join(str(self._id(field, int(i))) for i in ids)
        if field.input_type in _FLOATS:
            return round(float(self.rng.uniform(0, 10)), 4)
        if field.input_type == FieldType.BOOL:
            return int(self.rng.integers(0, 2))
        return self._id(field, hidden if feature is not None else int(self.rng.integers(0, self.vocab)))

    def _multi_valued(self, feature: pipeline_pb2.FeatureConfig, field: pipeline_pb2.DataConfig.Field) -> str:
        """A sequence of several values a position (seq_multi_sep): 1-3 values at each of its positions, numbers
        spanning its boundaries or ids of its key's vocabulary; or a sequence of numbers fed as numbers:
        raw_input_dim numbers at each position."""
        key = self._key_field.get(field.input_name, field)
        positions = []
        raw = is_raw_sequence(feature)
        for count in self.rng.integers(1, 4, self._sequence_count):
            if raw:
                values = [str(round(float(n), 3)) for n in self.rng.uniform(0, 10, max(feature.raw_input_dim, 1))]
            elif feature.boundaries:
                values = [str(round(float(n), 2)) for n in self.rng.uniform(
                    feature.boundaries[0] - 1, feature.boundaries[-1] + 1, int(count))]
            else:
                values = [str(self._id(key, int(i))) for i in self.rng.choice(self.vocab, int(count), p=self._probs)]
            positions.append(feature.seq_multi_sep.join(values))
        return feature.separator.join(positions)

    def samples(self, count: int) -> List[Dict[str, object]]:
        """``count`` samples as dicts by input name (labels included)."""
        rows = []
        for _ in range(count):
            draws = iter(self.rng.choice(self.vocab, len(self.fields), p=self._probs).tolist())
            self._sequence_count = int(self.rng.integers(0, 9))
            row: Dict[str, object] = {}
            for field in self.fields:
                hidden = next(draws)
                if field.input_name not in self.labels:
                    row[field.input_name] = self._value(field, hidden)
            first = next((v for f, v in row.items() if f in self.features and isinstance(v, (int, str))), 0)
            score = self.weights[zlib.crc32(str(first).encode()) % self.vocab]
            clicked = None
            for field in self.fields:
                name = field.input_name
                if name not in self.labels:
                    continue
                if self.label_kind.get(name, "binary") == "regression":
                    row[name] = round(float(score + self.rng.normal(0, 0.5)), 4)
                elif clicked is None:
                    clicked = int(self.rng.random() < 1 / (1 + math.exp(-score)))
                    row[name] = clicked
                else:
                    row[name] = int(clicked and self.rng.random() < 0.4)
            rows.append(row)
        return rows

    def line(self, row: Dict[str, object]) -> bytes:
        return self.separator.join(str(row.get(f.input_name, "")) for f in self.fields).encode()

    def instance(self, row: Dict[str, object]) -> Dict[str, object]:
        """A TF Serving "instances" row of the fields the features read: ids and tags as strings, numbers as
        numbers."""
        out: Dict[str, object] = {}
        read = {name for feature in self.config.feature_configs for name in feature.input_names}
        for field in self.fields:
            name = field.input_name
            if name not in read:  # labels, the sample weight, fields no feature reads: not the export's inputs
                continue
            value = row[name]
            out[name] = value if field.input_type in _INTS + _FLOATS + (FieldType.BOOL,) else str(value)
        return out


def python_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def export_models(model_dirs: Sequence[str], export_dirs: Sequence[str]) -> List[str]:
    """Each model's latest checkpoint exported by ``easyonline.export``'s own function, all in one child process
    (TFRA's inference mode is process-wide; one TensorFlow start for all): per model the version directory
    written, or ``error: ...``."""
    pairs = [f"{m}={e}" for m, e in zip(model_dirs, export_dirs)]
    proc = preloaded_python.run([sys.executable, "-m", "easyonline.tools.easyrec_samples", "--export", *pairs],
                                preload="trainer", env=python_env(), capture_output=True, text=True,
                                timeout=300 * max(len(pairs), 3), check=False)
    answers = [line.split(" ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("EXPORTED ")]
    if len(answers) != len(pairs):
        raise RuntimeError(f"export exited {proc.returncode}: {proc.stderr[-1500:]}")
    return answers


def _export_each(pairs: Sequence[str]) -> None:
    """The child of export_models: prints ``EXPORTED <version dir>`` or ``EXPORTED error: ...`` per pair."""
    for pair in pairs:
        model_dir, export_dir = pair.split("=", 1)
        try:
            config = load_pipeline_config(os.path.join(model_dir, "pipeline.config"))
            validate_pipeline_config(config, online=False)
            print("EXPORTED " + export_saved_model(config, export_dir), flush=True)
        except Exception as e:  # pylint: disable=broad-except  (reported per model; the others go on)
            print(f"EXPORTED error: {_error(e)}".replace("\n", " "), flush=True)


def serve_and_predict(jobs: Sequence[tuple], parallel: int = 2) -> List[object]:
    """For each (export dir, log path, rows): the REST predictions of the rows by ``python -m easyonline.serve``
    on that export, or the exception; each server in its own process, at most ``parallel`` at once (21 servers
    starting together on two cores did not answer within 120 s); each may take 300 s to start on a loaded machine."""
    answers: List[object] = [None] * len(jobs)
    slots = threading.Semaphore(max(1, parallel))

    def one(i: int, export_dir: str, log_path: str, rows: List[dict]) -> None:
        with slots:
            serve_one(i, export_dir, log_path, rows)

    def serve_one(i: int, export_dir: str, log_path: str, rows: List[dict]) -> None:
        try:
            server = ServingProcess(export_dir, log_path, "--status_secs=5", env=python_env(), start_timeout=300)
            try:
                code, body = server.post(json.dumps({"instances": rows}).encode())
            finally:
                server.stop()
            if code != 200:
                raise RuntimeError(f"predict answered {code}: {body}")
            answers[i] = body["predictions"]
        except Exception as e:  # pylint: disable=broad-except  (the caller reports it for this sample)
            answers[i] = e

    threads = [threading.Thread(target=one, args=(i, *job), daemon=True) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def check_outputs(predictions: List[dict], expected: Sequence[str], count: int) -> None:
    """Every expected output present in every prediction, a finite number (a probability in [0, 1])."""
    if len(predictions) != count:
        raise AssertionError(f"{len(predictions)} predictions for {count} rows")
    for name in expected:
        values = [p.get(name) for p in predictions]
        if any(v is None for v in values):
            raise AssertionError(f"output {name!r} missing (the predictions have {sorted(predictions[0])})")
        array = np.asarray(values, np.float64)
        if not np.all(np.isfinite(array)):
            raise AssertionError(f"output {name!r} is not finite: {values[:5]}")
        if name.startswith("probs") and not np.all((array >= 0) & (array <= 1)):
            raise AssertionError(f"output {name!r} is not a probability: {values[:5]}")


def replay_differences(server: str, updates_topic: str, trainer, model_dir: str) -> tuple:
    """(messages read, what differs between the trainer's model and the topic's updates replayed into a fresh
    replica: empty when equal bit for bit)."""
    reader = KafkaUpdateReader(server, updates_topic)
    try:
        records = reader.read_available()
    finally:
        reader.close()
    replica = replay(records, os.path.basename(model_dir.rstrip("/")))
    return len(records), differences_from_model(replica, trainer.model, read_parameter_ids(model_dir))


def _error(e: BaseException) -> str:
    return str(e) if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"


class SampleRun:
    """One config on its way through the steps: its result, and what the later steps need."""

    def __init__(self, path: str, work_dir: str):
        self.path = path
        self.name = os.path.basename(path).rsplit(".", 1)[0]
        self.result = SampleResult(self.name, family_of(path))
        self.work_dir = work_dir
        self.model_dir = os.path.join(work_dir, "model")
        self.export_dir = os.path.join(work_dir, "export")
        safe = re.sub(r"[^A-Za-z0-9_]", "_", self.name)[:80]
        self.topic, self.updates = safe, safe + "_updates"
        self.expected: List[str] = []
        self.rows: List[Dict[str, object]] = []
        self.generator: Optional[SampleGenerator] = None
        self.trainer = None
        self._started = time.time()

    @property
    def failed(self) -> bool:
        return bool(self.result.error)

    def passed(self, step: str) -> None:
        self.result.passed.append(step)
        self.result.seconds[step] = round(time.time() - self._started, 1)
        self._started = time.time()

    def fail(self, step: str, error: BaseException) -> None:
        self.result.error = f"{step}: {_error(error)}"

    def step(self, step: str, action) -> None:
        """Runs ``action()`` unless an earlier step failed; passed, or failed with its error."""
        if self.failed:
            return
        try:
            action()
        except Exception as e:  # pylint: disable=broad-except  (a sample's failure is its result)
            self.fail(step, e)
            return
        self.passed(step)


def _load_and_train(run: SampleRun, broker, samples: int, predict_rows: int, seed: int) -> None:
    os.makedirs(run.work_dir, exist_ok=True)
    config = None

    def load() -> None:
        nonlocal config
        config = load_sample(run.path, broker.bootstrap, run.topic, run.model_dir, run.updates)
        run.result.model_class = config.model_config.model_class
        run.expected = expected_outputs(config)

    def train() -> None:
        run.generator = SampleGenerator(config, seed)
        run.rows = run.generator.samples(samples + predict_rows)
        broker.create_topic(run.topic, 2)
        produce(broker.bootstrap, run.topic, [[run.generator.line(r) for r in run.rows[:samples]]], partitions=2)
        run.trainer = build_trainer(config, online=False)
        run.result.samples = run.trainer.run().samples
        if run.result.samples != samples:
            raise AssertionError(f"trained {run.result.samples} of the {samples} samples produced")

    run.step("loaded", load)
    run.step("trained", train)


def run_samples(paths: Sequence[str], broker, work_dir: str, samples: int = 3000, predict_rows: int = 8,
                seed: int = 5) -> List[SampleResult]:
    """Every config through every step (the module's docstring); a config's first error stops it, not the
    others. Trains one config after another in this process, exports them all in one child process, serves
    them a few at a time, one server each."""
    runs = [SampleRun(p, os.path.join(work_dir, f"run{i}")) for i, p in enumerate(paths)]
    for run in runs:
        _load_and_train(run, broker, samples, predict_rows, seed)
    trained = [r for r in runs if not r.failed]
    versions = export_models([r.model_dir for r in trained], [r.export_dir for r in trained]) if trained else []
    for run, version in zip(trained, versions):
        run.step("exported", lambda v=version: _raise_if_error(v))
    exported = [r for r in runs if not r.failed]
    answers = serve_and_predict([(r.export_dir, os.path.join(r.work_dir, "serve.log"),
                                  [r.generator.instance(row) for row in r.rows[samples:]]) for r in exported])
    for run, answer in zip(exported, answers):
        run.step("served", lambda r=run, a=answer: _check_served(r, a, predict_rows))
    for run in runs:
        run.step("replay_equal", lambda r=run: _check_replay(r, broker))
        run.trainer = None
    return [r.result for r in runs]


def _raise_if_error(version: str) -> None:
    if version.startswith("error: "):
        raise RuntimeError(version[len("error: "):])


def _check_served(run: SampleRun, answer: object, count: int) -> None:
    if isinstance(answer, BaseException):
        raise answer
    check_outputs(answer, run.expected, count)  # type: ignore[arg-type]
    run.result.outputs = sorted(answer[0])  # type: ignore[index]


def _check_replay(run: SampleRun, broker) -> None:
    run.result.published, differences = replay_differences(broker.bootstrap, run.updates, run.trainer, run.model_dir)
    if not run.result.published:
        raise AssertionError("nothing was published")
    if differences:
        raise AssertionError(f"the replayed updates differ from the trained model: {differences[:5]}")


def table(results: Sequence[SampleResult]) -> str:
    """A markdown table: each sample, its model, the steps passed, the first error."""
    lines = ["| sample | model | " + " | ".join(STEPS) + " | first error |", "|---" * (len(STEPS) + 3) + "|"]
    for r in results:
        marks = " | ".join("yes" if s in r.passed else "-" for s in STEPS)
        lines.append(f"| {r.name} | {r.model_class or '?'} | {marks} | {r.error.replace('|', '/')[:300]} |")
    return "\n".join(lines)


def families_passing(results: Sequence[SampleResult]) -> Dict[str, int]:
    """Per family run, how many of its samples passed every step."""
    return {f: sum(r.ok for r in results if r.family == f) for f in FAMILIES if any(r.family == f for r in results)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="", help="a directory of EasyRec configs (default: from --mirror)")
    parser.add_argument("--mirror", default="", help="EasyRec's git directory (bare or not) to take the samples from")
    parser.add_argument("--samples", type=int, default=3000, help="samples generated and trained per config")
    parser.add_argument("--only", default="", help="a regular expression the config names must match")
    parser.add_argument("--json", default="", help="also write the results as JSON to this file")
    parser.add_argument("--export", nargs="*", default=None, help=argparse.SUPPRESS)  # export_models' child
    args = parser.parse_args(argv)
    if args.export is not None:
        _export_each(args.export)
        return 0
    setup_logging()
    with tempfile.TemporaryDirectory(prefix="easyrec_samples_") as tmp:
        if args.configs:
            paths = sorted(os.path.join(args.configs, n) for n in os.listdir(args.configs) if n.endswith(".config"))
        elif args.mirror:
            os.makedirs(os.path.join(tmp, "configs"))
            paths = extract_configs(args.mirror, os.path.join(tmp, "configs"))
        else:
            parser.error("give --configs DIR or --mirror EASYREC_GIT_DIR")
        paths = [p for p in paths if re.search(args.only, os.path.basename(p))]
        with LocalBroker(log_path=os.path.join(tmp, "broker.log")) as broker:
            results = run_samples(paths, broker, os.path.join(tmp, "runs"), args.samples)
    report = {"results": [dataclasses.asdict(r) | {"ok": r.ok} for r in results],
              "families_passing": families_passing(results)}
    print(table(results))
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    missing = [f for f, n in report["families_passing"].items() if n == 0]
    if missing:
        print(f"FAIL: no sample of {', '.join(missing)} passed every step")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
