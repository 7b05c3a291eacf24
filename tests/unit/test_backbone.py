"""EasyRec's backbone (model_class RankModel): the BST layer checked by hand, the block graph's order and
outputs, every form it does not run refused naming its field, and EasyRec's DIN backbone sample's form read,
built and scored, its sequence group's positions checked by the parser."""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from easyonline.config import ConfigError, parse_pipeline_config  # noqa: E402
from easyonline.config.easyrec_compat import normalize  # noqa: E402
from easyonline.config.validate import validate_pipeline_config  # noqa: E402
from easyonline.core.rejections import BAD_SEQUENCE, rejection_kind  # noqa: E402
from easyonline.features import CsvParser, build_feature_specs  # noqa: E402
from easyonline.features.sequence_settings import validate_sequence_groups  # noqa: E402
from easyonline.features.signature import empty_features  # noqa: E402
from easyonline.models.backbone.bst_encoder import BSTEncoder  # noqa: E402
from easyonline.models.backbone.contrastive import AuxiliaryLoss, SeqAugment  # noqa: E402
from easyonline.models.backbone.graph import BLOCKS, block_graph  # noqa: E402
from easyonline.models.backbone.masknet import MaskNet  # noqa: E402
from easyonline.models.backbone.senet import SENet  # noqa: E402
from easyonline.models.backbone_rank_model import BLOCK_BUILDERS  # noqa: E402
from easyonline.models.builder import build_model  # noqa: E402
from easyonline.models.base import SequenceInput  # noqa: E402
from easyonline.protos import pipeline_pb2  # noqa: E402

# label,user,age,brand,cate,brand_list,cate_list in the form of EasyRec's din_backbone_on_taobao sample
EASYREC_DIN_BACKBONE = '''
model_dir: "/tmp/unused"
file_train_input { paths: "unused" }
data_config {
  input_fields { input_name: "label" input_type: INT32 }
  input_fields { input_name: "user" input_type: STRING }
  input_fields { input_name: "age" input_type: INT32 }
  input_fields { input_name: "brand" input_type: STRING }
  input_fields { input_name: "cate" input_type: STRING }
  input_fields { input_name: "brand_list" input_type: STRING }
  input_fields { input_name: "cate_list" input_type: STRING }
  label_fields: "label"
}
feature_config: {
  features: { input_names: "user" feature_type: IdFeature embedding_dim: 4 hash_bucket_size: 100 }
  features: { input_names: "age" feature_type: RawFeature }
  features: { input_names: "brand" feature_type: IdFeature embedding_dim: 4 hash_bucket_size: 100 }
  features: { input_names: "cate" feature_type: IdFeature embedding_dim: 2 hash_bucket_size: 100 }
  features: { input_names: "brand_list" feature_type: SequenceFeature separator: "|" embedding_dim: 4
              embedding_name: "brand" sequence_length: 5 }
  features: { input_names: "cate_list" feature_type: SequenceFeature separator: "|" embedding_dim: 2
              embedding_name: "cate" sequence_length: 5 }
}
model_config: {
  model_name: 'DIN'
  model_class: 'RankModel'
  feature_groups: { group_name: 'normal' feature_names: 'user' feature_names: 'age' feature_names: 'brand'
                    wide_deep: DEEP }
  feature_groups: { group_name: 'sequence' feature_names: "brand" feature_names: "cate"
                    feature_names: "brand_list" feature_names: "cate_list" wide_deep: DEEP }
  backbone {
    blocks { name: 'deep' inputs { feature_group_name: 'normal' } keras_layer { class_name: 'MLP' mlp {
      hidden_units: [8, 4] } } }
    blocks { name: 'seq_input' inputs { feature_group_name: 'sequence' } input_layer {
      output_seq_and_normal_feature: true } }
    blocks { name: 'DIN' inputs { block_name: 'seq_input' } keras_layer { class_name: 'DIN' din {
      attention_dnn { hidden_units: 4 hidden_units: 1 activation: "dice" } need_target_feature: true } } }
    top_mlp { hidden_units: [8, 4] }
  }
  model_params { l2_regularization: 0 }
  embedding_regularization: 0
}
'''


