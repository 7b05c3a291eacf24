"""Eviction (shrink_table / shrink_tables) on one tiny TFRA table with hand-set statistics.

Each test puts a few keys in the table (and Adam slots, by one optimizer step), sets their
(show, click, last seen) by hand, shrinks, and checks exactly which keys left the table, the slots
and the statistics. Scores are Paddle's: (show - click) x nonclk_coeff + click x click_coeff.
"""
import pytest

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.config import parse_pipeline_config
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.embedding.dynamic_tables import CLICK, LAST_SEEN, SHOW, DynamicTables
from easyonline.embedding.eviction import STATS_PER_ROW, shrink_table, shrink_tables
from easyonline.features.feature_spec import build_feature_specs
from easyonline.train.optimizers import build_optimizer

tf = ensure_legacy_keras()

CONFIG = """
model_dir: "/tmp/unused"
data_config { input_fields { input_name: "label" input_type: INT32 } input_fields { input_name: "item" input_type: INT64 }
              input_fields { input_name: "user" input_type: INT64 } label_fields: "label" }
feature_configs { input_names: "item" embedding_dim: 2 eviction { %s } }
feature_configs { input_names: "user" embedding_dim: 2 }
model_config { model_class: "dnn" }
"""
DAY = 10.0  # seconds_per_day in these tests


class Table:
    """The "item" table of a DynamicTables: rows (with Adam slots) and statistics set by hand."""

    def __init__(self, eviction: str, rows, stats):
        """rows: keys that get a row; stats: {key: (show, click, last_seen)}."""
        config = parse_pipeline_config(CONFIG % eviction)
        specs = build_feature_specs(config)
        self.tables = DynamicTables(specs, name="tables")
        self.layer = self.tables.embeddings["item"]
        if rows:
            optimizer = build_optimizer(config.train_config.optimizer_config)  # Adam, as the trainer's
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(self.layer(tf.constant(rows, tf.int64)))
            optimizer.apply_gradients(zip(tape.gradient(loss, self.layer.trainable_variables),
                                          self.layer.trainable_variables))
            self.tables.release_names()  # slots exist now: let the next test reuse the names
        if stats:
            keys = sorted(stats)
            self.tables.statistics["item"].upsert(tf.constant(keys, tf.int64),
                                                  tf.constant([stats[k] for k in keys], tf.float32))

    def rows(self):
        keys, values = self.layer.params.export()
        return {int(k): v.tolist() for k, v in zip(keys.numpy(), values.numpy())}

    def slot_keys(self):
        return [sorted(s.export()[0].numpy().tolist()) for s in self.tables.slot_variables("item")]

    def stats(self):
        keys, values = self.tables.statistics["item"].export()
        return {int(k): tuple(float(x) for x in v) for k, v in zip(keys.numpy(), values.numpy())}

    def shrink(self, now=0.0):
        return sorted(shrink_table(self.tables, "item", now, DAY).tolist())


def test_the_table_fixture_has_rows_slots_and_statistics():
    table = Table("max_size: 10", rows=[1, 2], stats={1: (3, 1, 7), 9: (1, 0, 2)})
    assert sorted(table.rows()) == [1, 2]
    assert table.slot_keys() == [[1, 2]]  # Adam's m and v, side by side in one slot table
    assert table.stats() == {1: (3.0, 1.0, 7.0), 9: (1.0, 0.0, 2.0)}
    assert (SHOW, CLICK, LAST_SEEN) == (0, 1, 2)


def test_decay_then_delete_below_the_score_threshold():
    table = Table("show_click_decay_rate: 0.5 delete_threshold: 0.3 nonclk_coeff: 0.1 click_coeff: 1",
                  rows=[1, 2, 3], stats={1: (10, 0, 5), 2: (2, 0, 6), 3: (1, 1, 7), 4: (1, 0, 8)})
    kept = {k: v for k, v in table.rows().items() if k in (1, 3)}
    # after decay x0.5:  1: (5, 0) -> 5 x 0.1 = 0.5      kept
    #                    2: (1, 0) -> 1 x 0.1 = 0.1      < 0.3: evicted
    #                    3: (0.5, 0.5) -> 0 + 0.5 x 1 = 0.5   kept
    #                    4: (0.5, 0) -> 0.05, no row: leaves the statistics, is not reported
    assert table.shrink() == [2]
    assert sorted(table.rows()) == [1, 3] and table.slot_keys() == [[1, 3]]
    assert table.rows() == kept  # the surviving rows are untouched
    assert table.stats() == {1: (5.0, 0.0, 5.0), 3: (0.5, 0.5, 7.0)}  # decayed values are kept


def test_decay_compounds_over_shrinks():
    table = Table("show_click_decay_rate: 0.5 delete_threshold: 0.3", rows=[1], stats={1: (8, 0, 0)})
    assert table.shrink() == []  # 8 x 0.5 = 4 shows: 4 x 0.1 = 0.4 >= 0.3
    assert table.stats()[1][:2] == (4.0, 0.0)
    assert table.shrink() == [1]  # 4 x 0.5 = 2 shows: 0.2 < 0.3
    assert table.rows() == {} and table.stats() == {} and table.slot_keys() == [[]]


def test_delete_ids_unseen_for_more_than_the_given_days():
    table = Table("delete_after_unseen_days: 2", rows=[1, 2, 3], stats={1: (1, 0, 70), 2: (1, 0, 80), 3: (1, 0, 95),
                                                                       5: (9, 9, 50)})
    # now = 100, 2 days x 10 s = 20 s: 1 unseen 30 s (evicted); 2 unseen exactly 20 s (kept: not more than);
    # 3 unseen 5 s; 5 (no row) unseen 50 s: leaves the statistics despite its score of 9
    assert table.shrink(now=100.0) == [1]
    assert sorted(table.rows()) == [2, 3] and table.slot_keys() == [[2, 3]]
    assert sorted(table.stats()) == [2, 3]


