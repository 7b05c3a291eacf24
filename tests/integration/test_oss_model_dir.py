"""An oss:// model_dir: checkpoints mirrored to OSS, restarts restore from OSS, the stop file polled there,
export from it. Against tests/fake_oss.py (real HTTP through oss2): no real OSS is reachable here."""
import os
import shutil

import numpy as np
import pytest

from easyonline.core.callbacks import Callback
from easyonline.checkpoint.checkpointer import latest_checkpoint
from easyonline.checkpoint.mirror import cache_dir_for
from easyonline.core.stop_signal import STOP_SIGNAL_FILE
from easyonline.jobs.online_train import build_trainer
from easyonline.tools.stream_producer import SyntheticCtrStream
from easyonline.utils import fileio, oss
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, online_config, python_env
from tests.fake_oss import FakeOss, configured_fake_oss

MODEL_DIR = "oss://bkt/models/online"


@pytest.fixture
def fake_oss(tmp_path, monkeypatch):
    monkeypatch.setenv("EASYONLINE_CACHE_DIR", str(tmp_path / "cache"))
    with configured_fake_oss() as fake:
        yield fake


def _config(tmp_path, start, count, model_dir=MODEL_DIR, **edits):
    data = tmp_path / f"data_{start}.csv"
    data.write_bytes(b"\n".join(SyntheticCtrStream().lines(start, count)) + b"\n")
    config = online_config(model_dir, **{"data_config.batch_size": 250, "train_config.save_checkpoints_steps": 3,
                                         "train_config.save_checkpoints_secs": 0, "train_config.keep_checkpoint_max": 2,
                                         **edits})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(data))
    return config


def _rows(trainer, table="C1"):
    keys, values = (t.numpy() for t in trainer.model.tables.rows(table).export())
    order = np.argsort(keys)
    return keys[order], values[order]


def test_checkpoints_live_on_oss_and_a_restart_restores_them(fake_oss, tmp_path):
    first = build_trainer(_config(tmp_path, 0, 3000), online=False)
    summary = first.run()
    assert summary.checkpoint == f"{MODEL_DIR}/model.ckpt-{summary.steps}"
    names = fileio.listdir(MODEL_DIR)
    assert "checkpoint" in names and "pipeline.config" in names and f"model.ckpt-{summary.steps}.index" in names
    kept = {n.split(".")[1] for n in names if n.startswith("model.ckpt")}
    assert len(kept) == 2  # keep_checkpoint_max applies on OSS too
    shutil.rmtree(cache_dir_for(MODEL_DIR))  # a new machine: nothing local
    second = build_trainer(_config(tmp_path, 0, 3000), online=False)
    assert second.restored_from == summary.checkpoint and second.step == summary.steps
    for got, want in zip(_rows(second), _rows(first)):
        np.testing.assert_array_equal(got, want)
    assert second.checkpointer.positions == summary.positions
    # training on after the restart keeps the checkpoints OSS had before it in the history
    earlier = sorted((name.rsplit("-", 1)[1] for name in kept), key=int)
    assert earlier[-1] == str(summary.steps)
    third = build_trainer(_config(tmp_path, 3000, 750, **{"train_config.keep_checkpoint_max": 3}), online=False)
    latest = third.run().steps
    state = fileio.read_text(f"{MODEL_DIR}/checkpoint")
    assert state.count("all_model_checkpoint_paths") == 3, state
    for step in (*earlier, latest):
        assert f'all_model_checkpoint_paths: "model.ckpt-{step}"' in state, state
        assert fileio.exists(f"{MODEL_DIR}/model.ckpt-{step}.index")