def _edited_config(edits, own_backbone: bool = False, without_sequences: bool = False, validate: bool = True):
    """EASYREC_DIN_BACKBONE with ``edits`` ((old, new) pairs) applied, parsed, normalized and (``validate``)
    validated. ``own_backbone``: the edits bring their own blocks, ending at an ``  unused {`` marker, and the
    DIN sample's blocks after it are dropped; ``without_sequences``: the sample's SequenceFeatures are dropped."""
    text = EASYREC_DIN_BACKBONE
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    if own_backbone:
        text = text[:text.index("  unused {")] + text[text.index("  model_params {"):]
    if without_sequences:
        text = re.sub(r'  features: \{ input_names: "(brand|cate)_list".*?\}\n', "", text, flags=re.S)
        text = text.replace('feature_names: "brand_list" feature_names: "cate_list"', "")
    config = parse_pipeline_config(text)
    normalize(config)
    if validate:
        validate_pipeline_config(config)
    return config


def _config(*edits):
    return _edited_config(edits)


def test_easyrecs_din_backbone_form_builds_scores_and_the_parser_checks_its_sequence_positions():
    config = _config()
    specs = build_feature_specs(config)
    model = build_model(config, specs)
    assert [node.name for node in model.graph.order] == ["deep", "seq_input", "DIN"]
    assert model.graph.outputs == ("deep", "DIN")  # every block no other block reads
    model(empty_features(specs), training=False)
    parser = CsvParser(specs)
    parsed = parser.parse([b"1,u1,30,b1,c1,b1|b2,c1|c2", b"0,u2,20,b2,c2,,", b"1,u3,40,b3,c3,b1|b2|b3,c1|c2"])
    assert [rejection_kind(reason) for _, reason in parsed.rejected] == [BAD_SEQUENCE]  # (3 brands, 2 categories)
    other = parser.parse([b"1,u1,30,b1,c1,b7|b2,c1|c2"])
    brands = model.tables.embeddings["brand"].params  # (rows for the brands: unknown ids score as zeros)
    ids = np.unique(np.concatenate([b.features["brand_list"].flat_values.numpy() for b in (parsed, other)]))
    brands.upsert(tf.constant(ids, tf.int64), tf.constant(np.random.default_rng(0).normal(size=(len(ids), 4)),
                                                         tf.float32))
    probs = model.task_outputs(model(parsed.features, training=False))["probs"].numpy()
    assert probs.shape == (2,) and np.all(np.isfinite(probs))
    # the history counts: another brand in it changes the score
    assert abs(model.task_outputs(model(other.features, training=False))["probs"].numpy()[0] - probs[0]) > 1e-4


@pytest.mark.parametrize("edit,field,words", [
    (("keras_layer { class_name: 'DIN' din {", "keras_layer { class_name: 'FM' din {"),
     "model_config.backbone.blocks[2].keras_layer.class_name", "'FM' is not one of"),
    (("blocks { name: 'DIN' inputs { block_name: 'seq_input' }", "blocks { name: 'DIN' inputs { block_name: 'deep' }"),
     "model_config.backbone.blocks[2].inputs", "layer DIN reads a sequence input"),
    (("blocks { name: 'deep' inputs { feature_group_name: 'normal' }",
      "blocks { name: 'deep' inputs { block_name: 'seq_input' }"),
     "model_config.backbone.blocks[0].inputs", "layer MLP reads a tensor"),
    (("blocks { name: 'deep' inputs { feature_group_name: 'normal' }",
      "blocks { name: 'deep' inputs { feature_group_name: 'sequence' }"),
     "model_config.backbone.blocks[0].inputs[0].feature_group_name", "holds SequenceFeature(s)"),
    (("blocks { name: 'deep' inputs { feature_group_name: 'normal' }",
      "blocks { name: 'deep' inputs { feature_group_name: 'normal' input_fn: 'lambda x: x' }"),
     "model_config.backbone.blocks[0].inputs[0].input_fn", "Python expressions"),
    (("    top_mlp {", "    blocks { name: 'x' inputs { block_name: 'y' } keras_layer { class_name: 'MLP' mlp { "
      "hidden_units: 2 } } }\n    blocks { name: 'y' inputs { block_name: 'x' } keras_layer { class_name: 'MLP' mlp { "
      "hidden_units: 2 } } }\n    top_mlp {"), "model_config.backbone.blocks", "cycle: x, y"),
    (("top_mlp {", "concat_blocks: 'dnn' top_mlp {"), "model_config.backbone.concat_blocks[0]", "'dnn' is not a block"),
    (("top_mlp {", "concat_blocks: 'seq_input' top_mlp {"), "model_config.backbone.concat_blocks[0]",
     "gives a sequence"),
    (("keras_layer { class_name: 'MLP' mlp {\n      hidden_units: [8, 4] } }", "lambda { expression: 'lambda x: x' }"),
     "model_config.backbone.blocks[0].lambda", "Python lambda layers"),
    (("hidden_units: 4 hidden_units: 1 activation", "hidden_units: 4 hidden_units: 2 activation"),
     "model_config.backbone.blocks[2].keras_layer.din.attention_dnn.hidden_units", "one unit"),
    (("feature_names: \"brand\" feature_names: \"cate\"\n", "feature_names: \"brand\" feature_names: \"cate\" "
      "feature_names: \"user\"\n"), "model_config.backbone.blocks[2].keras_layer", "no wider"),
    (("output_seq_and_normal_feature: true }", "output_seq_and_normal_feature: true only_output_3d_tensor: true }"),
     "model_config.backbone.blocks[1].input_layer.only_output_3d_tensor", "is not supported here"),
    (("  model_params { l2_regularization: 0 }\n", ""), None, None),
])
def test_forms_the_backbone_does_not_run_are_refused_naming_their_field(edit, field, words):
    if field is None:  # (model_params may be left out)
        _config(edit)
        return
    with pytest.raises(ConfigError) as error:
        _config(edit)
    assert error.value.path == field, error.value
    assert words in str(error.value)


