"""The shared-memory ring that carries parsed batches from the reader process (inputs/batch_slots.py)."""
import dataclasses
import os

import numpy as np

from easyonline.features.vector_csv import VectorBatch
from easyonline.inputs import batch_slots
from easyonline.inputs.batch_slots import BatchSlots, slot_bytes_for

ID_NAMES, DENSE_NAMES, LABEL_NAMES = ("a", "b", "c"), ("x", "y"), ("click", "rating", "/sample_weight")


def _batch(rows: int, seed: int) -> VectorBatch:
    rng = np.random.default_rng(seed)
    return VectorBatch(ID_NAMES, rng.integers(-2**62, 2**62, (rows, 3), dtype=np.int64), DENSE_NAMES,
                       rng.random((rows, 2), dtype=np.float32), LABEL_NAMES,
                       rng.normal(size=(rows, 3)).astype(np.float32), rows)


def test_batches_written_by_one_mapping_read_back_equal_through_another():
    writer = BatchSlots.create(4, slot_bytes_for(64, 3, 2, 3))
    assert writer is not None and os.path.getsize(writer.path) == 4 * writer.slot_bytes
    reader = BatchSlots(writer.path, writer.count, writer.slot_bytes, create=False)  # as the trainer maps it
    os.unlink(writer.path)
    try:
        for index in range(10):  # wraps the ring twice
            batch, blob = _batch(64 - index, index), bytes([65 + index]) * (100 + index)
            layout = writer.write(index, blob, batch)
            assert layout is not None
            got_blob, got = reader.read(index, layout, ID_NAMES, DENSE_NAMES, LABEL_NAMES)
            assert got_blob == blob and got.size == batch.size
            assert got.id_names == ID_NAMES and got.dense_names == DENSE_NAMES and got.label_names == LABEL_NAMES
            assert got.labels.shape == (batch.size, 3)  # every label column (and the weight), by row
            np.testing.assert_array_equal(got.ids, batch.ids)
            np.testing.assert_array_equal(got.dense, batch.dense)
            np.testing.assert_array_equal(got.labels, batch.labels)
            del got
    finally:
        writer.close()
        reader.close()


def test_a_batch_larger_than_its_slot_is_refused_not_truncated():
    slots = BatchSlots.create(3, 4096)
    try:
        assert slots.write(0, b"x" * 100, _batch(10, 0)) is not None
        assert slots.write(1, b"x" * 5000, _batch(10, 1)) is None  # the blob alone is over 4 KB
        assert slots.write(2, b"", _batch(1000, 2)) is None  # 1000 rows of ids: 24 KB
        # ids and dense alone would fit (110 x 32 B: 3.5 KB); with the three label columns 4.8 KB do not
        assert slots.write(2, b"", _batch(110, 2)) is None
    finally:
        slots.close()
        os.unlink(slots.path)


def test_without_shared_memory_the_ring_is_not_made(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(batch_slots, "SHM_DIR", str(tmp_path / "missing"))
    with caplog.at_level("INFO"):
        assert BatchSlots.create(3, 4096) is None
    assert "through its queue" in caplog.text and "missing" in caplog.text


def test_slot_size_covers_overshooting_batches_and_is_capped():
    assert slot_bytes_for(1024, 26, 13, 3) >= 2 * 1024 * (8 * 26 + 4 * 13 + 4 * 3)
    assert slot_bytes_for(10_000_000, 26, 13, 1) == batch_slots.MAX_SLOT_BYTES


def test_ragged_arrays_of_tags_and_sequences_cross_with_the_batch():
    """A multi-value feature's ids (int64) and a weighted tag's weights (float32) cross as values and row splits."""
    from easyonline.features.multi_value_numpy import RaggedArray  # pylint: disable=g-import-not-at-top
    names, dtypes = ("seq", "tags", "tags/weights"), (np.int64, np.int64, np.float32)
    writer = BatchSlots.create(3, slot_bytes_for(64, 3, 2, 3, ragged_row_bytes=200, ragged_arrays=3))
    assert writer is not None
    reader = BatchSlots(writer.path, writer.count, writer.slot_bytes, create=False)
    os.unlink(writer.path)
    try:
        for index in range(5):
            rng = np.random.default_rng(index)
            batch = _batch(40 + index, index)
            lengths = rng.integers(0, 6, batch.size)
            lengths[0] = 0  # an empty row
            splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            ragged = (RaggedArray(rng.integers(-2**62, 2**62, splits[-1], dtype=np.int64), splits),
                      RaggedArray(np.arange(splits[-1] // 2, dtype=np.int64), splits // 2),
                      RaggedArray(rng.random(splits[-1] // 2, dtype=np.float32), splits // 2))
            batch = dataclasses.replace(batch, ragged_names=names, ragged=ragged)
            layout = writer.write(index, b"blob%d" % index, batch)
            assert layout is not None
            got_blob, got = reader.read(index, layout, ID_NAMES, DENSE_NAMES, LABEL_NAMES, names, dtypes)
            assert got_blob == b"blob%d" % index and got.ragged_names == names
            for mine, theirs in zip(ragged, got.ragged):
                assert theirs.flat_values.dtype == mine.flat_values.dtype
                np.testing.assert_array_equal(theirs.flat_values, mine.flat_values)
                np.testing.assert_array_equal(theirs.row_splits, mine.row_splits)
            np.testing.assert_array_equal(got.ids, batch.ids)
            np.testing.assert_array_equal(got.labels, batch.labels)
            del got
    finally:
        writer.close()
        reader.close()
