"""Base and delta inference models on files: Paddle's save modes, easyonline's update format.

A save is a directory ``<save_dir>/<kind>-<step>`` holding:
- the parameters as update messages (``part-00000.pb``...), in the same format
  as incremental updates, so one reader applies both;
- ``manifest.json``;
- ``DONE``, written last, so a reader never takes half a save.

A base holds every table row and dense parameter (no optimizer slots) and
copies of the id maps. A delta holds the dense parameters and only the rows
changed or deleted since the previous save. Its manifest names its base and
its predecessor. ``load_inference_model`` applies the newest complete base
and its unbroken chain of deltas, which reproduces the trained parameters
exactly.

After a restart, the first save is a base unless the newest save is at
the step the trainer restored: keys changed after that save were lost
with the crash, so a delta could not be exact.

A base is streamed like a full sync (publish/snapshot.py
``full_sync_pieces``): one table shard read at a time, each part file
written as soon as it is full (``part_bytes``, default 16 MB), so a base
needs the largest shard's rows plus about two parts of memory, not the
whole model three times over. Its parts have ``parts = 0`` and the last has
``full_sync_end``; the manifest counts them. Rows and dense parameters with
NaN or infinite values are not saved (publish/nonfinite.py); the manifest
counts them since the trainer started (``nonfinite_rows``, ``nonfinite_dense``).
"""
import dataclasses
import json
import logging
import re
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from easyonline.core.callbacks import Callback, TrainerView
from easyonline.core.daily_schedule import DailySchedule
from easyonline.core.step_time_schedule import StepTimeSchedule
from easyonline.embedding.change_tracker import ChangeLog
from easyonline.protos import pipeline_pb2
from easyonline.publish.nonfinite import NonFiniteGuard
from easyonline.publish.snapshot import TableRows, full_sync_pieces, take_snapshot
from easyonline.updates.codec import StreamHeader, decode_update, encode_stream, encode_update
from easyonline.updates.param_ids import ParameterIds, dense_variables, ensure_parameter_ids, read_parameter_ids
from easyonline.updates.replica import ParameterReplica
from easyonline.updates.transport import default_model_name
from easyonline.utils import fileio

log = logging.getLogger(__name__)
MANIFEST, DONE = "manifest.json", "DONE"
BASE, DELTA = "base", "delta"
PART_BYTES = 16 << 20  # a part file's size, when inference_save_config.part_bytes is not set
_SAVE = re.compile(r"^(base|delta)-(\d{12})$")


@dataclasses.dataclass
class SaveInfo:
    name: str
    kind: str
    step: int
    path: str
    manifest: dict


def save_name(kind: str, step: int) -> str:
    return f"{kind}-{step:012d}"


def list_complete_saves(save_dir: str) -> List[SaveInfo]:
    """Saves with a DONE file, oldest first (a base before a delta of the same step)."""
    saves = []
    for name in fileio.listdir(save_dir):
        match = _SAVE.match(name)
        path = fileio.join(save_dir, name)
        if not match or not fileio.exists(fileio.join(path, DONE)):
            continue
        manifest = json.loads(fileio.read_text(fileio.join(path, MANIFEST)))
        saves.append(SaveInfo(name, match.group(1), int(match.group(2)), path, manifest))
    return sorted(saves, key=lambda s: (s.step, s.kind != BASE))


def write_save(save_dir: str, kind: str, snapshot, ids: ParameterIds, model_name: str,
               base: Optional[str], previous: Optional[str], part_bytes: int = PART_BYTES,
               guard: Optional[NonFiniteGuard] = None) -> SaveInfo:
    """Writes one save of a snapshot (parts, manifest, DONE last); returns it. (Bases: ``write_base``.)"""
    messages = encode_update(snapshot, model_name, 1, snapshot.step, part_bytes,
                             {i: width for i, width in ids.tables.values()})
    return _write_parts(save_dir, kind, snapshot.step, snapshot.create_time, snapshot.positions, messages,
                        snapshot.counts(), ids, model_name, base, previous, guard)


