"""SequenceFeature and weighted TagFeature: parsing (generated and adversarial input), their config errors,
the tables' sequence rows and weighted pooling, and DIN's target attention checked by hand."""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import json  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from easyonline.config import ConfigError, parse_pipeline_config  # noqa: E402
from easyonline.config.validate import validate_pipeline_config  # noqa: E402
from easyonline.core.rejections import BAD_SEQUENCE, BAD_TAG_WEIGHT, rejection_kind  # noqa: E402
from easyonline.features import CsvParser, build_feature_specs  # noqa: E402
from easyonline.features.csv_parser import HASH_BUCKETS  # noqa: E402
from easyonline.features.record_parser import make_parser  # noqa: E402
from easyonline.features.signature import empty_features  # noqa: E402
from easyonline.features.vector_csv import array_path_refusal, supports  # noqa: E402
from easyonline.models.builder import build_model  # noqa: E402
from easyonline.models.layers import MLP  # noqa: E402
from easyonline.models.target_attention import TargetAttention  # noqa: E402
from easyonline.protos import pipeline_pb2  # noqa: E402

# label,item,cate,hist,hist_cate,nums,wtags,ihist
CONFIG = '''
model_dir: "/tmp/unused"
file_train_input { paths: "unused" }
data_config {
  input_fields { input_name: "label" input_type: INT32 }
  input_fields { input_name: "item" input_type: STRING }
  input_fields { input_name: "cate" input_type: STRING }
  input_fields { input_name: "hist" input_type: STRING }
  input_fields { input_name: "hist_cate" input_type: STRING }
  input_fields { input_name: "nums" input_type: STRING }
  input_fields { input_name: "wtags" input_type: STRING }
  input_fields { input_name: "ihist" input_type: INT64 }
  label_fields: "label"
}
feature_configs { input_names: "item" embedding_dim: 2 }
feature_configs { input_names: "cate" embedding_dim: 2 }
feature_configs { input_names: "hist" feature_type: SequenceFeature embedding_dim: 2 embedding_name: "item"
                  sequence_length: 3 padding: "none" }
feature_configs { input_names: "hist_cate" feature_type: SequenceFeature embedding_dim: 2 embedding_name: "cate"
                  max_seq_len: 4 sequence_length: 3 }
feature_configs { input_names: "nums" feature_type: SequenceFeature sub_feature_type: RawFeature boundaries: [1, 10]
                  embedding_dim: 2 separator: ";" }
feature_configs { input_names: "wtags" feature_type: TagFeature kv_separator: ":" embedding_dim: 2 %s }
feature_configs { input_names: "ihist" feature_type: SequenceFeature embedding_dim: 2 }
model_config { %s
  feature_groups { group_name: "all" feature_names: ["item", "wtags"]
    sequence_features { group_name: "din" seq_att_map { key: ["item", "cate"] hist_seq: ["hist", "hist_cate"] } }
    sequence_features { group_name: "nums" seq_att_map { key: "cate" hist_seq: "nums" } }
    sequence_features { group_name: "ints" seq_att_map { key: "item" hist_seq: "ihist" } } }
}
'''
MODEL = 'model_class: "DIN" din { dnn { hidden_units: [4] } attention_dnn { hidden_units: [3, 1] } }'


def _config(tags: str = "", model: str = MODEL, edit=None):
    text = CONFIG % (tags, model)
    if edit:
        text = text.replace(*edit)
    config = parse_pipeline_config(text)
    validate_pipeline_config(config)
    return config


_PARSERS = []  # (specs, their parser)


def _parser(tags: str = "", model: str = MODEL, edit=None):
    """The parser of ``_config(tags, model, edit)``, one per feature specs for the module: a parser is made of
    its specs alone (CsvParser(specs)) and holds no state between batches, and tracing its decode graph
    (thousands of ops for these features) is most of a parse test's time. Configs whose specs are equal (they
    differ in the model class, or spell out a default) share one."""
    specs = build_feature_specs(_config(tags, model, edit))
    for known, parser in _PARSERS:
        if known == specs:
            return parser
    _PARSERS.append((specs, CsvParser(specs)))
    return _PARSERS[-1][1]


