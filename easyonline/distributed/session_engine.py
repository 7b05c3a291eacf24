"""SessionEngine: a cluster trainer's steps, one session.run of its own graph against the ps (a ``StepEngine``).

The graph (train_graph.py) holds the model, its optimizer and the shared
state (shared_state.py); the parameters and that state live on the ps. The
engine joins the cluster (the chief initialises or restores the model, the
others wait for it), runs each step, counts steps and samples on the ps,
makes the trainers start together and, offline, makes the chief wait for
every trainer before its final checkpoint; only the chief writes model_dir.
distributed/cluster_trainer.py tells the whole story.
"""
import logging
import time
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from easyonline.checkpoint.checkpointer import Checkpointer
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.core.errors import ClusterFailure
from easyonline.distributed.checkpoint_io import SessionIO
from easyonline.distributed.cluster_config import ClusterConfig
from easyonline.distributed.save_pause import SavePause
from easyonline.distributed.server import start_server
from easyonline.distributed.session_tables import SessionTableOps, SessionTableRows
from easyonline.distributed.shared_state import ClusterMetrics, positions_array, positions_dict
from easyonline.distributed.train_graph import TrainGraph
from easyonline.embedding.change_tracker import ChangeTracker, PulledChangeTracker
from easyonline.embedding.dynamic_tables import STATS_EPOCH
from easyonline.inputs.build_source import build_source
from easyonline.inputs.raw_batch import BatchSource
from easyonline.inputs.start_position import usable_checkpoint_positions
from easyonline.train.step_engine import LoopState
from easyonline.train.task_figures import TaskFigures
from easyonline.utils import fileio
from easyonline.utils.net import wait_for_port

tf = ensure_legacy_keras()
log = logging.getLogger(__name__)
_WAIT_LOG_SECS = 10.0
START_TOGETHER_SECS = 120.0


def wait_for_tasks(cluster: ClusterConfig, roles: Sequence[str] = ("ps",), timeout_secs: float = 120.0) -> None:
    """Waits until the tasks of ``roles`` accept connections; raises ClusterFailure naming those that do not."""
    deadline = time.time() + timeout_secs
    missing = []
    for role in roles:
        for i, address in enumerate(cluster.cluster[role]):
            host, port = address.rsplit(":", 1)
            if not wait_for_port(host, int(port), max(deadline - time.time(), 0.5)):
                missing.append(f"{role} {i} at {address}")
    if missing:
        raise ClusterFailure(f"cluster task(s) not reachable after {timeout_secs:.0f}s: {', '.join(missing)}")


def _is_lost_task(error: Exception) -> bool:
    return isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
                              tf.errors.DeadlineExceededError))


