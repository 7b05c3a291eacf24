"""Admission, statistics, padding and eviction checked exactly on small hand-built streams."""
import numpy as np
import pytest

from easyonline.config import parse_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.embedding.dynamic_tables import LAST_SEEN, STATS_EPOCH
from easyonline.core.callbacks import Callback
from easyonline.jobs.online_train import build_trainer

BASE = '''
model_dir: "%s"
file_train_input { paths: "unused" }
data_config {
  input_fields { input_name: "label" input_type: INT32 }
  input_fields { input_name: "user" input_type: STRING }
  input_fields { input_name: "item" input_type: INT64 }
  label_fields: "label"
}
feature_configs { input_names: "user" embedding_dim: 2 padding: "" }
feature_configs { input_names: "item" embedding_dim: 2 %s }
model_config { model_class: "dnn" dnn { dnn { hidden_units: [4] } } }
train_config { seconds_per_day: 10 }
'''


class Harness:
    """A trainer fed by hand, with a controllable clock."""

    def __init__(self, tmp_path, item_policy: str):
        config = parse_pipeline_config(BASE % (tmp_path, item_policy))
        validate_pipeline_config(config)
        self.now = STATS_EPOCH + 1000.0
        self.trainer = build_trainer(config, online=False)
        self.trainer.clock = lambda: self.now
        self.items = self.trainer.model.tables.embeddings["item"]

    def train(self, rows):
        """rows: (label, user, item) tuples, one batch."""
        parsed = self.trainer.parser.parse([f"{l},{u},{i}".encode() for l, u, i in rows])
        self.trainer.train_batch(parsed.features, parsed.labels)

    def table_keys(self, table="item"):
        return sorted(self.trainer.model.tables.embeddings[table].params.export()[0].numpy().tolist())

    def slot_keys(self, table="item"):
        return [sorted(s.export()[0].numpy().tolist()) for s in self.trainer.model.tables.slot_variables(table)]

    def stats(self, table="item"):
        keys, values = self.trainer.model.tables.statistics[table].export()
        return {int(k): tuple(float(x) for x in v) for k, v in zip(keys.numpy(), values.numpy())}

    def lookup(self, items, table="item"):
        parsed = self.trainer.parser.parse([f"0,u,{i}".encode() for i in items])
        return self.trainer.model.tables(parsed.features, training=False)[table].numpy()


def test_count_filter_admits_on_the_nth_occurrence_and_not_before(tmp_path):
    h = Harness(tmp_path, "admission { count_filter { min_count: 3 } }")
    h.train([(1, "a", 1), (0, "a", 1), (0, "a", 1), (1, "a", 2), (0, "a", 2), (0, "a", 3)])
    assert h.table_keys() == [1]
    assert h.slot_keys() == [[1]]  # Adam's m and v, side by side in one slot table
    stats = h.stats()
    assert {k: v[:2] for k, v in stats.items()} == {1: (3.0, 1.0), 2: (2.0, 1.0), 3: (1.0, 0.0)}
    assert all(v[LAST_SEEN] == pytest.approx(1000.0) for v in stats.values())
    rows = h.lookup([1, 2, 3, 99])
    assert np.abs(rows[0]).sum() > 0 and np.abs(rows[1:]).sum() == 0  # unadmitted and unknown look up as zeros
    h.train([(0, "a", 2)])
    assert h.table_keys() == [1, 2]
    assert h.slot_keys() == [[1, 2]]


def test_probability_filter_is_reproducible_and_partial(tmp_path):
    rows = [(0, "a", i) for i in range(400)]
    first = Harness(tmp_path / "a", "admission { probability_filter { probability: 0.3 } }")
    first.train(rows)
    second = Harness(tmp_path / "b", "admission { probability_filter { probability: 0.3 } }")
    second.train(rows)
    assert first.table_keys() == second.table_keys()
    assert 60 < len(first.table_keys()) < 180  # ~120 expected
    assert len(first.stats()) == 400


def test_show_click_score_admission(tmp_path):
    h = Harness(tmp_path, "admission { show_click_score { nonclk_coeff: 0.1 click_coeff: 1 base_threshold: 1 } }")
    h.train([(1, "a", 7)] + [(0, "a", 8)] * 5 + [(0, "a", 9)] * 10)
    assert h.table_keys() == [7, 9]  # a click scores 1; 5 non-clicks 0.5; 10 non-clicks 1.0


def test_padding_looks_up_as_zeros_and_creates_nothing(tmp_path):
    h = Harness(tmp_path, "padding: '-1'")
    h.train([(1, "", -1), (0, "", 5), (1, "x", -1)])
    assert h.table_keys() == [5]
    assert len(h.table_keys("user")) == 1  # only "x"; "" is padding
    rows = h.lookup([-1, 5])
    assert np.abs(rows[0]).sum() == 0 and np.abs(rows[1]).sum() > 0


def test_shrink_decays_and_deletes_low_scores_everywhere(tmp_path):
    h = Harness(tmp_path, "eviction { show_click_decay_rate: 0.5 delete_threshold: 0.3 nonclk_coeff: 0.1 click_coeff: 1 }")
    h.train([(0, "a", 1)] * 10 + [(0, "a", 2)] * 2 + [(1, "a", 3)])
    assert h.table_keys() == [1, 2, 3]
    evicted = h.trainer.shrink()
    assert evicted["item"].tolist() == [2]  # score 0.5 * 2 * 0.1 = 0.1 < 0.3
    assert h.table_keys() == [1, 3] and h.slot_keys() == [[1, 3]]
    assert {k: v[:2] for k, v in h.stats().items()} == {1: (5.0, 0.0), 3: (0.5, 0.5)}
    assert h.trainer.evicted["item"].tolist() == [2]