def _hash(*tokens):
    return tf.strings.to_hash_bucket_fast(list(tokens), HASH_BUCKETS).numpy().tolist()


def test_sequences_keep_their_first_ids_drop_empty_values_and_share_the_items_hashing():
    batch = _parser().parse([b"1,a,x,a|b|c|d|e,x|y|z|w|v,0.5;5;50;7,,5|6|-1|7",
                             b"0,b,y,,,,,",  # every sequence empty: length 0
                             b"0,b,y,|a||none|b|,||x||y|,;;2;,,|3|"])  # separators in odd places, padding
    assert batch.size == 3 and not batch.rejected
    hist = batch.features["hist"]
    assert hist.to_list() == [_hash("a", "b", "c"), [], _hash("a", "b")]  # the 3 most recent (first) kept
    assert hist.flat_values.numpy()[0] == batch.features["item"].numpy()[0]  # "a" is one id in the item table
    assert batch.features["hist_cate"].to_list() == [_hash("x", "y", "z"), [], _hash("x", "y")]
    assert batch.features["nums"].to_list() == [[0, 1, 2, 1], [], [1]]  # bucketized at [1, 10]; no bound: all kept
    assert batch.features["ihist"].to_list() == [[5, 6, 7], [], [3]]  # a negative int id is dropped


def test_long_generated_sequences_are_cut_and_everything_else_read():
    rng = np.random.default_rng(3)
    lines, expected = [], []
    for _ in range(200):
        n = int(rng.integers(0, 12))
        ids = [f"i{v}" for v in rng.integers(0, 1000, n)]
        cates = [f"c{v}" for v in rng.integers(0, 9, n)]
        lines.append(f"1,a,x,{'|'.join(ids)},{'|'.join(cates)},,,".encode())
        expected.append(_hash(*ids[:3]) if ids else [])
    batch = _parser().parse(lines)
    assert batch.size == 200 and batch.features["hist"].to_list() == expected
    assert batch.features["hist"].row_lengths().numpy().max() == 3


def test_weighted_tags_parse_ids_and_weights_and_drop_weights_of_zero_or_less():
    batch = _parser().parse([b"1,a,x,,,,t:1|u:0.5|v:0|w:-2|x:2e-1,", b"0,a,x,,,,,", b"0,a,x,,,,|t:3||,"])
    assert batch.size == 3 and not batch.rejected
    assert batch.features["wtags"].to_list() == [_hash("t", "u", "x"), [], _hash("t")]
    np.testing.assert_allclose(batch.features["wtags/weights"].flat_values.numpy(), [1.0, 0.5, 0.2, 3.0])


@pytest.mark.parametrize("value", [b"t:heavy", b"t", b":1", b"t:1:2", b"t:nan", b"t:inf", b"t:1|u:", b"t: 1"])
def test_a_bad_weight_rejects_its_sample_alone_with_a_named_reason(value):
    good = b"1,a,x,a|b,x|y,,t:1,"
    batch = _parser().parse([good, b"0,b,y,,,,%s," % value, good])
    assert batch.size == 2 and batch.features["item"].numpy().tolist() == _hash("a", "a")
    [(line, reason)] = batch.rejected
    assert rejection_kind(reason) == BAD_TAG_WEIGHT and "wtags" in reason and value.decode() in reason, reason