def test_a_backbone_of_another_model_class_or_a_rank_model_without_one_is_refused():
    with pytest.raises(ConfigError) as error:
        _config(("model_class: 'RankModel'", "model_class: 'DNN'"))
    assert error.value.path == "model_config.backbone" and "RankModel" in str(error.value)
    text = EASYREC_DIN_BACKBONE
    without = text[:text.index("  backbone {")] + text[text.index("  model_params"):]
    config = parse_pipeline_config(without.replace("feature_names: \"brand_list\" feature_names: \"cate_list\"", ""))
    normalize(config)
    with pytest.raises(ConfigError) as error:
        validate_pipeline_config(config)
    assert error.value.path == "model_config.backbone"


def test_blocks_may_come_in_any_order_and_the_outputs_are_the_unread_blocks_or_the_named_ones():
    backbone = pipeline_pb2.Backbone()
    for name, inputs in (("top", ["a", "b"]), ("a", ["g"]), ("b", ["a"])):
        block = backbone.blocks.add(name=name)
        for item in inputs:
            block.inputs.add(**({"feature_group_name": item} if item == "g" else {"block_name": item}))
        block.keras_layer.class_name = "MLP"
        block.keras_layer.mlp.hidden_units.append(2)
    groups = {"g": pipeline_pb2.FeatureGroup(group_name="g", feature_names=["x"])}
    graph = block_graph(backbone, groups, [], {"x": 4})
    assert [n.name for n in graph.order] == ["top", "a", "b"] and graph.outputs == ("top",)  # (run when read)
    backbone.concat_blocks.extend(["a", "top"])
    assert block_graph(backbone, groups, [], {"x": 4}).outputs == ("a", "top")


def _layer_norm(x):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)  # (scale 1, offset 0 at start)


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _bst_by_hand(layer, sequence, lengths, target):
    """BERT's encoder as EasyRec's BST layer runs it (target at the head, one transformer layer), in numpy,
    one sample at a time: the target's position's output."""
    def dense(d, x):
        return x @ d.kernel.numpy() + (d.bias.numpy() if d.bias is not None else 0)
    out = []
    block = layer.layers_[0]
    heads, width = layer.heads, layer.hidden // layer.heads
    for s, n, t in zip(sequence, lengths, target):
        n = min(n, layer.max_positions)
        s = np.maximum(dense(layer.seq_project, s[:n]), 0)
        x = np.concatenate([t[None], s]) + layer.position_embeddings.numpy()[:n + 1]
        x = _layer_norm(x)
        q, k, v = (dense(block[name], x) for name in ("query", "key", "value"))
        context = []
        for h in range(heads):
            cols = slice(h * width, (h + 1) * width)
            scores = q[:, cols] @ k[:, cols].T / math.sqrt(width)
            w = np.exp(scores - scores.max(1, keepdims=True))
            context.append((w / w.sum(1, keepdims=True)) @ v[:, cols])
        attended = _layer_norm(x + dense(block["attention_output"], np.concatenate(context, 1)))
        x = _layer_norm(attended + dense(block["output"], _gelu(dense(block["intermediate"], attended))))
        out.append(x[0])
    return np.array(out)


def _bst(**settings):
    values = dict(hidden_size=4, num_hidden_layers=1, num_attention_heads=2, intermediate_size=6,
                  max_position_embeddings=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                  output_all_token_embeddings=False)
    values.update(settings)
    return pipeline_pb2.BSTEncoder(**values)