def write_base(save_dir: str, tables: TableRows, ids: ParameterIds, step: int, create_time: float,
               positions: Dict[int, int], dense: Optional[dict], deleted: dict, model_name: str,
               guard: NonFiniteGuard, part_bytes: int = PART_BYTES) -> SaveInfo:
    """Writes a base, streamed (module docstring): every row and dense parameter, parts as they fill."""
    counts: Dict[str, int] = {}
    row_bytes = max([8 + 4 * width for _, width in ids.tables.values()] or [8])
    pieces = full_sync_pieces(tables, ids, dense, deleted, max(part_bytes // row_bytes, 1), guard, counts)
    head = StreamHeader(model_name, step, create_time, positions, step, True)
    return _write_parts(save_dir, BASE, step, create_time, positions, encode_stream(pieces, head, 1, part_bytes),
                        counts, ids, model_name, None, None, guard)


def _write_parts(save_dir: str, kind: str, step: int, create_time: float, positions: Dict[int, int],
                 messages: Iterable[bytes], counts: Dict[str, int], ids: ParameterIds, model_name: str,
                 base: Optional[str], previous: Optional[str], guard: Optional[NonFiniteGuard] = None) -> SaveInfo:
    """Writes each message as a part when it comes, then the id maps (bases), the manifest, and DONE last.
    ``guard``: counts what the save left out (the manifest's ``nonfinite_rows`` and ``nonfinite_dense``, counted
    since the guard's start when it already filtered ``messages``' source)."""
    name = save_name(kind, step)
    path = fileio.join(save_dir, name)
    fileio.remove_tree(path)  # a torn save of the same name from before a crash
    parts = size = 0
    for data in messages:
        fileio.write_bytes_atomic(fileio.join(path, f"part-{parts:05d}.pb"), data)
        parts, size = parts + 1, size + len(data)
        del data
    if kind == BASE:
        for file_name, text in ids.to_files().items():
            fileio.write_text_atomic(fileio.join(path, file_name), text)
    manifest = {"kind": kind, "name": name, "step": step, "create_time": create_time,
                "positions": {str(k): v for k, v in positions.items()}, "model_name": model_name,
                "base": base or name, "previous": previous, "parts": parts, "bytes": size,
                **{key: counts.get(key, 0) for key in ("dense", "rows", "deletes")}}
    if guard is not None:
        manifest["nonfinite_rows"] = sum(guard.rows.values())
        manifest["nonfinite_dense"] = sum(guard.dense.values())
    fileio.write_text_atomic(fileio.join(path, MANIFEST), json.dumps(manifest, indent=1) + "\n")
    fileio.write_text_atomic(fileio.join(path, DONE), "")
    return SaveInfo(name, kind, step, path, manifest)


def newest_chain(save_dir: str) -> List[SaveInfo]:
    """The newest complete base and the deltas that follow it without a break."""
    saves = list_complete_saves(save_dir)
    bases = [s for s in saves if s.kind == BASE]
    if not bases:
        return []
    chain = [bases[-1]]
    for save in saves:
        if save.kind == DELTA and save.manifest["base"] == chain[0].name and save.step >= chain[-1].step:
            if save.manifest["previous"] != chain[-1].name:
                break  # a delta is missing or torn: later ones cannot be applied exactly
            chain.append(save)
    return chain


def load_inference_model(save_dir: str) -> Tuple[ParameterReplica, List[SaveInfo], ParameterIds]:
    """Applies the newest base and its deltas in order; returns the parameters, the saves used, the ids."""
    chain = newest_chain(save_dir)
    if not chain:
        raise FileNotFoundError(f"no complete base model in {save_dir}")
    replica = ParameterReplica()
    for save in chain:
        replica.next_sequence = 1  # each save numbers its parts from 1
        for index in range(save.manifest["parts"]):
            replica.apply(decode_update(fileio.read_bytes(fileio.join(save.path, f"part-{index:05d}.pb"))))
    return replica, chain, read_parameter_ids(chain[0].path)


def remove_old_saves(save_dir: str, keep_bases: int) -> None:
    """Keeps the newest ``keep_bases`` bases and their deltas; deletes the rest (torn saves too)."""
    complete = list_complete_saves(save_dir)
    bases = [s.name for s in complete if s.kind == BASE][-keep_bases:]
    if not bases:
        return
    keep = set(bases) | {s.name for s in complete if s.kind == DELTA and s.manifest["base"] in bases}
    oldest_kept = min(s.step for s in complete if s.name in keep)
    for name in fileio.listdir(save_dir):
        match = _SAVE.match(name)
        if match and name not in keep and (int(match.group(2)) < oldest_kept or
                                           any(s.name == name for s in complete)):
            fileio.remove_tree(fileio.join(save_dir, name))


class InferenceSaves(Callback):
    """Writes bases and deltas on the schedule of ``train_config.inference_save_config``.

    ``save_base(trainer)`` and ``save_delta(trainer)`` may also be called directly
    (``easyonline.save_model(trainer, "base")``). Saves run on the training
    thread: a base of a large table takes seconds, so schedule bases rarely.
    """

    def __init__(self, config: pipeline_pb2.InferenceSaveConfig, model_dir: str, model_name: str = ""):
        self.config = config
        self.model_dir = model_dir
        self.save_dir = config.save_dir or fileio.join(model_dir, "inference")
        self.model_name = model_name or default_model_name(model_dir)
        self._base_schedule = DailySchedule(config.base_save_secs, config.base_save_at_hour)
        self._delta_schedule = StepTimeSchedule(config.delta_save_steps, config.delta_save_secs)
        self._tracker: Optional[ChangeLog] = None
        self._ids: Optional[ParameterIds] = None
        self._base: Optional[str] = None
        self._previous: Optional[SaveInfo] = None
        self.saves: List[SaveInfo] = []
        self.guard = NonFiniteGuard("saved")
        self.part_bytes = config.part_bytes or PART_BYTES

    def _prepare(self, trainer: TrainerView) -> None:
        if self._tracker is not None:
            return
        self._ids = ensure_parameter_ids(self.model_dir, trainer.model)
        self._tracker = trainer.changes.subscribe()
        chain = newest_chain(self.save_dir)
        if chain and chain[-1].step == trainer.step:
            self._base, self._previous = chain[0].name, chain[-1]
        elif chain:
            log.info("newest save %s is at step %d, the model at step %d: the next save is a base",
                     chain[-1].name, chain[-1].step, trainer.step)

    def on_train_begin(self, trainer: TrainerView) -> None:
        self._prepare(trainer)
        self._delta_schedule.mark(trainer.step)

    def on_tick(self, trainer: TrainerView) -> None:
        if self._base_schedule.due(trainer.clock()):
            self.save_base(trainer)
        elif (self.config.delta_save_steps or self.config.delta_save_secs) and self._delta_schedule.due(trainer.step):
            self.save_delta(trainer)

    def on_train_end(self, trainer: TrainerView, summary: Any) -> None:
        """The files then match the final checkpoint, so a restart can continue the chain."""
        if self._previous is None or self._previous.step != trainer.step:
            self.save_delta(trainer)

    def _save(self, trainer: TrainerView, kind: str) -> SaveInfo:
        self._prepare(trainer)
        started = time.time()
        ids, tracker = self._ids, self._tracker
        if ids is None or tracker is None:
            raise RuntimeError("InferenceSaves: not prepared")
        trained, deleted = tracker.drain()
        dense = {ids.dense[name]: value for name, value in
                 trainer.read_variables(dense_variables(trainer.model)).items()}
        if kind == BASE:
            info = write_base(self.save_dir, trainer.table_rows(), ids, trainer.step, time.time(),
                              dict(trainer.positions), dense, deleted, self.model_name, self.guard, self.part_bytes)
        else:
            if self._previous is None:
                raise RuntimeError("InferenceSaves: a delta needs a base before it")
            snapshot = take_snapshot(trainer.table_rows(), ids, trainer.step, time.time(),
                                     dict(trainer.positions), dense, trained, deleted, guard=self.guard)
            info = write_save(self.save_dir, kind, snapshot, ids, self.model_name, self._base,
                              self._previous.name, self.part_bytes, self.guard)
        self.guard.maybe_log()
        if kind == BASE:
            self._base = info.name
            remove_old_saves(self.save_dir, self.config.keep_bases)
        self._previous = info
        self._delta_schedule.mark(trainer.step)
        self.saves.append(info)
        log.info("saved %s (%d rows, %d deletes, %d bytes) in %.1f s", info.path, info.manifest["rows"],
                 info.manifest["deletes"], info.manifest["bytes"], time.time() - started)
        return info

    def save_base(self, trainer: TrainerView) -> SaveInfo:
        return self._save(trainer, BASE)

    def save_delta(self, trainer: TrainerView) -> SaveInfo:
        """A delta, or a base when there is no base to build on in this run."""
        self._prepare(trainer)
        return self._save(trainer, DELTA if self._previous is not None else BASE)