@pytest.mark.parametrize("where", ["oss", "local"])
def test_a_save_killed_before_its_merge_does_not_block_or_stay(fake_oss, tmp_path, where):
    """A chief killed during a sharded save leaves ``model.ckpt-N_temp/`` (the ps shards' folder): in its cache
    of an oss:// model_dir, the restart raised IsADirectoryError at every start until someone deleted it by
    hand; in a local model_dir nothing ever removed it. The next trainer holding the writer lock does."""
    model_dir = MODEL_DIR if where == "oss" else str(tmp_path / "model")
    first = build_trainer(_config(tmp_path, 0, 1500, model_dir), online=False)
    summary = first.run()
    folder = cache_dir_for(MODEL_DIR) if where == "oss" else model_dir
    interrupted = os.path.join(folder, f"model.ckpt-{summary.steps + 3}_temp")
    os.makedirs(interrupted)
    with open(os.path.join(interrupted, "part-00000-of-00002.data-00000-of-00001"), "wb") as f:
        f.write(b"\0" * 1000)
    second = build_trainer(_config(tmp_path, 1500, 250, model_dir), online=False)
    assert second.restored_from.endswith(f"model.ckpt-{summary.steps}") and second.step == summary.steps
    assert second.run().samples == 250  # trained on from the checkpoint
    assert not os.path.exists(interrupted)


def test_readers_export_and_a_restart_use_what_reached_oss_not_the_trainers_cache(fake_oss, tmp_path):
    """Readers fetch into a cache of their own; a save in the trainer's cache that never reached OSS (killed
    before the push) is used neither by them nor by the next trainer; the export command reads the model_dir."""
    trainer = build_trainer(_config(tmp_path, 0, 1500), online=False)
    summary = trainer.run()
    trainer_cache = cache_dir_for(MODEL_DIR)
    before = sorted(os.listdir(trainer_cache))
    trainer.checkpointer.manager.save(checkpoint_number=999)  # in the cache only: about to be pushed, or killed
    pending = sorted(os.listdir(trainer_cache))
    assert pending != before
    fetched = latest_checkpoint(MODEL_DIR)  # as export, predict and eval --once do
    assert fetched.endswith(f"model.ckpt-{summary.steps}") and not fetched.startswith(trainer_cache + os.sep)
    assert os.path.exists(fetched + ".index")
    assert sorted(os.listdir(trainer_cache)) == pending  # nothing of the trainer's removed or replaced
    again = build_trainer(_config(tmp_path, 0, 1500), online=False)  # a restart on the trainer's machine
    assert again.restored_from == summary.checkpoint and again.step == summary.steps
    env = dict(python_env(), OSS_ENDPOINT=fake_oss.endpoint, OSS_ACCESS_KEY_ID="id", OSS_ACCESS_KEY_SECRET="secret",
               EASYONLINE_CACHE_DIR=str(tmp_path / "export-cache"))
    proc = preloaded_python.run([PYTHON, "-m", "easyonline.export", f"--config={MODEL_DIR}/pipeline.config",
                           f"--export_dir={tmp_path / 'export'}"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "export").exists() and len(list((tmp_path / "export").iterdir())) == 1


def test_the_stop_file_on_oss_stops_training(fake_oss, tmp_path):
    class StopAfter(Callback):
        def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
            if trainer.step == 4:
                fileio.write_text_atomic(fileio.join(MODEL_DIR, STOP_SIGNAL_FILE), "")

    config = _config(tmp_path, 0, 20000, **{"train_config.enable_oss_stop_signal": True,
                                            "train_config.stop_signal_poll_secs": 0.1})
    summary = build_trainer(config, online=False, callbacks=[StopAfter()]).run()
    assert "stop signal" in summary.stop_reason and summary.steps < 80
    assert fileio.exists(f"{MODEL_DIR}/model.ckpt-{summary.steps}.index")  # the final checkpoint reached OSS


def test_oss_credentials_from_the_config_by_environment_reference_and_never_saved(tmp_path, monkeypatch):
    monkeypatch.setenv("EASYONLINE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TEST_OSS_SECRET", "s3cr3t-from-env")
    with FakeOss() as fake:
        oss.configure("", "", "")
        config = _config(tmp_path, 0, 500)
        config.oss_config.endpoint = fake.endpoint
        config.oss_config.access_key_id = "plain-key-id"
        config.oss_config.access_key_secret = "${TEST_OSS_SECRET}"
        build_trainer(config, online=False).run()
        saved = fileio.read_text(f"{MODEL_DIR}/pipeline.config")
        assert "${TEST_OSS_SECRET}" in saved and "s3cr3t-from-env" not in saved
        assert "plain-key-id" not in saved and "<redacted>" in saved
        oss.configure("", "", "")
