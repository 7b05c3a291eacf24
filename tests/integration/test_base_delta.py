"""Base and delta inference models: the chain rebuilds the trainer exactly; torn saves are ignored."""
import json

import pytest

import easyonline
from easyonline.publish.base_delta import BASE, DELTA, DONE, MANIFEST, list_complete_saves, load_inference_model
from easyonline.updates.model_diff import differences_from_model
from easyonline.core.callbacks import Callback
from easyonline.jobs.online_train import build_trainer
from easyonline.tools.stream_producer import SyntheticCtrStream
from tests.integration.test_incremental_updates import ShrinkEvery, _file_config, _with_eviction

SAVES = {"train_config.inference_save_config": {"delta_save_steps": 3, "delta_save_secs": 0, "base_save_at_hour": -1}}


def _trainer(tmp_path, samples, start=0, callbacks=()):
    # ids from 3,000 per column: the 1,500 samples between two saves touch fewer rows than the tables hold, so
    # "a delta holds only the changed rows" is a visible difference (from 500 nearly every row is touched)
    config = _file_config(tmp_path, samples, start=start, stream=SyntheticCtrStream(base_vocab=3000), **SAVES)
    _with_eviction(config)
    return build_trainer(config, online=False, callbacks=[ShrinkEvery(4), *callbacks])


class TableSizes(Callback):
    """The tables' total rows at the end of each step, by step."""

    def __init__(self):
        self.by_step = {}

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.by_step[trainer.step] = sum(trainer.table_sizes().values())


def test_base_and_deltas_rebuild_the_trained_parameters_exactly(tmp_path):
    sizes = TableSizes()
    trainer = _trainer(tmp_path, 6000, callbacks=[sizes])
    trainer.run()  # 12 steps: a base at step 3, deltas at 6, 9, 12
    saves = list_complete_saves(str(tmp_path / "model" / "inference"))
    assert [(s.kind, s.step) for s in saves] == [(BASE, 3), (DELTA, 6), (DELTA, 9), (DELTA, 12)]
    replica, chain, ids = load_inference_model(str(tmp_path / "model" / "inference"))
    assert [s.name for s in chain] == [s.name for s in saves]
    assert differences_from_model(replica, trainer.model, ids) == []
    deltas = [s.manifest for s in saves[1:]]
    assert sum(d["deletes"] for d in deltas) > 0  # evictions travel as deletes
    # only the changed rows: fewer than the tables held when the delta was saved (no shrink at steps 6 and 9)
    assert all(d["rows"] < sizes.by_step[s.step] for s, d in zip(saves[1:], deltas) if s.step in (6, 9)), \
        ([d["rows"] for d in deltas], sizes.by_step)
    assert deltas[-1]["rows"] < sum(trainer.table_sizes().values())
    assert (tmp_path / "model" / "inference" / saves[0].name / "embed_name_to_ids.txt").exists()  # a base has the ids
    assert not (tmp_path / "model" / "inference" / saves[1].name / "embed_name_to_ids.txt").exists()


def test_torn_saves_are_ignored_and_restarts_continue_or_rebase(tmp_path):
    save_dir = tmp_path / "model" / "inference"
    _trainer(tmp_path, 6000).run()
    # A torn delta: parts written, no DONE. The loader stops before it.
    last = list_complete_saves(str(save_dir))[-1]
    (save_dir / last.name / DONE).unlink()
    replica, chain, _ = load_inference_model(str(save_dir))
    assert chain[-1].step == 9 and replica.step == 9

    # Restart: the newest complete save (step 9) is not at the restored step (12): the next save is a base.
    restarted = _trainer(tmp_path, 3000, start=6000)
    assert restarted.step == 12
    restarted.run()
    saves = list_complete_saves(str(save_dir))
    after = [(s.kind, s.step) for s in saves if s.step > 12]
    assert after[0] == (BASE, 15) and after[-1] == (DELTA, 18)
    replica, chain, ids = load_inference_model(str(save_dir))
    assert chain[0].name == "base-000000000015"
    assert differences_from_model(replica, restarted.model, ids) == []

    # A clean stop left a save at the checkpoint's step: the next run continues the chain with deltas.
    class SaveBaseFromPython(Callback):
        def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
            if trainer.step == 20:
                self.path = easyonline.save_model(trainer, "delta")

    api = SaveBaseFromPython()
    third = _trainer(tmp_path, 3000, start=9000, callbacks=[api])
    third.run()
    saves = [s for s in list_complete_saves(str(save_dir)) if s.step > 18]
    assert [(s.kind, s.step) for s in saves] == [(DELTA, 20), (DELTA, 23), (DELTA, 24)]
    assert api.path.endswith("delta-000000000020")
    assert json.loads((save_dir / "delta-000000000020" / MANIFEST).read_text())["previous"] == "delta-000000000018"
    replica, chain, ids = load_inference_model(str(save_dir))
    assert differences_from_model(replica, third.model, ids) == []


def test_save_model_rejects_unknown_modes(tmp_path):
    trainer = build_trainer(_file_config(tmp_path, 10), online=False)
    with pytest.raises(ValueError, match="checkpoint, base or delta"):
        easyonline.save_model(trainer, "xbox")