@pytest.mark.parametrize("field,value,what", [
    (5, b"0.5;abc;7", "a number"),  # nums: bucketized numbers
    (5, b"1e3;;x1", "a number"),
    (7, b"5|cate_id_3|7", "an int64 id"),  # ihist: int ids
    (7, b"5|+7", "an int64 id"),
    (7, b"5|1.0", "an int64 id"),
    (7, b"9223372036854775808", "an int64 id"),  # one past int64's range
])
def test_a_sequence_value_of_the_wrong_kind_rejects_its_sample_alone_naming_the_feature(field, value, what):
    """A value that cannot be converted is flagged, not converted: a conversion error would fail the whole batch
    (EasyRec's numeric-boundary samples fed ids once rejected every sample as "Graph execution error")."""
    good = b"1,a,x,a|b,x|y,0.5;5,t:1,5|9223372036854775807"
    fields = good.split(b",")
    fields[field] = value
    batch = _parser().parse([good, b",".join(fields), good])
    assert batch.size == 2 and batch.features["ihist"].to_list() == [[5, 9223372036854775807]] * 2
    [(_, reason)] = batch.rejected
    name = ["nums", "ihist"][field == 7]
    assert rejection_kind(reason) == BAD_SEQUENCE, reason
    assert f"{name}: a value of {name} is not {what}: {value.decode()!r}" in reason, reason


def test_sequences_of_one_attention_of_different_lengths_reject_the_sample():
    batch = _parser().parse([b"1,a,x,a|b,x|y,,,", b"0,a,x,a|b|c,x|y,,,", b"0,a,x,a|b|c|d,x|y|z|w,,,"])
    assert batch.size == 2  # a 4th id beyond sequence_length 3 on both sides is no mismatch
    [(_, reason)] = batch.rejected
    assert rejection_kind(reason) == BAD_SEQUENCE and "hist has 3 ids, hist_cate 2" in reason


def test_json_records_take_lists_for_sequences_and_objects_for_weighted_tags():
    config = _config()
    config.data_config.input_format = pipeline_pb2.DataConfig.JSON
    parser = make_parser(build_feature_specs(config), config.data_config)
    record = {"label": 1, "item": "a", "cate": "x", "hist": ["a", "b"], "hist_cate": ["x", "y"],
              "wtags": {"t": 0.5, "u": 2}, "ihist": [4, 5]}
    batch = parser.parse([json.dumps(record).encode()])
    assert batch.size == 1 and not batch.rejected
    assert batch.features["hist"].to_list() == [_hash("a", "b")] and batch.features["ihist"].to_list() == [[4, 5]]
    np.testing.assert_allclose(batch.features["wtags/weights"].flat_values.numpy(), [0.5, 2.0])


def test_the_array_path_takes_sequences_and_weighted_tags_but_not_multi_byte_separators():
    """(tests/unit/test_vector_csv_sequences.py checks what it makes of them.)"""
    config = _config()
    assert supports(build_feature_specs(config), config.data_config)
    config = _config(edit=('separator: ";"', 'separator: "\u00a7"'))  # one character, two bytes in UTF-8
    assert not supports(build_feature_specs(config), config.data_config)