class SessionEngine:
    """The steps of one trainer (the chief or a worker) of ``cluster``, in its graph and session."""

    can_checkpoint = True  # False once the parameters are lost (a parameter server died)

    def __init__(self, loop: LoopState, cluster: ClusterConfig):
        self._loop = loop
        config = self.config = loop.config
        self.specs = loop.specs
        self.cluster = cluster
        self.trainer_index = cluster.trainer_index
        self.name = "chief" if cluster.is_chief else f"worker {cluster.task_index}"
        self.writes_model_dir = cluster.is_chief  # the workers write only their status files
        self.trainers = cluster.num_trainers
        train = config.train_config
        self.graph = TrainGraph(config, self.specs, cluster)
        self.model = self.graph.model
        self.task = self.model.tasks.primary
        self.optimizer = self.graph.optimizer
        self.state = self.graph.state
        fileio.makedirs(config.model_dir)
        self.server = start_server(cluster, train)
        wait_for_tasks(cluster)
        session_config = tf.compat.v1.ConfigProto(
            device_filters=["/job:ps", cluster.device], intra_op_parallelism_threads=train.intra_op_threads,
            inter_op_parallelism_threads=train.inter_op_threads)
        self.session = tf.compat.v1.Session(self.server.target, graph=self.graph.graph, config=session_config)
        self.graph.positions.bind(self._session_run)
        # the one checkpointer, over the graph's variables through this session; files on this task, never a ps
        self.checkpointer = Checkpointer(
            config.model_dir, self.model, self.optimizer, train.keep_checkpoint_max, step=self.state.global_step,
            samples=self.state.samples, positions=self.graph.positions,
            io=SessionIO(self.graph.graph, self.session, self._session_run, cluster), pull=False)
        self._start_samples: Optional[int] = None
        self.pause = SavePause(self._session_run, self.state, self.graph.begin_step, self.trainer_index,
                               cluster.num_trainers, loop.stop_signal.should_stop)
        self.restored_from = self._join()
        self.metrics = self.cluster_metrics = ClusterMetrics(self._session_run, self.state, train.metrics_window_samples)
        # every trainer records its trained keys on the ps; the chief's publishers drain them there
        self.changes = PulledChangeTracker(lambda: self._session_run(self.graph.drain_changed_keys)) \
            if self.graph.publishes and cluster.is_chief else ChangeTracker(self.specs)
        shared = self._session_run(self.state.reads)
        self.step, self._samples = int(shared["step"]), int(shared["samples"])
        self._cluster_lag: Optional[int] = None
        log.info("%s: trainer %d of %d, with %d ps; reads partitions p with p %% %d == %d", self.name,
                 self.trainer_index, cluster.num_trainers, cluster.num_ps, cluster.num_trainers, self.trainer_index)

    # --- the session ----------------------------------------------------------------
    def _session_run(self, fetches, feed_dict=None):
        """session.run; an error that means a lost ps becomes ClusterFailure (exit code 5)."""
        try:
            return self.session.run(fetches, feed_dict)
        except Exception as e:  # pylint: disable=broad-except
            if not _is_lost_task(e):
                raise
            raise self._lost(e) from None

    def _lost(self, error: Exception) -> ClusterFailure:
        self.can_checkpoint = False
        first = str(error).strip().split("\n")[0][:300]
        return ClusterFailure(f"lost a parameter server ({type(error).__name__}: {first}); the parameters since "
                              f"the last checkpoint are gone: restart the cluster to resume from "
                              f"{self._loop.last_checkpoint or self.checkpointer.manager.latest_checkpoint or 'the start'}")

    def _join(self) -> Optional[str]:
        """The chief makes the ps ready (init or restore); the others wait until it has. Returns the restore."""
        self._session_run(self.graph.local_init)
        if not self.cluster.is_chief:
            self._wait_until_ready()
            return None
        if self._ps_ready():
            log.info("the ps hold a ready model (the chief restarted alone): continuing with it")
            self.pause.lower()
            return None
        self._session_run(self.graph.global_init)
        path = self._restore()
        self._start_samples = int(self._session_run(self.state.samples))  # before any trainer can step
        self._session_run(self.state.set_ready)
        return path

    def _ps_ready(self) -> bool:
        """Every variable on the ps initialised and the chief's ready flag up."""
        return not len(self._session_run(self.graph.uninitialized)) and bool(self._session_run(self.state.ready))

    def _wait_until_ready(self, timeout_secs: float = 600.0) -> None:
        started = last_log = time.time()
        while True:
            if self._ps_ready():
                return
            if time.time() - last_log >= _WAIT_LOG_SECS:
                log.info("%s: waiting for the chief to initialise or restore the model (%.0fs)", self.name,
                         time.time() - started)
                last_log = time.time()
            if time.time() - started > timeout_secs:
                raise ClusterFailure(f"the chief did not make the model ready within {timeout_secs:.0f}s")
            time.sleep(0.5)

    def _restore(self) -> Optional[str]:
        """Restores the latest checkpoint (or the fine-tune one) into the ps; returns its path."""
        checkpointer = self.checkpointer
        checkpointer.pull()
        started = time.time()
        path = checkpointer.restore_latest()
        if path is not None:
            positions = checkpointer.positions
            if self.config.HasField("kafka_train_input"):  # (the trainers check the partitions themselves)
                positions = usable_checkpoint_positions(positions, checkpointer.positions_topic,
                                                        self.config.kafka_train_input) or {}
            self._session_run(self.state.set_positions, {self.state.all_positions_in: positions_array(positions)})
            log.info("restored %s into the ps (step %d, positions %s) in %.2fs", path, checkpointer.last_saved_step,
                     positions, time.time() - started)
            checkpointer.note_fine_tune_ignored(self.config.train_config.fine_tune_checkpoint, path)
            return path
        if self.config.train_config.fine_tune_checkpoint:
            return checkpointer.init_from(self.config.train_config.fine_tune_checkpoint)
        return None

    # --- input and status ----------------------------------------------------------
    def make_source(self) -> BatchSource:
        """This trainer's share of the partitions, from the shared positions (else the config's start)."""
        positions = positions_dict(self._session_run(self.state.positions))
        source = build_source(self.config, self.specs, positions,
                              partition_share=(self.trainer_index, self.cluster.num_trainers))
        log.info("%s trains partitions %s", self.name, source.partition_numbers())
        self._start_together()
        return source

    def _start_together(self, timeout_secs: float = START_TOGETHER_SECS) -> None:
        """Waits until every trainer has built its input (once per cluster start), then the steps begin."""
        self._session_run(self.state.mark_started, {self.state.trainer_in: self.trainer_index})
        started = last_log = time.time()
        while not self._loop.stop_signal.should_stop():
            waiting = [i for i, done in enumerate(self._session_run(self.state.started)) if not done]
            if not waiting:
                if time.time() - started > 1.0:
                    log.info("%s: every trainer has joined (waited %.1fs)", self.name, time.time() - started)
                return
            if time.time() - started > timeout_secs:
                log.warning("%s: trainer(s) %s did not join within %.0fs: training without them", self.name,
                            waiting, timeout_secs)
                return
            if time.time() - last_log >= _WAIT_LOG_SECS:
                log.info("%s: waiting for trainer(s) %s to join (%.0fs)", self.name, waiting, time.time() - started)
                last_log = time.time()
            time.sleep(0.2)

    def samples_at_start(self) -> int:
        """The chief counts from the moment it made the model ready, before any trainer could step."""
        return self._start_samples if self._start_samples is not None else self._samples

    def samples_trained(self) -> int:
        """Samples trained by the whole cluster (as of this trainer's last step or status line)."""
        return self._samples

    def status_dir(self) -> str:
        return fileio.join(self.checkpointer.local_dir, "train" if self.cluster.is_chief else f"train_worker{self.cluster.task_index}")

    def refresh(self) -> None:
        """Reads the cluster's step, samples, lag and metrics from the ps."""
        shared = self._session_run(self.state.reads)
        self.step, self._samples = max(self.step, int(shared["step"])), max(self._samples, int(shared["samples"]))
        self._cluster_lag = int(shared["lags"].sum())
        self.cluster_metrics.refresh()

    def status_lag(self, lag: Optional[int]) -> Optional[int]:
        return self._cluster_lag

    # --- the step -------------------------------------------------------------------
    def task_figures(self) -> TaskFigures:
        """Every task's figures over the whole cluster's batches (the shared sums on the ps)."""
        return self.cluster_metrics.task_figures()

    def train_and_count(self, raw, parsed) -> np.ndarray:
        """One session.run: score, train, and add to the shared positions, counters and metrics."""
        labels = parsed.labels_by_name(self.specs.label_names[0])
        feed = self.graph.feed(parsed.host_features(), {name: labels[name] for name in self.graph.label_names},
                               self._loop.clock() - STATS_EPOCH, raw.positions, raw.lag or 0, parsed.sample_weights)
        if not self.cluster.is_chief:
            self.pause.before_step()
        out = self._session_run(self.graph.train_op, feed)
        if not self.cluster.is_chief:
            self.pause.after_step(int(out["pause"]))
        self.step, self._samples = int(out["step"]), int(out["samples"])
        self.cluster_metrics.after_step(self._samples)
        return out["probabilities"]

    def count(self, samples: int) -> None:
        """Steps and samples are counted on the ps, by the trained batches only."""

    # --- the tables ------------------------------------------------------------------
    def table_sizes(self) -> Dict[str, int]:
        return {name: int(size) for name, size in self._session_run(self.graph.table_sizes).items()}

    def table_rows(self) -> SessionTableRows:
        return SessionTableRows(self._session_run, self.graph.table_access)

    def table_ops(self) -> SessionTableOps:
        return SessionTableOps(self._session_run, self.graph.table_access)

    def bounded_sizes(self, tables: Sequence[str]) -> Dict[str, Tuple[int, int]]:
        """Every table's two sizes in one session run (one round trip per ps)."""
        sizes = self._session_run({table: self.graph.table_access.sizes[table] for table in tables})
        return {table: (int(rows), int(stats)) for table, (rows, stats) in sizes.items()}

    def read_variables(self, variables: Dict) -> Dict:
        return self._session_run(dict(variables))

    def read_step(self) -> int:
        """The cluster's step on the ps now: the other trainers stepped since this one's last step."""
        step = int(self._session_run(self.state.global_step))
        self.step = max(self.step, step)
        return step

    # --- checkpoints --------------------------------------------------------------------
    @property
    def last_saved_step(self) -> int:
        return self.checkpointer.last_saved_step if self.cluster.is_chief else self.step

    def save(self, positions: Dict[int, int], topic: str, topic_id: str = "") -> Tuple[str, Dict[int, int]]:
        """The chief: the shared positions first, then the parameters (they hold at least every update up to
        them); ``positions`` (this trainer's own) are not the cluster's."""
        started = time.time()
        try:
            with self.pause.others_paused():  # a row another trainer inserts could move rows out of the save
                positions = positions_dict(self._session_run(self.state.positions))
                rows = sum(self.table_sizes().values())
                path = self.checkpointer.save(positions, topic, topic_id)
        except Exception as e:  # pylint: disable=broad-except
            if _is_lost_task(e):
                raise self._lost(e) from None
            raise
        log.info("saved checkpoint %s (positions %s, %d rows; the other trainers held still %.2fs first) in %.2fs",
                 path, positions, rows, self.pause.last_wait_secs, time.time() - started)
        return path, positions

    def before_final_checkpoint(self, stop_reason: str) -> Optional[Dict[int, int]]:
        """Offline, marks this trainer finished, and the chief waits for the others. Returns the chief's final
        positions, the shared ones."""
        if not self.can_checkpoint:
            return None
        caught_up = not self._loop.online and ("caught up" in stop_reason or stop_reason == "input ended")
        if caught_up:
            self._session_run(self.state.mark_finished, {self.state.trainer_in: self.trainer_index})
        if self.cluster.is_chief and caught_up:
            self._wait_for_trainers()
        positions = positions_dict(self._session_run(self.state.positions)) if self.cluster.is_chief else None
        self.refresh()
        return positions

    def _wait_for_trainers(self) -> None:
        """Offline: the chief's final checkpoint waits until every trainer has caught up (or a stop)."""
        started = last_log = time.time()
        while not self._loop.stop_signal.should_stop():
            finished = self._session_run(self.state.finished)
            if finished.all():
                log.info("every trainer has caught up (waited %.1fs)", time.time() - started)
                return
            if time.time() - last_log >= _WAIT_LOG_SECS:
                waiting = [i for i, done in enumerate(finished) if not done]
                log.info("waiting for trainer(s) %s to catch up before the final checkpoint (%.0fs)", waiting,
                         time.time() - started)
                last_log = time.time()
            time.sleep(0.3)