def test_the_bst_layer_is_berts_encoder_over_the_target_and_the_history_and_padding_changes_nothing():
    layer = BSTEncoder(_bst(), seq_width=6, target_width=4, seed=5)
    rng = np.random.default_rng(0)
    sequence = rng.normal(size=(4, 5, 6)).astype(np.float32)
    target = rng.normal(size=(4, 4)).astype(np.float32)
    lengths = np.array([2, 5, 0, 3])  # 5: cut to max_position_embeddings = 3; 0: the target alone
    got = layer(tf.constant(sequence), tf.constant(lengths, tf.int64), tf.constant(target)).numpy()
    assert got.shape == (4, layer.output_width) == (4, 4)
    np.testing.assert_allclose(got, _bst_by_hand(layer, sequence, lengths, target), rtol=1e-4, atol=1e-5)
    sequence[0, 2:] = 9.0  # past its length
    sequence[1, 3:] = -4.0  # past max_position_embeddings
    sequence[2] = 7.0
    again = layer(tf.constant(sequence), tf.constant(lengths, tf.int64), tf.constant(target)).numpy()
    np.testing.assert_allclose(again, got, rtol=1e-5, atol=1e-6)
    sequence[0, 1] += 1.0  # a valid position counts
    assert not np.allclose(layer(tf.constant(sequence), tf.constant(lengths, tf.int64),
                                 tf.constant(target)).numpy()[0], got[0], atol=1e-4)


def test_the_bst_layer_flattens_every_position_and_leaves_the_target_out_when_asked():
    everything = BSTEncoder(_bst(output_all_token_embeddings=True), seq_width=4, target_width=4, seed=1)
    sequence = tf.ones([2, 7, 4])
    out = everything(sequence, tf.constant([1, 7], tf.int64), tf.ones([2, 4]))
    assert out.shape == (2, 4 * 4) == (2, everything.output_width)  # 3 positions and the target's
    assert everything.seq_project is None and everything.target_project is None  # (as wide as hidden_size)
    alone = BSTEncoder(_bst(target_item_position="ignore", reserve_target_position=False), seq_width=4,
                       target_width=4, seed=1)
    assert alone(sequence, tf.constant([1, 2], tf.int64), None).shape == (2, 4)
    assert alone.positions == 3


def test_the_senet_layer_reweights_each_column_from_the_grouped_squeeze_of_every_feature():
    layer = SENet(pipeline_pb2.SENet(reduction_ratio=2, num_squeeze_group=2), fields=2, width=6, seed=3)
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(3, 2)).astype(np.float32)
    got = layer([tf.constant(a), tf.constant(b)]).numpy()
    assert got.shape == (3, 6) and layer.reduce.units == 4  # 2 fields * 2 groups * 2 / reduction_ratio 2
    squeezed = np.concatenate([a.reshape(3, 2, 2).max(-1), a.reshape(3, 2, 2).mean(-1),
                               b.reshape(3, 2, 1).max(-1), b.reshape(3, 2, 1).mean(-1)], axis=1)
    hidden = np.maximum(squeezed @ layer.reduce.kernel.numpy() + layer.reduce.bias.numpy(), 0)
    weights = hidden @ layer.excite.kernel.numpy() + layer.excite.bias.numpy()
    inputs = np.concatenate([a, b], axis=1)
    np.testing.assert_allclose(got, _layer_norm_eps(inputs * weights + inputs, 1e-3), rtol=1e-4, atol=1e-5)


def _layer_norm_eps(x, epsilon):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + epsilon)


# mmoe_backbone_on_taobao's form: the group as a feature list, SENet, an MMoE layer giving each task its input
MULTI_TASK = (("  model_name: 'DIN'\n  model_class: 'RankModel'", "  model_class: 'MultiTaskModel'"),
              ("  backbone {", """  backbone {
    blocks { name: 'all' inputs { feature_group_name: 'normal' } input_layer { only_output_feature_list: true } }
    blocks { name: 'senet' inputs { block_name: 'all' } keras_layer { class_name: 'SENet' senet {
      reduction_ratio: 2 num_squeeze_group: 1 } } }
    blocks { name: 'mmoe' inputs { block_name: 'senet' } keras_layer { class_name: 'MMoE' mmoe {
      num_task: 2 num_expert: 3 expert_mlp { hidden_units: [8, 4] } } } }
  }
  unused {"""),
              ("  model_params { l2_regularization: 0 }", """  model_params {
    task_towers { tower_name: 'ctr' label_name: 'label' dnn { hidden_units: [4] } }
    task_towers { tower_name: 'cvr' label_name: 'label' dnn { hidden_units: [4] } relation_tower_names: 'ctr'
                  relation_dnn { hidden_units: [2] } }
  }"""))