@pytest.mark.parametrize("edit, path", [
    (('feature_names: ["item", "wtags"]', 'feature_names: ["item", "hist"]'), "model_config.feature_groups[0].feature_names[1]"),
    (('seq_att_map { key: "item" hist_seq: "ihist" }', 'seq_att_map { key: "item" hist_seq: "item" }'),
     "model_config.feature_groups[0].sequence_features[2].seq_att_map[0].hist_seq[0]"),
    (('key: "item" hist_seq: "ihist"', 'key: "ihist" hist_seq: "ihist"'),
     "model_config.feature_groups[0].sequence_features[2].seq_att_map[0].key[0]"),
    (('key: ["item", "cate"]', 'key: ["item"]'), "model_config.feature_groups[0].sequence_features[0].seq_att_map"),
    (('attention_dnn { hidden_units: [3, 1] }', 'attention_dnn { hidden_units: [3, 2] }'),
     "model_config.din.attention_dnn.hidden_units"),
    (('din {', 'din { attention_normalizer: "relu"'), "model_config.din.attention_normalizer"),
    (('input_names: "item" embedding_dim: 2', 'input_names: "item" embedding_dim: 2 kv_separator: ":"'),
     "feature_configs[0].kv_separator"),
    (('sub_feature_type: RawFeature boundaries: [1, 10]', 'sub_feature_type: RawFeature embedding_name: "cate"'),
     "feature_configs[4].embedding_name"),  # numbers fed as numbers: a table of its own
    (('sub_feature_type: RawFeature boundaries: [1, 10]', 'sub_feature_type: RawFeature raw_input_dim: 2'),
     "feature_configs[4].seq_multi_sep"),  # two numbers a position need their separator
    (('sub_feature_type: RawFeature boundaries: [1, 10]', 'sub_feature_type: ComboFeature'),
     "feature_configs[4].sub_feature_type"),
    (('input_names: "cate" embedding_dim: 2', 'input_names: "cate" embedding_dim: 2 sequence_length: 3'),
     "feature_configs[1].sequence_length"),
    (('input_fields { input_name: "item" input_type: STRING }', 'input_fields { input_name: "item" input_type: INT64 }'),
     "feature_configs[2].embedding_name"),  # the item hashed as an int, its history as strings: two rows
    (('sequence_features { group_name: "ints" seq_att_map { key: "item" hist_seq: "ihist" } }', ''),
     "model_config.feature_groups"),  # ihist read by no attention
    (('separator: ";"', 'separator: ","'), "feature_configs[4].separator"),
])
def test_sequence_config_errors_name_the_field(edit, path):
    with pytest.raises(ConfigError) as raised:
        _config(edit=edit)
    assert raised.value.path == path, raised.value


def test_din_needs_a_sequence_group():
    text = """model_dir: "/tmp/unused" file_train_input { paths: "unused" }
data_config { input_fields { input_name: "label" input_type: INT32 } input_fields { input_name: "item" }
              label_fields: "label" }
feature_configs { input_names: "item" embedding_dim: 2 }
model_config { %s feature_groups { group_name: "all" feature_names: "item" } }""" % MODEL
    with pytest.raises(ConfigError) as raised:
        validate_pipeline_config(parse_pipeline_config(text))
    assert raised.value.path == "model_config.feature_groups" and "sequence_features" in str(raised.value)


def _model(config):
    specs = build_feature_specs(config)
    model = build_model(config, specs)
    model(empty_features(specs), training=False)
    return model, specs


def _upsert(model, table, keys, rows):
    model.tables.embeddings[table].params.upsert(tf.constant(keys, tf.int64), tf.constant(rows, tf.float32))


def test_tables_give_sequence_rows_in_order_with_zeros_past_each_length_and_weighted_means():
    model, _ = _model(_config())
    a, b = _hash("a", "b")
    t, u = _hash("t", "u")
    _upsert(model, "item", [a, b], [[1, 2], [3, 4]])
    _upsert(model, "wtags", [t, u], [[1, 0], [0, 1]])
    batch = _parser().parse([b"1,a,x,b|a|zz,x|y|z,,t:1|u:3,", b"0,a,x,,,,t:2,"])
    rows = model.tables(batch.features, training=False)
    np.testing.assert_allclose(rows["hist"].numpy(), [[[3, 4], [1, 2], [0, 0]], [[0, 0], [0, 0], [0, 0]]])
    np.testing.assert_allclose(rows["wtags"].numpy(), [[0.25, 0.75], [1, 0]])  # sum(w e) / sum(w)


def test_training_creates_rows_for_sequence_ids_but_never_for_padding_positions(tmp_path):
    from easyonline.jobs.online_train import build_trainer  # pylint: disable=g-import-not-at-top
    config = _config()
    config.model_dir = str(tmp_path)
    trainer = build_trainer(config, online=False)
    # the trainer parses with CsvParser(its specs): the module's parser of these specs (its decode graph traced once)
    assert type(trainer.parser) is CsvParser and trainer.specs == build_feature_specs(_config())
    batch = _parser().parse([b"1,a,x,b|none|c,x|y,,,", b"0,d,y,,,,,"])
    trainer.train_batch(batch.features, batch.labels)
    keys = sorted(trainer.model.tables.embeddings["item"].params.export()[0].numpy().tolist())
    assert keys == sorted(_hash("a", "b", "c", "d"))  # targets and history in one table; "none" is padding


