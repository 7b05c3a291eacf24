"""MultiTowerBST: its transformer layer checked by hand (masking, truncation, the empty sequence), its config
errors, and EasyRec's form (multi_tower { bst_towers } and seq_att_groups) read and scored."""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from easyonline.config import ConfigError, parse_pipeline_config  # noqa: E402
from easyonline.config.easyrec_compat import normalize  # noqa: E402
from easyonline.config.validate import validate_pipeline_config  # noqa: E402
from easyonline.features import CsvParser, build_feature_specs  # noqa: E402
from easyonline.features.signature import empty_features  # noqa: E402
from easyonline.models.builder import build_model  # noqa: E402
from easyonline.models.sequence_transformer import SequenceTransformer  # noqa: E402

# label,user,brand,cate,brand_list,cate_list: EasyRec's form, as its bst_on_taobao sample (two seq_att_maps)
EASYREC_BST = '''
model_dir: "/tmp/unused"
file_train_input { paths: "unused" }
data_config {
  input_fields { input_name: "label" input_type: INT32 }
  input_fields { input_name: "user" input_type: STRING }
  input_fields { input_name: "brand" input_type: STRING }
  input_fields { input_name: "cate" input_type: STRING }
  input_fields { input_name: "brand_list" input_type: STRING }
  input_fields { input_name: "cate_list" input_type: STRING }
  label_fields: "label"
}
feature_config: {
  features: { input_names: "user" embedding_dim: 4 }
  features: { input_names: "brand" embedding_dim: 4 }
  features: { input_names: "cate" embedding_dim: 2 }
  features: { input_names: "brand_list" feature_type: SequenceFeature separator: "|" embedding_dim: 4 }
  features: { input_names: "cate_list" feature_type: SequenceFeature separator: "|" embedding_dim: 2 }
}
model_config: {
  model_class: 'MultiTowerBST'
  feature_groups: { group_name: 'user' feature_names: 'user' wide_deep: DEEP }
  seq_att_groups: {
    group_name: "bst"
    seq_att_map: { key: "brand" hist_seq: "brand_list" }
    seq_att_map: { key: "cate" hist_seq: "cate_list" }
  }
  multi_tower {
    towers { input: "user" dnn { hidden_units: [4] } }
    bst_towers { input: "bst" seq_len: 4 multi_head_size: 3 }
    final_dnn { hidden_units: [4] }
  }
}
'''


def _config(edit=None):
    text = EASYREC_BST.replace(*edit) if edit else EASYREC_BST
    config = parse_pipeline_config(text)
    normalize(config)
    validate_pipeline_config(config)
    return config


def _model(config):
    specs = build_feature_specs(config)
    model = build_model(config, specs)
    model(empty_features(specs), training=False)
    return model, specs


def _layer_norm(x):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)  # (scale 1, offset 0 at start)


def _by_hand(layer, keys, seq, lengths):
    """EasyRec's MultiTowerBST.bst in numpy, for one sample at a time."""
    def dense(d, x):
        return x @ d.kernel.numpy() + d.bias.numpy()
    out = []
    hist = layer.seq_len - 1
    for k, s, n in zip(keys, seq, lengths):
        s = np.concatenate([s[:min(n, hist)], np.zeros((hist - min(n, hist), s.shape[1]))])
        x = np.concatenate([s, k[None]])
        valid = np.arange(layer.seq_len) < min(n, hist)
        valid[-1] = True
        heads = []
        for h, (q, kk, v) in enumerate(layer.projections):
            part = x[:, h * layer.head_width:(h + 1) * layer.head_width]
            scores = np.where(valid[None, :], dense(q, part) @ dense(kk, part).T, -np.inf)
            w = np.exp(scores - scores.max(1, keepdims=True))
            heads.append((w / w.sum(1, keepdims=True)) @ dense(v, part))
        attended = _layer_norm(x + dense(layer.head_output, np.concatenate(heads, 1)))
        out.append(_layer_norm(attended + dense(layer.feed_forward, attended)).reshape(-1))
    return np.array(out)