def _built_with_two_samples(config):
    """The model of ``config``, its variables made, and two samples without histories parsed for it."""
    specs = build_feature_specs(config)
    model = build_model(config, specs)
    model(empty_features(specs), training=False)
    return model, CsvParser(specs).parse([b"1,u1,30,b1,c1,,", b"0,u2,20,b2,c2,,"])


def _multi_task(*edits):
    return _edited_config(MULTI_TASK + edits, own_backbone=True, without_sequences=True)


def test_easyrecs_multi_task_backbone_gives_each_task_tower_its_mmoe_input_and_scores_every_task():
    model, parsed = _built_with_two_samples(_multi_task())
    assert [t.name for t in model.tasks] == ["ctr", "cvr"] and model.one_by_one
    outputs = model.task_outputs(model(parsed.features, training=False))
    assert {"probs_ctr", "probs_cvr"} <= set(outputs) and outputs["probs_cvr"].shape == (2,)
    assert np.all(np.isfinite(outputs["probs_ctr"].numpy()))


@pytest.mark.parametrize("edit,field,words", [
    (("num_task: 2", "num_task: 3"), "model_config.backbone", "gives 3 outputs one by one"),
    (("num_squeeze_group: 1", "num_squeeze_group: 3"), "model_config.backbone.blocks[1].keras_layer.senet."
     "num_squeeze_group", "multiple of num_squeeze_group"),
    (("relation_tower_names: 'ctr'", "relation_tower_names: 'cvr'"),
     "model_config.model_params.task_towers[1].relation_tower_names[0]", "not a tower before"),
    (("keras_layer { class_name: 'SENet'", "keras_layer { class_name: 'MLP' mlp { hidden_units: 2 } } } "
      "blocks { name: 'x' inputs { block_name: 'all' } keras_layer { class_name: 'SENet'"),
     "model_config.backbone.blocks[1].inputs", "layer MLP reads a tensor"),
])
def test_multi_task_backbone_forms_that_cannot_run_are_refused_naming_their_field(edit, field, words):
    with pytest.raises(ConfigError) as error:
        _multi_task(edit)
    assert error.value.path == field, error.value
    assert words in str(error.value)


def test_task_towers_in_a_rank_model_are_refused():
    with pytest.raises(ConfigError) as error:
        _multi_task(("  model_class: 'MultiTaskModel'", "  model_class: 'RankModel'"))
    assert error.value.path == "model_config.model_params.task_towers" and "MultiTaskModel" in str(error.value)


def test_a_mask_block_weighs_its_input_by_a_mask_of_the_features_and_masknet_runs_them_side_by_side_or_in_a_row():
    settings = pipeline_pb2.MaskNet(mask_blocks=[pipeline_pb2.MaskBlock(aggregation_size=6, output_size=3),
                                                 pipeline_pb2.MaskBlock(reduction_factor=2.0)], use_parallel=False)
    layer = MaskNet(settings, None, seed=2)
    x = np.random.default_rng(3).normal(size=(4, 5)).astype(np.float32)
    got = layer(tf.constant(x)).numpy()
    first, second = layer.blocks

    def dense(d, v, relu=False):
        out = v @ d.kernel.numpy() + (d.bias.numpy() if d.bias is not None else 0)
        return np.maximum(out, 0) if relu else out
    normed = _layer_norm_eps(x, 1e-3)  # MaskNet's input layer norm (scale 1, offset 0 at start)
    net = np.maximum(_layer_norm_eps(dense(first.output_dense, normed * dense(first.weigh, dense(
        first.aggregate, normed, relu=True))), 1e-3), 0)
    assert second.aggregate.units == 10  # reduction_factor 2 times the features' width 5
    want = net * dense(second.weigh, dense(second.aggregate, normed, relu=True))  # no output_size: the mask alone
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    settings.use_parallel = True
    assert MaskNet(settings, None, seed=2)(tf.constant(x)).shape == (4, 3 + 5)  # the blocks' outputs side by side


def _sequence(lengths, size=6, width=3):
    rng = np.random.default_rng(4)
    values = rng.normal(size=(len(lengths), size, width)).astype(np.float32)
    for i, n in enumerate(lengths):
        values[i, n:] = 0.0
    return SequenceInput(None, tf.constant(values), tf.constant(lengths, tf.int64), None), values