def _attention(normalizer, need_key=True, key_width=2, seq_width=2, transform=""):
    layer = TargetAttention(MLP([3], seed=1), tf.keras.layers.Dense(1, kernel_initializer=tf.keras.initializers.
                                                                    GlorotUniform(seed=2)),
                            normalizer, need_key, key_width, seq_width, transform=transform)
    return layer


def _by_hand(layer, keys, seq, lengths, normalizer):
    dense, score = layer.hidden._layers[0], layer.score
    out = []
    for k, s, n in zip(keys, seq, lengths):
        q = np.tile(k, (len(s), 1))
        x = np.concatenate([q, s, q - s, q * s], 1)
        h = np.maximum(x @ dense.kernel.numpy() + dense.bias.numpy(), 0)
        z = (h @ score.kernel.numpy() + score.bias.numpy())[:, 0]
        if normalizer == "softmax" and n == 0:  # every position masked alike: uniform over the padding
            w = np.full(len(s), 1.0 / len(s))
        elif normalizer == "softmax":
            e = np.exp(z[:n] - z[:n].max())
            w = np.concatenate([e / e.sum(), np.zeros(len(s) - n)])
        else:
            w = np.where(np.arange(len(s)) < n, 1 / (1 + np.exp(-z / np.sqrt(s.shape[1]))), 0)
        out.append(np.concatenate([(w[:, None] * s).sum(0), k]))
    return np.array(out)


@pytest.mark.parametrize("normalizer", ["softmax", "sigmoid"])
def test_target_attention_weighs_the_positions_of_each_sample_as_by_hand(normalizer):
    layer = _attention(normalizer)
    keys = np.array([[0.5, -1.0], [1.0, 2.0], [0.3, 0.3]], np.float32)
    seq = np.array([[[1, 2], [3, 4], [0, 0]], [[-1, 0.5], [2, 2], [1, 1]], [[0, 0], [0, 0], [0, 0]]], np.float32)
    lengths = np.array([2, 3, 0])
    got = layer(tf.constant(keys), tf.constant(seq), tf.constant(lengths, tf.int64)).numpy()
    assert got.shape == (3, layer.output_width) == (3, 4)
    np.testing.assert_allclose(got, _by_hand(layer, keys, seq, lengths, normalizer), rtol=1e-5, atol=1e-6)
    # padding positions count for nothing: changing them changes no output
    seq[0, 2] = [9, 9]
    again = layer(tf.constant(keys), tf.constant(seq), tf.constant(lengths, tf.int64)).numpy()
    np.testing.assert_allclose(again[0], got[0], rtol=1e-6)


def test_narrow_keys_are_padded_to_the_sequence_width():
    layer = _attention("softmax", key_width=1, seq_width=2, transform="pad")
    out = layer(tf.constant([[2.0]]), tf.constant([[[1.0, 1.0]]]), tf.constant([1], tf.int64)).numpy()
    np.testing.assert_allclose(out, [[1.0, 1.0, 2.0, 0.0]])  # one position: weight 1; the key padded with 0


def test_every_sequence_model_builds_its_attentions_over_the_groups_sequence_input():
    for model_text in (MODEL, 'model_class: "DNN"', 'model_class: "MultiTower" multi_tower { towers { input: "all" '
                                                    'dnn { hidden_units: [4] } } }'):
        model, _ = _model(_config(model=model_text))
        assert sorted(model.attentions) == ["din", "ints", "nums"]
        batch = _parser(model=model_text).parse([b"1,a,x,b|c,x|y,1;2,t:1,4|5", b"0,a,x,,,,,"])
        assert batch.size == 2
        parts = model.sequence_input("din", model.embed(batch.features)[0])
        assert parts.keys.shape == (2, 4) and parts.sequence.shape == (2, 2, 4)
        assert parts.lengths.numpy().tolist() == [2, 0]
        width = model.group_input("all", model.embed(batch.features)[0], None).shape[1]
        assert width == 2 + 2 + sum(a.output_width for a in model.attentions.values()) == 2 + 2 + 8 + 4 + 4
        scores, = model(batch.features).values()
        assert np.all(np.isfinite(scores.numpy()))