def test_defaults_evict_nothing():
    # threshold 0, no unseen limit, no cap, decay 1: a score is never below 0
    table = Table("", rows=[1, 2], stats={1: (0, 0, 0), 2: (5, 5, 0), 3: (0, 0, 0)})
    assert table.shrink(now=1e6) == []
    assert sorted(table.rows()) == [1, 2] and sorted(table.stats()) == [1, 2, 3]


def test_max_size_keeps_the_best_scores_then_the_most_recent():
    table = Table("max_size: 2", rows=[1, 2, 3, 4], stats={1: (1, 0, 10), 2: (1, 1, 5), 3: (1, 0, 20)})
    # scores: 1: 0.1 (seen at 10); 2: 1.0; 3: 0.1 (seen at 20, more recent than 1); 4: a row without statistics
    # ranks last. Best two: 2, then 3 (ties 1 on score, more recent)
    assert table.shrink() == [1, 4]
    assert sorted(table.rows()) == [2, 3] and table.slot_keys() == [[2, 3]]
    assert sorted(table.stats()) == [2, 3]


def test_max_size_counts_rows_already_deleted_by_another_rule():
    table = Table("max_size: 2 delete_after_unseen_days: 1", rows=[1, 2, 3],
                  stats={1: (50, 5, 0), 2: (1, 1, 95), 3: (1, 0, 95)})
    # now = 100, a day = 10 s: 1 is unseen for 100 s, deleted despite the best score (45 x 0.1 + 5 = 9.5).
    # That leaves 2 (1.0) and 3 (0.1): within max_size, so 3 stays (1 must not take a place in the ranking)
    assert table.shrink(now=100.0) == [1]
    assert sorted(table.rows()) == [2, 3] and sorted(table.stats()) == [2, 3]


def test_max_size_caps_statistics_of_never_admitted_ids():
    assert STATS_PER_ROW == 4
    table = Table("max_size: 1", rows=[1], stats={1: (10, 0, 0), 10: (1, 0, 9), 11: (3, 0, 4), 12: (3, 0, 6),
                                                  13: (3, 0, 5), 14: (5, 0, 0)})
    # room for 4 x max_size = 4 ids with statistics; row 1 takes one, so 3 of the 5 ids without a row stay:
    # 14 (0.5), then the 0.3s by recency: 12 (seen 6), 13 (seen 5); 11 (0.3, seen 4) and 10 (0.1) go
    assert table.shrink() == []  # no row evicted: only rows are reported
    assert sorted(table.stats()) == [1, 12, 13, 14]
    assert sorted(table.rows()) == [1]


def test_shrink_tables_shrinks_only_tables_with_an_eviction_config():
    table = Table("delete_threshold: 0.15", rows=[1, 2], stats={1: (1, 0, 0), 2: (2, 0, 0)})
    users = table.tables.embeddings["user"]
    users.params.upsert(tf.constant([7], tf.int64), tf.constant([[1.0, 2.0]]))
    assert "user" not in table.tables.statistics  # no admission or eviction: no statistics
    evicted = shrink_tables(table.tables, now=0.0, seconds_per_day=DAY)
    assert list(evicted) == ["item"] and evicted["item"].tolist() == [1]  # 0.1 < 0.15 <= 0.2
    assert table.tables.sizes() == {"item": 1, "user": 1}


def test_shrink_tables_passes_now_and_the_day_length():
    table = Table("delete_after_unseen_days: 1", rows=[1], stats={1: (1, 0, 0)})
    assert shrink_tables(table.tables, now=100.0, seconds_per_day=100.0)["item"].tolist() == []  # 100 s, not > 1 day
    assert shrink_tables(table.tables, now=100.0, seconds_per_day=99.0)["item"].tolist() == [1]  # 100 s > 99 s


@pytest.mark.parametrize("now, expected", [(20.0, []), (20.5, [1])])
def test_unseen_boundary(now, expected):
    table = Table("delete_after_unseen_days: 2", rows=[1], stats={1: (1, 0, 0)})
    assert table.shrink(now=now) == expected  # 2 days x 10 s = 20 s


def test_max_size_with_rows_but_no_statistics_at_all():
    # rows restored from a checkpoint without statistics, then shrunk before any batch: 3 rows, cap 2
    table = Table("max_size: 2", rows=[1, 2, 3], stats={})
    assert len(table.shrink()) == 1 and len(table.rows()) == 2


def test_cap_only_trims_to_max_size_without_decay_or_delete_rules():
    table = Table("max_size: 2 show_click_decay_rate: 0.5 delete_threshold: 5 delete_after_unseen_days: 1",
                  rows=[1, 2, 3], stats={1: (1, 0, 0), 2: (1, 1, 5), 3: (1, 0, 20), 7: (2, 0, 1)})
    # a trim ranks as a shrink (2: 1.0; 3: 0.1 seen at 20; 1: 0.1 seen at 0) but no score is below a
    # threshold there and nothing is unseen: only the row over the cap goes; the statistics keep their values
    evicted = shrink_table(table.tables, "item", now=100.0, seconds_per_day=DAY, cap_only=True)
    assert sorted(evicted.tolist()) == [1]
    assert sorted(table.rows()) == [2, 3] and table.slot_keys() == [[2, 3]]
    assert table.stats() == {2: (1.0, 1.0, 5.0), 3: (1.0, 0.0, 20.0), 7: (2.0, 0.0, 1.0)}
