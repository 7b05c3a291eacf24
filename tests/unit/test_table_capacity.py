"""A model restored from a checkpoint starts with tables sized for the checkpoint's rows (embedding/dynamic_tables.py
``checkpoint_tables`` / ``table_capacities``; checkpoint/restore.py), so a restore of millions of rows does not go
through the tables' doublings. Real TFRA tables and a real checkpoint written in two shards."""
import numpy as np

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.checkpoint.restore import model_with_shards, restore_model
from easyonline.config import parse_pipeline_config
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.dynamic_tables import DynamicTables, checkpoint_tables, table_capacities
from easyonline.features import build_feature_specs
from easyonline.features.signature import empty_features
from tests.unit.test_full_sync_stream import CONFIG  # two tables, user (dim 4) and item (dim 2), a DNN

tf = ensure_legacy_keras()

ROWS = {"user": 1000, "item": 300}


def _checkpoint(path: str) -> str:
    """A model-only checkpoint of the config's model, its tables in two shards holding ROWS rows."""
    config = parse_pipeline_config(CONFIG)
    specs = build_feature_specs(config)
    model = model_with_shards(config, specs, 2)
    model(empty_features(specs), training=False)
    model.tables.release_names()
    rng = np.random.default_rng(3)
    for name, count in ROWS.items():
        params = model.tables.embeddings[name].params
        keys = rng.choice(10 ** 9, count, replace=False).astype(np.int64)
        params.upsert(tf.constant(keys), tf.constant(rng.normal(size=(count, params.dim)), tf.float32))
    return tf.train.Checkpoint(model=model).write(path)


def test_checkpoint_tables_count_every_shard_and_a_restored_model_is_sized_for_them(tmp_path):
    path = _checkpoint(str(tmp_path / "ckpt"))
    assert checkpoint_tables(path).rows == {"emb_user": 1000, "emb_item": 300}

    restored = restore_model(parse_pipeline_config(CONFIG), path)
    tables = restored.model.tables
    assert restored.shards == 2
    assert {name: tables.embeddings[name].params.init_size for name in ROWS} == ROWS
    assert tables.sizes() == ROWS


def test_capacities_nest_and_apply_only_inside():
    specs = build_feature_specs(parse_pipeline_config(CONFIG))
    with table_capacities({"emb_user": 5000, "emb_item": 7}), table_capacities({"emb_item": 40}):
        inside = DynamicTables(specs, name="inside")
    outside = DynamicTables(specs, name="outside")
    assert inside.embeddings["user"].params.init_size == 5000  # the outer context's
    assert inside.embeddings["item"].params.init_size == 40  # the inner one replaces it
    assert outside.embeddings["user"].params.init_size == 0  # a table built outside starts small, as before