EASYREC_MULTI_TOWER_DIN = '''
model_dir: "/tmp/unused"
file_train_input { paths: "unused" }
data_config {
  input_fields { input_name: "label" input_type: INT32 }
  input_fields { input_name: "user" input_type: STRING }
  input_fields { input_name: "brand" input_type: STRING }
  input_fields { input_name: "brand_list" input_type: STRING }
  label_fields: "label"
}
feature_config: {
  features: { input_names: "user" embedding_dim: 4 }
  features: { input_names: "brand" embedding_dim: 4 }
  features: { input_names: "brand_list" feature_type: SequenceFeature separator: "|" embedding_dim: 4 }
}
model_config: {
  model_class: 'MultiTowerDIN'
  feature_groups: { group_name: 'user' feature_names: 'user' wide_deep: DEEP }
  seq_att_groups: {
    group_name: "din"  # a comment with a } brace
    seq_att_map: { key: "brand" hist_seq: "brand_list" }
  }
  multi_tower {
    towers { input: "user" dnn { hidden_units: [4] } }
    din_towers { input: "din" dnn { hidden_units: [4, 1] } }
    final_dnn { hidden_units: [4] }
  }
}
'''


def test_easyrec_multi_tower_din_reads_as_multi_tower_din_with_its_attention_in_a_feature_group():
    from easyonline.config.easyrec_compat import normalize  # pylint: disable=g-import-not-at-top
    config = parse_pipeline_config(EASYREC_MULTI_TOWER_DIN)
    normalize(config)
    validate_pipeline_config(config)
    model_config = config.model_config
    assert model_config.WhichOneof("model") == "multi_tower_din"
    assert [t.input for t in model_config.multi_tower_din.din_towers] == ["din"]
    group = model_config.feature_groups[1]
    assert group.group_name == "din" and not group.feature_names
    assert list(group.sequence_features[0].seq_att_map[0].hist_seq) == ["brand_list"]
    model, specs = _model(config)
    batch = CsvParser(specs).parse([b"1,u,b1,b1|b2", b"0,v,b2,"])
    logits, = model(batch.features).values()
    assert logits.shape == (2,)
    assert "din_dnn" in " ".join(v.name for v in model.trainable_variables)  # the din tower's attention


def test_easyrec_numeric_sequences_with_num_buckets_read_as_easyrec_buckets_them():
    """EasyRec's ``num_buckets`` on a sequence of numbers: with max_val > min_val the values are scaled to [0, 1]
    and bucketized at i / num_buckets (here: the same boundaries on the values themselves); without, each value
    is an integer id."""
    from easyonline.config.easyrec_compat import normalize  # pylint: disable=g-import-not-at-top
    scaled = ('sub_feature_type: RawFeature boundaries: [1, 10]',
              'sub_feature_type: RawFeature num_buckets: 4 min_val: 20 max_val: 100')
    text = CONFIG % ("", MODEL)
    config = parse_pipeline_config(text.replace(*scaled).replace(
        'input_names: "hist" feature_type: SequenceFeature',
        'input_names: "hist" feature_type: SequenceFeature sub_feature_type: RawFeature num_buckets: 50'))
    normalize(config)
    validate_pipeline_config(config)
    hist, nums = (f for f in config.feature_configs if f.input_names[0] in ("hist", "nums"))
    assert list(nums.boundaries) == [20, 40, 60, 80] and not nums.HasField("max_val")
    assert hist.sub_feature_type == pipeline_pb2.FeatureConfig.IdFeature and not hist.boundaries
    batch = CsvParser(build_feature_specs(config)).parse([b"1,a,x,7|9,x|y,5;20;39.9;40;99;100;250,,"])
    assert not batch.rejected
    # EasyRec: (x - 20) / 80 bucketized at [0, .25, .5, .75]: 5 -> 0, 20 and 39.9 -> 1, 40 -> 2, 99 ... -> 4
    assert batch.features["nums"].to_list() == [[0, 1, 1, 2, 4, 4, 4]]
    assert batch.features["hist"].to_list() == [_hash("7", "9")]  # ids, a row per value


