"""fileio on oss:// paths, and the stop signal polled on OSS.

Against tests/fake_oss.py (real HTTP through oss2, in-memory objects): no
real OSS is reachable from this machine.
"""
import pytest

from easyonline.train.schedule_callbacks import StopFile
from easyonline.core.stop_signal import STOP_SIGNAL_FILE
from easyonline.utils import fileio, oss
from tests.fake_oss import configured_fake_oss


@pytest.fixture
def fake_oss():
    with configured_fake_oss() as fake:
        yield fake


def test_files_and_directories_on_oss(fake_oss):
    root = "oss://bkt/models/m1"
    assert not fileio.exists(root) and fileio.listdir(root) == []
    fileio.makedirs(root)  # nothing to do on OSS
    fileio.write_text_atomic(fileio.join(root, "pipeline.config"), "model_dir: 'x'\n")
    fileio.write_bytes_atomic(fileio.join(root, "inference", "base-1", "part-00000.pb"), b"\x00\xff" * 1000)
    assert fileio.exists(root) and fileio.exists(fileio.join(root, "inference"))
    assert not fileio.exists(fileio.join(root, "pipeline"))  # a prefix of a name is not a directory
    assert fileio.listdir(root) == ["inference", "pipeline.config"]
    assert fileio.read_text(fileio.join(root, "pipeline.config")) == "model_dir: 'x'\n"
    assert fileio.read_bytes(root + "/inference/base-1/part-00000.pb") == b"\x00\xff" * 1000
    with pytest.raises(FileNotFoundError, match="oss://bkt/models/m1/missing"):
        fileio.read_bytes(fileio.join(root, "missing"))
    fileio.remove_tree(fileio.join(root, "inference"))
    assert fileio.listdir(root) == ["pipeline.config"]
    assert set(fake_oss.objects["bkt"]) == {"models/m1/pipeline.config"}


def test_listing_pages_through_many_objects(fake_oss):
    for i in range(250):  # oss2 lists 100 per request by default
        fileio.write_bytes_atomic(f"oss://bkt/many/{i:04d}", b"x")
    assert len(fileio.listdir("oss://bkt/many")) == 250
    fileio.remove_tree("oss://bkt/many")
    assert not fileio.exists("oss://bkt/many")


def test_stop_signal_is_polled_on_oss(fake_oss):
    class Trainer:
        reason = None

        def stop(self, reason):
            self.reason = reason

    trainer, stop_file = Trainer(), StopFile("oss://bkt/models/online", poll_secs=0)
    stop_file.on_tick(trainer)
    assert trainer.reason is None
    fileio.write_text_atomic(f"oss://bkt/models/online/{STOP_SIGNAL_FILE}", "")
    fake_oss.failing = True  # a transient OSS error while polling: logged, training goes on
    stop_file.on_tick(trainer)
    assert trainer.reason is None
    fake_oss.failing = False
    stop_file.on_tick(trainer)
    assert trainer.reason and STOP_SIGNAL_FILE in trainer.reason


def test_missing_credentials_are_named():
    oss.configure("", "", "")
    with pytest.raises(oss.OssConfigError, match="OSS_ENDPOINT"):
        fileio.exists("oss://bkt/x")