def test_the_transformer_layer_computes_easyrecs_bst_and_padding_changes_nothing():
    layer = SequenceTransformer(seq_len=4, heads=2, width=4, seed=3)
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(4, 4)).astype(np.float32)
    seq = rng.normal(size=(4, 5, 4)).astype(np.float32)
    lengths = np.array([2, 5, 0, 3])  # 5: cut to the first seq_len - 1 = 3; 0: the target alone
    got = layer(tf.constant(keys), tf.constant(seq), tf.constant(lengths, tf.int64)).numpy()
    assert got.shape == (4, layer.output_width) == (4, 16)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, _by_hand(layer, keys, seq, lengths), rtol=1e-4, atol=1e-5)
    # whatever the padding holds (past each length, or past seq_len - 1), and however long the batch's
    # sequences are, a sample's output is the same
    seq[0, 2:] = 9.0
    seq[2] = -7.0
    seq[1, 3:] = 5.0
    again = layer(tf.constant(keys), tf.constant(seq), tf.constant(lengths, tf.int64)).numpy()
    np.testing.assert_allclose(again, got, rtol=1e-6)
    short = layer(tf.constant(keys[:1]), tf.constant(seq[:1, :2]), tf.constant(lengths[:1], tf.int64)).numpy()
    np.testing.assert_allclose(short, got[:1], rtol=1e-5, atol=1e-6)
    # the history counts: another valid position changes the output
    seq[0, 1] += 1.0
    assert not np.allclose(layer(tf.constant(keys), tf.constant(seq), tf.constant(lengths, tf.int64)).numpy()[0],
                           got[0], atol=1e-4)


def test_easyrecs_multi_tower_bst_reads_as_multi_tower_bst_and_scores_an_empty_sequence():
    config = _config()
    model_config = config.model_config
    assert model_config.WhichOneof("model") == "multi_tower_bst"
    tower = model_config.multi_tower_bst.bst_towers[0]
    assert (tower.input, tower.seq_len, tower.multi_head_size) == ("bst", 4, 3)
    assert [g.group_name for g in model_config.feature_groups] == ["user", "bst"]
    model, specs = _model(config)
    lines = [b"1,u,b1,c1,b1|b2|b3|b4|b5,c1|c2|c3|c4|c5", b"0,v,b2,c2,,", b"1,w,b3,c3,b7,c7"]
    batch = CsvParser(specs).parse(lines)
    scores, = model(batch.features).values()
    scores = scores.numpy()
    assert scores.shape == (3,) and np.all(np.isfinite(scores))
    assert model.bst_towers[0].output_width == 4 * 6  # seq_len positions of [brand, cate] embeddings
    names = " ".join(v.name for v in model.trainable_variables)
    assert "bst_bst/head_2_query" in names and "bst_bst/add_and_norm_2" in names, names
    # a sample scores the same alone as next to a longer history (padding is masked)
    for i, line in enumerate(lines):
        alone, = model(CsvParser(specs).parse([line]).features).values()
        alone = alone.numpy()
        np.testing.assert_allclose(alone, scores[i:i + 1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("edit, path, words", [
    (('bst_towers { input: "bst"', 'bst_towers { input: "nope"'), "model_config.multi_tower_bst.bst_towers[0].input",
     "not a sequence group"),
    (("seq_len: 4", "seq_len: 0"), "model_config.multi_tower_bst.bst_towers[0].seq_len", "at least 1"),
    (("multi_head_size: 3", "multi_head_size: 4"), "model_config.multi_tower_bst.bst_towers[0].multi_head_size",
     "do not divide"),
    (("multi_head_size: 3", "multi_head_size: 0"), "model_config.multi_tower_bst.bst_towers[0].multi_head_size",
     "at least 1"),
    (('key: "cate" hist_seq: "cate_list"', 'key: "cate" hist_seq: "cate_list" aux_hist_seq: "brand_list"'),
     "model_config.multi_tower_bst.bst_towers[0].input", "aux_hist_seq"),
    (('seq_att_map: { key: "cate" hist_seq: "cate_list" }',  # keys wider than the sequence: target attention only
      'seq_att_map: { key: "user" hist_seq: "cate_list" } allow_key_transform: true'),
     "model_config.multi_tower_bst.bst_towers[0].input", "as wide"),
    (('towers { input: "user" dnn { hidden_units: [4] } }\n    bst_towers { input: "bst" seq_len: 4 '
      'multi_head_size: 3 }', ''), "model_config.multi_tower_bst.towers", "at least one"),
])
def test_bst_config_errors_name_the_field(edit, path, words):
    with pytest.raises(ConfigError) as raised:
        _config(edit)
    assert raised.value.path == path and words in str(raised.value), raised.value