MULTI = ('max_seq_len: 4 sequence_length: 3 }', 'max_seq_len: 4 sequence_length: 3 seq_multi_sep: ";" }')


def test_several_values_a_position_come_flat_with_their_positions_and_positions_count_for_length():
    """seq_multi_sep (EasyRec's): hist_cate's positions hold several values; the attention's sequences must have
    as many positions (not ids); empty values and positions left empty are dropped; the first 3 positions kept."""
    parser = _parser(edit=MULTI)
    batch = parser.parse([b"1,a,x,a|b|c,x;y|z||;|w,,,",
                          b"0,b,y,a|b,x;y;z|q,,,",  # 4 ids, 2 positions: as long as hist
                          b"0,b,y,a|b|c|d,x|y|z|w|v,,,",  # both cut to 3 positions
                          b"1,b,y,a|b,x|y|z,,,"])  # 3 positions against 2: rejected
    assert batch.size == 3 and len(batch.rejected) == 1
    assert "hist has 2 ids, hist_cate 3" in batch.rejected[0][1]
    assert batch.features["hist_cate"].to_list() == [_hash("x", "y", "z", "w"), _hash("x", "y", "z", "q"),
                                                     _hash("x", "y", "z")]
    assert batch.features["hist_cate/positions"].to_list() == [[0, 0, 1, 2], [0, 0, 0, 1], [0, 1, 2]]
    record = {"label": 1, "item": "a", "cate": "x", "hist": ["a", "b", "c"], "hist_cate": [["x", "y"], "z", ["w"]]}
    config = _config(edit=MULTI)
    config.data_config.input_format = pipeline_pb2.DataConfig.JSON
    from_json = make_parser(build_feature_specs(config), config.data_config).parse([json.dumps(record).encode()])
    assert from_json.features["hist_cate"].to_list() == [_hash("x", "y", "z", "w")]
    assert from_json.features["hist_cate/positions"].to_list() == [[0, 0, 1, 2]]
    assert not supports(build_feature_specs(config), config.data_config)  # the general parser takes them
    config.data_config.input_format = pipeline_pb2.DataConfig.CSV
    assert array_path_refusal(build_feature_specs(config), config.data_config) == \
        "hist_cate has several values a position"  # (the trainer logs why at start)


def test_a_bad_value_at_a_position_rejects_its_sample_alone():
    parser = _parser(edit=('input_names: "ihist" feature_type: SequenceFeature embedding_dim: 2 }',
                           'input_names: "ihist" feature_type: SequenceFeature embedding_dim: 2 seq_multi_sep: ";" }'))
    batch = parser.parse([b"1,a,x,,,,,5;6|7", b"0,a,x,,,,,5;z|7"])
    assert batch.size == 1 and batch.features["ihist"].to_list() == [[5, 6, 7]]
    assert batch.features["ihist/positions"].to_list() == [[0, 0, 1]]
    assert rejection_kind(batch.rejected[0][1]) == BAD_SEQUENCE and "ihist" in batch.rejected[0][1]


@pytest.mark.parametrize("combiner, first", [("mean", [2, 3]), ("sum", [4, 6])])
def test_a_position_of_several_ids_is_their_combiner_of_rows(combiner, first):
    edit = (MULTI[0], MULTI[1].replace("}", f'combiner: "{combiner}" }}'))
    model, _ = _model(_config(edit=edit))
    x, y, z = _hash("x", "y", "z")
    _upsert(model, "cate", [x, y, z], [[1, 2], [3, 4], [5, 6]])
    batch = _parser(edit=edit).parse([b"1,a,x,a|b,x;y|z,,,", b"0,a,x,,,,,"])
    rows = model.tables(batch.features, training=False)["hist_cate"].numpy()
    np.testing.assert_allclose(rows, [[first, [5, 6]], [[0, 0], [0, 0]]])
    logits, = model(batch.features).values()
    assert logits.shape == (2,)  # the attention reads them as any sequence