@pytest.mark.parametrize("way", ["crop", "mask", "reorder"])
def test_seq_augment_crops_masks_or_reorders_each_sample_in_training_only(way):
    rates = {"crop": dict(crop_rate=0.5, mask_rate=0, reorder_rate=0),
             "mask": dict(crop_rate=1.0, mask_rate=0.5, reorder_rate=0),
             "reorder": dict(crop_rate=1.0, mask_rate=0, reorder_rate=1.0)}[way]
    layer = SeqAugment(pipeline_pb2.SequenceAugment(**rates), width=3, name="aug")
    lengths = [6, 4, 1, 0]
    inputs, values = _sequence(lengths)
    same = layer(inputs, training=False)  # (scoring and serving read the sequence as it is)
    assert np.array_equal(same.sequence.numpy(), values) and same.lengths.numpy().tolist() == lengths
    out = layer(inputs, training=True)
    got, got_lengths = out.sequence.numpy(), out.lengths.numpy().tolist()
    mask = layer.mask.numpy()[0]
    for i, n in enumerate(lengths):
        rows = [tuple(r) for r in values[i, :n]]
        if way == "crop":  # a run of floor(n / 2) positions, moved to the front, zeros after it
            kept = n // 2
            assert got_lengths[i] == kept and not got[i, kept:].any()
            assert any(rows[b:b + kept] == [tuple(r) for r in got[i, :kept]] for b in range(n - kept + 1))
        elif way == "mask":  # floor(n / 2) positions are the mask vector, the others unchanged
            masked = [j for j in range(n) if np.allclose(got[i, j], mask)]
            assert got_lengths[i] == n and len(masked) == n // 2
            assert all(np.array_equal(got[i, j], values[i, j]) for j in range(6) if j not in masked)
        else:  # the same positions, shuffled
            assert got_lengths[i] == n and sorted(rows) == sorted(tuple(r) for r in got[i, :n])
            assert not got[i, n:].any()


def test_the_auxiliary_losses_are_cl4srecs_and_join_the_model_loss_in_training_only():
    rng = np.random.default_rng(5)
    x1, x2 = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(4, 3)).astype(np.float32)
    layer = AuxiliaryLoss("nce_loss", loss_weight=0.5, temperature=0.2)
    both = np.concatenate([x1, x2]) @ np.concatenate([x1, x2]).T / 0.2
    want = 0.0
    for i in range(8):  # NT-Xent: each view against every other view, its positive the other view of its sample
        others = np.delete(both[i], i)
        positive = both[i, (i + 4) % 8]
        want += -(positive - np.log(np.exp(others).sum())) / 8
    got = layer([tf.constant(x1), tf.constant(x2)], training=True)
    np.testing.assert_allclose(got.numpy(), 0.5 * want, rtol=1e-5)
    assert layer([tf.constant(x1), tf.constant(x2)], training=False).numpy() == 0.0
    empty = tf.zeros([0, 3])
    assert AuxiliaryLoss("nce_loss")([empty, empty], training=True).numpy() == 0.0  # the variables' build step
    info = AuxiliaryLoss("info_nce", temperature=0.5)([tf.constant(x1), tf.constant(x2)], training=True).numpy()
    logits = x1 @ x2.T / 0.5
    np.testing.assert_allclose(info, np.mean(np.log(np.exp(logits).sum(1)) - np.diag(logits)), rtol=1e-5)


# cl4srec_on_taobao's form: one BST encoder (a package) over the sequence for the score, and over two
# augmented views of it (another package) for a contrastive loss
CL4SREC = (("  model_name: 'DIN'\n", ""),
           ("  backbone {", """  backbone {
    blocks { name: 'seq_input' inputs { feature_group_name: 'sequence' } input_layer {
      output_seq_and_normal_feature: true } }
    packages { name: 'augment' blocks { name: 'aug' inputs { block_name: 'seq_input' } keras_layer {
      class_name: 'SeqAugment' seq_aug { mask_rate: 0.5 crop_rate: 0.5 reorder_rate: 0.5 } } } }
    packages { name: 'encoder' blocks { name: 'BST' inputs { use_package_input: true } keras_layer {
      class_name: 'BST' bst { hidden_size: 4 num_attention_heads: 2 num_hidden_layers: 1 intermediate_size: 4
      max_position_embeddings: 5 output_all_token_embeddings: false target_item_position: 'ignore' } } } }
    blocks { name: 'contrastive' inputs { package_name: 'encoder' package_input: 'augment' }
      inputs { package_name: 'encoder' package_input: 'augment' } merge_inputs_into_list: true
      keras_layer { class_name: 'AuxiliaryLoss' st_params { fields { key: 'loss_type' value { string_value:
      'nce_loss' } } fields { key: 'loss_weight' value { number_value: 0.1 } } } } }
    blocks { name: 'main' inputs { package_name: 'encoder' package_input: 'seq_input' }
      inputs { feature_group_name: 'normal' } }
    concat_blocks: 'main'
    top_mlp { hidden_units: [8] }
  }
  unused {"""))