def test_shrink_deletes_ids_unseen_for_too_long(tmp_path):
    h = Harness(tmp_path, "eviction { delete_after_unseen_days: 2 }")  # a day is 10 s here
    h.train([(0, "a", 1), (0, "a", 2)])
    h.now += 15
    h.train([(0, "a", 2)])
    h.now += 10  # id 1 unseen for 25 s > 20 s; id 2 for 10 s
    assert h.trainer.shrink()["item"].tolist() == [1]
    assert h.table_keys() == [2] and list(h.stats()) == [2]


def test_max_size_keeps_the_best_scores_then_the_most_recent(tmp_path):
    h = Harness(tmp_path, "eviction { max_size: 2 }")
    h.train([(1, "a", 2), (0, "a", 3)])
    h.now += 5
    h.train([(0, "a", 4)])  # same score as 3 (0.1), seen later
    h.trainer.shrink()
    assert h.table_keys() == [2, 4]
    assert h.slot_keys() == [[2, 4]]
    h.train([(0, "a", 5)] * 30)
    h.trainer.shrink()
    assert h.table_keys() == [2, 5]  # 30 * 0.1 = 3.0 and a click (1.0) beat 0.1


class ShrinkEvery(Callback):
    def __init__(self, batches):
        self.batches, self.seen, self.sizes = batches, 0, []

    def on_batch_end(self, trainer, raw_batch, parsed_batch, probs):
        self.seen += 1
        if self.seen % self.batches == 0:
            trainer.shrink()
            self.sizes.append(sum(trainer.table_sizes().values()))


def test_tables_stay_bounded_with_eviction_and_grow_without(tmp_path):
    from easyonline.tools.stream_producer import SyntheticCtrStream
    from tests.conftest import TEST_TABLES, online_config
    path = tmp_path / "s.csv"
    stream = SyntheticCtrStream(base_vocab=200, new_ids_per_10k=3000)  # 3 new ids per feature every 10 samples
    with open(path, "wb") as f:
        for chunk in stream.chunks(0, 8000):
            f.write(b"\n".join(chunk) + b"\n")
    sizes = {}
    for name, edits in (("bounded", {"eviction": {"max_size": 300}}), ("unbounded", {})):
        config = online_config(tmp_path / name, **{"data_config.batch_size": 512})
        config.ClearField("kafka_train_input")
        config.file_train_input.paths.append(str(path))
        for feature in config.feature_configs:
            if feature.feature_type == feature.IdFeature and edits:
                feature.eviction.max_size = 300
        shrinker = ShrinkEvery(10)
        summary = build_trainer(config, online=False, callbacks=[shrinker]).run()
        sizes[name] = (shrinker.sizes, summary.table_sizes)
    bounded, unbounded = sizes["bounded"], sizes["unbounded"]
    assert max(bounded[0]) <= TEST_TABLES * 300
    assert max(unbounded[1].values()) > 1000  # each table grew past 1,000 ids (~200 + 2,400 new ones)
    assert unbounded[0][-1] > 2 * TEST_TABLES * 300


def test_statistics_are_checkpointed_with_the_tables(tmp_path):
    h = Harness(tmp_path, "admission { count_filter { min_count: 2 } }")
    h.train([(1, "a", 1), (0, "a", 1), (0, "b", 2)])
    h.trainer.checkpointer.step.assign(1)
    h.trainer.checkpointer.save({0: 3})
    again = Harness(tmp_path, "admission { count_filter { min_count: 2 } }")
    assert again.trainer.restored_from is not None
    assert again.stats() == h.stats() and again.table_keys() == [1]
    again.train([(0, "b", 2)])  # the restored count (1) + 1 reaches min_count
    assert again.table_keys() == [1, 2]


def test_trainer_runs_scheduled_shrinks(tmp_path):
    from easyonline.tools.stream_producer import SyntheticCtrStream
    from tests.conftest import TEST_TABLES, online_config
    path = tmp_path / "s.csv"
    with open(path, "wb") as f:
        for chunk in SyntheticCtrStream().chunks(0, 4000):
            f.write(b"\n".join(chunk) + b"\n")
    config = online_config(tmp_path / "m", **{"data_config.batch_size": 500, "train_config.shrink_every_secs": 1e-6})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(path))
    for feature in config.feature_configs:
        if feature.feature_type == feature.IdFeature:
            feature.eviction.max_size = 50
    trainer = build_trainer(config, online=False)
    summary = trainer.run()
    assert summary.samples == 4000
    assert len(trainer.evicted) == TEST_TABLES and all(len(keys) > 0 for keys in trainer.evicted.values())
    assert max(summary.table_sizes.values()) < 50 + 500  # at most one batch's new ids above the cap


def test_statistics_of_unadmitted_ids_are_capped_with_max_size(tmp_path):
    h = Harness(tmp_path, "admission { count_filter { min_count: 2 } } eviction { max_size: 2 }")
    h.train([(0, "a", 1), (0, "a", 1)] + [(0, "a", i) for i in range(10, 30)])
    assert h.table_keys() == [1] and len(h.stats()) == 21
    h.now += 1
    h.train([(1, "a", 29)])  # now clicked: the best of the unadmitted; 29 is admitted (2 shows)
    h.trainer.shrink()
    stats = h.stats()
    assert len(stats) == 8 and 1 in stats and 29 in stats  # 4 x max_size
    assert h.table_keys() == [1, 29]