@pytest.mark.parametrize("edit, path", [
    (('input_names: "cate" embedding_dim: 2', 'input_names: "cate" embedding_dim: 2 seq_multi_sep: ";"'),
     "feature_configs[1].seq_multi_sep"),  # not a sequence
    ((MULTI[0], MULTI[1].replace('";"', '"|"')), "feature_configs[3].seq_multi_sep"),  # its separator
    ((MULTI[0], MULTI[1].replace("}", 'combiner: "max" }')), "feature_configs[3].combiner"),
])
def test_seq_multi_sep_errors_name_the_field(edit, path):
    with pytest.raises(ConfigError) as raised:
        _config(edit=edit)
    assert raised.value.path == path, raised.value


RAW = ('sub_feature_type: RawFeature boundaries: [1, 10]', 'sub_feature_type: RawFeature raw_input_dim: 2 seq_multi_sep: ":"')


def test_numbers_fed_as_numbers_project_each_position_and_a_bad_one_rejects_its_sample():
    """A SequenceFeature of numbers without boundaries (EasyRec's raw sequence): each position's raw_input_dim
    numbers weigh the rows of columns 0 .. raw_input_dim - 1 of its own table (a learned projection)."""
    model, specs = _model(_config(edit=RAW))
    _upsert(model, "nums", [0, 1], [[1, 0], [0, 10]])
    batch = CsvParser(specs).parse([b"1,a,x,,,0.5:2;-1:0;;3:.5,,", b"0,a,x,,,,,",
                                    b"0,a,x,,,4,,",  # fewer numbers: the first columns (EasyRec's zeros after)
                                    b"0,a,x,,,1:2:3;3,,", b"0,a,x,,,1:zz,,", b"0,a,x,,,1e400,,",  # three numbers,
                                    b"1,a,x,,,:;4:1,,"])  # a word, not finite: rejected; a position of no number
    assert batch.size == 4 and [rejection_kind(r) for _, r in batch.rejected] == [BAD_SEQUENCE] * 3
    assert "at most 2 number(s) a position, joined by ':'" in batch.rejected[0][1]
    assert batch.features["nums"].to_list() == [[0, 1, 0, 1, 0, 1], [], [0], [0, 1]]
    assert batch.features["nums/positions"].to_list() == [[0, 0, 1, 1, 2, 2], [], [0], [0, 0]]
    rows = model.tables(batch.features, training=False)["nums"].numpy()
    # mean (the default combiner) over the two columns of number * row: (0.5 * [1, 0] + 2 * [0, 10]) / 2, ...
    np.testing.assert_allclose(rows, [[[0.25, 10], [-0.5, 0], [1.5, 2.5]], [[0, 0], [0, 0], [0, 0]],
                                      [[2, 0], [0, 0], [0, 0]], [[2, 5], [0, 0], [0, 0]]])
    logits, = model(batch.features).values()
    assert logits.shape == (4,)
    assert array_path_refusal(specs, _config(edit=RAW).data_config) == "nums is a sequence of numbers fed as numbers"
    with pytest.raises(ConfigError) as raised:  # its table is its own: no other feature's ids among its columns
        validate_pipeline_config(parse_pipeline_config((CONFIG % ("", MODEL)).replace(*RAW).replace(
            'input_names: "ihist" feature_type: SequenceFeature embedding_dim: 2',
            'input_names: "ihist" feature_type: SequenceFeature embedding_dim: 2 embedding_name: "nums"')))
    assert raised.value.path == "feature_configs[6].embedding_name", raised.value