def test_a_cl4srec_backbone_adds_its_contrastive_loss_in_training_and_scores_without_it():
    config = _edited_config(CL4SREC, own_backbone=True)
    specs = build_feature_specs(config)
    model = build_model(config, specs)
    assert model.graph.outputs == ("main",) and model.graph.losses == ("contrastive",)
    assert model.scores_differ_in_training  # (SeqAugment: a score in training could read a random view)
    model(empty_features(specs), training=False)
    parsed = CsvParser(specs).parse([b"1,u1,30,b1,c1,b1|b2|b3,c1|c2|c3", b"0,u2,20,b2,c2,b4,c4"])
    model(parsed.features, training=True)
    assert len(model.losses) == 1 and model.losses[0].numpy() > 0  # the contrastive loss, weight 0.1
    scores, = model(parsed.features, training=False).values()
    assert model.losses == [] and np.all(np.isfinite(scores.numpy()))
    # one encoder: its weights are shared by the score's call and the two views'
    assert sum("BST" in v.name and "query" in v.name and "kernel" in v.name for v in model.trainable_variables) == 1


def test_the_backbone_examples_of_docs_models_md_validate():
    """Each config example of models.md's backbone section, given an input field and a feature (a
    SequenceFeature for the ``*_list`` names) for every feature it names, loads and validates."""
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "models.md")).read()
    section = doc[doc.index("## Backbone"):doc.index("## DCN")]
    examples = re.findall(r"```\n(.*?)```", section, re.S)
    assert len(examples) == 2
    for example in examples:
        names = sorted(set(re.findall(r'"([a-z_]+(?:_id|_level|_list)|brand|price)"', example)))
        fields = "".join(f'input_fields {{ input_name: "{n}" input_type: {"INT32" if n in ("clk", "buy") else "STRING"} }} '
                         for n in ["clk", "buy"] + names)
        features = "".join(f'feature_configs {{ input_names: "{n}" embedding_dim: 16 '
                           + ('feature_type: SequenceFeature separator: "|" ' if n.endswith("_list") else "") + "} "
                           for n in names)
        config = parse_pipeline_config(
            f'model_dir: "/tmp/unused" kafka_train_input {{ server: "127.0.0.1:9" topic: "t" group: "g" }} '
            f'data_config {{ {fields} label_fields: "clk" label_fields: "buy" }} {features}' + example)
        validate_pipeline_config(config)
        assert config.model_config.model_class in ("RankModel", "MultiTaskModel")


def test_a_batch_whose_every_history_is_empty_leaves_the_attentions_batch_norm_finite():
    """DIN's attention MLP (EasyRec's MLP: batch norm on, dice) reads [B, 0, d] when no sample of the batch has a
    history; batch norm's moments over nothing must not reach its moving moments."""
    config = _config()
    specs = build_feature_specs(config)
    model = build_model(config, specs)
    parsed = CsvParser(specs).parse([b"1,u1,30,b1,c1,,", b"0,u2,20,b2,c2,,"])
    model(parsed.features, training=True)
    moving = [v.numpy() for v in model.variables if "moving" in v.name]
    assert moving and all(np.all(np.isfinite(m)) for m in moving)
    scores, = model(parsed.features, training=False).values()
    assert np.all(np.isfinite(scores.numpy()))


