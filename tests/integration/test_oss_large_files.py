"""Checkpoint files larger than one PUT reach OSS in parts streamed from disk (issue 51, finding 3).

OSS refuses a single PUT body past 5 GB, so a mirror that read each data
file whole and sent it in one put failed every save of a large model. The
scale is shrunk here: 1 MB parts (``OSS_UPLOAD_PART_MB``) and an OSS that refuses PUT bodies
past 2 MB, with a 3.5 MB checkpoint data file. Against tests/fake_oss.py (real
HTTP through oss2, multipart uploads included): no real OSS is reachable
from this machine.
"""
import os

import pytest

from easyonline.checkpoint.mirror import CheckpointMirror
from easyonline.core.errors import OssConfigError
from easyonline.utils import fileio, oss
from tests.fake_oss import FakeOss

MODEL_DIR = "oss://bkt/models/big"
MB = 1 << 20


@pytest.fixture
def fake_oss(monkeypatch):
    monkeypatch.setenv("OSS_UPLOAD_PART_MB", "1")
    with FakeOss() as fake:
        fake.max_put_bytes = 2 * MB  # OSS's 5 GB, shrunk as the files are
        oss.configure(fake.endpoint, "id", "secret")
        yield fake
        oss.configure("", "", "")


def _checkpoint(directory, data_bytes: int) -> str:
    """A checkpoint's files as the mirror sees them (it copies bytes, never parses them)."""
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, "model.ckpt-7")
    with open(prefix + ".data-00000-of-00001", "wb") as f:
        f.write(os.urandom(data_bytes))
    with open(prefix + ".index", "wb") as f:
        f.write(os.urandom(2000))
    return prefix


def test_a_data_file_larger_than_one_put_arrives_whole_in_parts(fake_oss, tmp_path):
    prefix = _checkpoint(tmp_path / "cache", int(3.5 * MB))
    assert CheckpointMirror(MODEL_DIR, str(tmp_path / "cache")).push(prefix, [prefix]) == MODEL_DIR + "/model.ckpt-7"
    data_key = "models/big/model.ckpt-7.data-00000-of-00001"
    with open(prefix + ".data-00000-of-00001", "rb") as f:
        assert fake_oss.objects["bkt"][data_key] == f.read()  # byte for byte
    data_puts = [size for key, size in fake_oss.puts if key == data_key]
    assert len(data_puts) == 4 and max(data_puts) == MB, data_puts  # 1 + 1 + 1 + 0.5 MB, no body past a part
    assert sum(data_puts) == int(3.5 * MB)
    assert [size for key, size in fake_oss.puts if key.endswith(".index")] == [2000]  # small: one put, as before
    assert not fake_oss.uploads  # every multipart upload completed
    # and back: a new machine's cache gets the same bytes
    restored = CheckpointMirror(MODEL_DIR, str(tmp_path / "other")).pull()
    assert restored == str(tmp_path / "other" / "model.ckpt-7")
    for suffix in (".data-00000-of-00001", ".index"):
        with open(prefix + suffix, "rb") as want, open(restored + suffix, "rb") as got:
            assert got.read() == want.read()


def test_a_failed_part_aborts_the_upload_and_leaves_no_object(fake_oss, tmp_path):
    prefix = _checkpoint(tmp_path / "cache", int(2.5 * MB))
    fake_oss.max_put_bytes = MB - 1  # every full part is refused
    with pytest.raises(Exception, match="EntityTooLarge"):
        CheckpointMirror(MODEL_DIR, str(tmp_path / "cache")).push(prefix, [prefix])
    assert not fake_oss.uploads  # aborted, so OSS does not keep (and bill) the parts
    assert not fileio.exists(MODEL_DIR + "/model.ckpt-7.data-00000-of-00001")
    assert not fileio.exists(MODEL_DIR + "/checkpoint")  # the state never names a checkpoint not all there


@pytest.mark.parametrize("value, error", [("6000", "OSS_UPLOAD_PART_MB=6000: OSS takes parts of 1 to 5120 MB"),
                                          ("64MB", "OSS_UPLOAD_PART_MB='64MB' is not a whole number of MB")])
def test_a_part_size_oss_does_not_take_is_refused_by_name(fake_oss, tmp_path, monkeypatch, value, error):
    monkeypatch.setenv("OSS_UPLOAD_PART_MB", value)
    prefix = _checkpoint(tmp_path / "cache", 1000)
    with pytest.raises(OssConfigError, match=error):
        CheckpointMirror(MODEL_DIR, str(tmp_path / "cache")).push(prefix, [prefix])