def test_a_tail_targets_output_does_not_depend_on_the_batch():
    layer = BSTEncoder(_bst(target_item_position="tail"), seq_width=4, target_width=4, seed=2)
    rng = np.random.default_rng(6)
    sequence, target = rng.normal(size=(2, 3, 4)).astype(np.float32), rng.normal(size=(2, 4)).astype(np.float32)
    both = layer(tf.constant(sequence), tf.constant([1, 3], tf.int64), tf.constant(target)).numpy()
    alone = layer(tf.constant(sequence[:1, :1]), tf.constant([1], tf.int64), tf.constant(target[:1])).numpy()
    np.testing.assert_allclose(alone[0], both[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("edit,field,words", [
    (("inputs { package_name: 'encoder' package_input: 'seq_input' }", "inputs { block_name: 'BST' }"),
     "model_config.backbone.blocks[2].inputs[0].block_name", "not a block this block reads"),
    (("    blocks { name: 'contrastive'", "    packages { name: 'idle' blocks { name: 'x' inputs { "
      "use_package_input: true } keras_layer { class_name: 'FM' } } }\n    blocks { name: 'contrastive'"),
     "model_config.backbone.packages[2]", "called by no block"),
])
def test_package_forms_that_cannot_run_are_refused(edit, field, words):
    config = _edited_config(CL4SREC + (edit,), own_backbone=True, validate=False)
    with pytest.raises(ConfigError) as error:
        validate_pipeline_config(config)
    assert error.value.path == field, error.value
    assert words in str(error.value)


def test_a_raw_feature_among_a_sequence_inputs_targets_and_a_task_list_of_unknown_length_are_refused():
    config = parse_pipeline_config(EASYREC_DIN_BACKBONE.replace(
        'feature_names: "brand" feature_names: "cate"\n', 'feature_names: "brand" feature_names: "cate" '
        'feature_names: "age"\n'))
    normalize(config)
    with pytest.raises(ConfigError) as error:  # (the sequence check itself: the model's width check may come first)
        validate_sequence_groups(config)
    assert error.value.path == "model_config.feature_groups[1].feature_names[2]" and "'age' has no embedding" in str(error.value)
    with pytest.raises(ConfigError) as error:  # the towers would read a feature list one by one
        _multi_task(("    blocks { name: 'senet'", "    blocks { name: 'list' inputs { block_name: 'all' } }\n"
                     "    blocks { name: 'senet'"), ("  }\n  unused {", "    concat_blocks: 'list'\n  }\n  unused {"))
    assert error.value.path == "model_config.backbone" and "MMoE" in str(error.value)


# dcn_backbone_on_taobao's form: DCN-v2's cross network (a recurrent block of Cross layers over [x0, x]) beside
# an MLP
DCN = (("  model_name: 'DIN'\n", ""),
       ("  backbone {", """  backbone {
    blocks { name: 'deep' inputs { feature_group_name: 'normal' } keras_layer { class_name: 'MLP' mlp {
      hidden_units: [4] } } }
    blocks { name: 'cross' inputs { feature_group_name: 'normal' input_fn: 'lambda x:  [x, x]' }
      recurrent { num_steps: 2 fixed_input_index: 0 keras_layer { class_name: 'Cross' } } }
    concat_blocks: ['deep', 'cross']
  }
  unused {"""))


def _dcn(*edits):
    return _edited_config(DCN + edits, own_backbone=True, without_sequences=True)


def test_a_recurrent_cross_block_is_dcn_v2s_cross_network_over_the_group():
    model, parsed = _built_with_two_samples(_dcn())
    embeddings, _, dense = model.embed(parsed.features)
    x0 = model.group_input("normal", embeddings, dense).numpy()
    crosses = model.block_layers["cross"]
    assert len(crosses) == 2 and x0.shape[1] == 4 + 1 + 4  # user, age (raw), brand
    x = x0
    for layer in crosses:  # x_{i+1} = x0 * (W x_i + b) + x_i, each step its own W
        x = x0 * (x @ layer.dense.kernel.numpy() + layer.dense.bias.numpy()) + x
    got = model.backbone_outputs(embeddings, dense, training=False)
    np.testing.assert_allclose(got[1].numpy(), x, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("edit,field,words", [
    (("input_fn: 'lambda x:  [x, x]'", "input_fn: 'lambda x: [x, x, x]'"),
     "model_config.backbone.blocks[1].inputs[0].input_fn", "only 'lambda x: [x, x]'"),
    (("fixed_input_index: 0 ", ""), "model_config.backbone.blocks[1].recurrent.fixed_input_index", "is required"),
    (("keras_layer { class_name: 'Cross' }", "keras_layer { class_name: 'MLP' mlp { hidden_units: 2 } }"),
     "model_config.backbone.blocks[1].recurrent.keras_layer.class_name", "recurrent block runs a Cross"),
])
def test_recurrent_forms_that_cannot_run_are_refused(edit, field, words):
    with pytest.raises(ConfigError) as error:
        _dcn(edit)
    assert error.value.path == field, error.value
    assert words in str(error.value)


def test_every_registered_block_has_a_builder_and_a_known_kind():
    """The block registry (graph.py BLOCKS: settings field, input and output kinds) and the builders
    (backbone_rank_model.py BLOCK_BUILDERS) name the same layers; a Cross runs only in a recurrent block."""
    assert set(BLOCK_BUILDERS) == set(BLOCKS) - {"Cross"}
    for name, kind in BLOCKS.items():
        assert kind.reads in ("tensor", "list", "sequence") and kind.gives in ("tensor", "list", "sequence", "loss")
        assert not kind.params or kind.params in pipeline_pb2.KerasLayer.DESCRIPTOR.fields_by_name, name
