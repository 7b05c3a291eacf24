"""The models (easyonline/models/): the registry, the FM term, and each model's logits checked by hand."""
import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras

tf = ensure_legacy_keras()

import os
import re

import numpy as np
import pytest

from easyonline.config import parse_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.core.errors import ConfigError
from easyonline.features.feature_spec import build_feature_specs
from easyonline.features.signature import empty_features
from easyonline.models import registry
from easyonline.models.builder import build_model
from easyonline.models.deepfm import DeepFM
from easyonline.models.dnn import DNN
from easyonline.models.base import Model
from easyonline.models.layers import FMInteraction
from easyonline.models.multi_task_model import MultiTaskModel
from easyonline.models.ranking_model import RankingModel
from easyonline.models.wide_and_deep import WideAndDeep
from easyonline.protos import pipeline_pb2
from easyonline.updates.param_ids import dense_variables

# Two int64 id features with a table each, embedding_dim 2, one hidden layer of 2 units.
_CONFIG = """
model_dir: "/tmp/unused"
file_train_input {{ paths: "unused.csv" }}
data_config {{
  input_fields {{ input_name: "label" input_type: INT32 }}
  input_fields {{ input_name: "a" input_type: INT64 }}
  input_fields {{ input_name: "b" input_type: INT64 }}
  label_fields: "label"
  separator: ","
}}
feature_configs {{ input_names: "a" embedding_dim: 2 }}
feature_configs {{ input_names: "b" embedding_dim: 2 }}
model_config {{
  model_class: "{model_class}"
  {field} {{ dnn {{ hidden_units: [2] }} }}
  embedding_regularization: {embedding_l2}
}}
"""


def _build(model_class, field, embedding_l2=0.0):
    config = parse_pipeline_config(_CONFIG.format(model_class=model_class, field=field, embedding_l2=embedding_l2))
    validate_pipeline_config(config)
    specs = build_feature_specs(config)
    model = build_model(config, specs)
    logits, = model(empty_features(specs), training=False).values()  # creates the dense variables
    assert logits.shape == (0,)
    return model


def _upsert(model, table, keys, rows):
    model.tables.embeddings[table].params.upsert(tf.constant(keys, tf.int64), tf.constant(rows, tf.float32))


def _batch(a, b):
    return {"a": tf.constant(a, tf.int64), "b": tf.constant(b, tf.int64)}


# registry ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, model_class, field", [
    ("deepfm", DeepFM, "deepfm"), ("DeepFM", DeepFM, "deepfm"),
    ("wide_and_deep", WideAndDeep, "wide_and_deep"), ("WideAndDeep", WideAndDeep, "wide_and_deep"),
    ("dnn", DNN, "dnn"), ("DNN", DNN, "dnn"),
])
def test_registry_resolves_every_name(name, model_class, field):
    entry = registry.lookup(name)
    assert entry.model_class is model_class and entry.config_field == field


def test_every_registered_model_is_of_a_family_base_and_implements_its_hook():
    """base.py's contract: a single-task model (ranking_model.py) implements ``logit``, a multi-task one
    (multi_task_model.py) or a model of its own kind (ESMM, on base.py's Model) ``logits_from``."""
    classes = {registry.lookup(name).model_class for name in registry.model_names()}
    assert len(classes) >= 14, classes
    for cls in classes:
        assert issubclass(cls, Model), cls
        if issubclass(cls, RankingModel) and not issubclass(cls, MultiTaskModel):
            assert cls.logit is not RankingModel.logit and cls.logits_from is RankingModel.logits_from, cls
        else:
            assert cls.logits_from is not Model.logits_from, cls


@pytest.mark.parametrize("model_class, field", [("DeepFM", "deepfm"), ("WideAndDeep", "wide_and_deep"), ("DNN", "dnn")])
def test_a_single_task_models_call_gives_its_logit_and_bias_to_each_task_by_name(model_class, field):
    model = _build(model_class, field)
    model.bias.assign(0.5)
    outputs = model(_batch([7, 7], [9, 9]), training=False)
    assert list(outputs) == [t.name for t in model.tasks] == ["ctr"]
    embeddings, first_order, dense = model.embed(_batch([7, 7], [9, 9]))
    np.testing.assert_allclose(outputs["ctr"].numpy(), model.logit(embeddings, first_order, dense, False).numpy() + 0.5)


def test_the_adding_a_model_example_of_docs_models_md_registers_and_scores_as_deepfm(monkeypatch):
    """docs/models.md's single-task example, run as written: it registers itself and, being DeepFM without
    final_dnn, has DeepFM's parameters and scores what DeepFM scores given the same rows and weights."""
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "models.md")).read()
    code, = re.findall(r"```python\n(.*?)```", doc[doc.index("## Adding a model"):], re.S)
    monkeypatch.setattr(registry, "_ENTRIES", dict(registry._ENTRIES))  # (the example's name, for this test only)
    namespace: dict = {"__name__": "docs_models_example"}
    exec(compile(code, "docs/models.md", "exec"), namespace)  # pylint: disable=exec-used
    assert registry.lookup("MyModel").model_class is namespace["MyModel"] is registry.lookup("my_model").model_class
    deepfm = _build("DeepFM", "deepfm")
    config = parse_pipeline_config(_CONFIG.format(model_class="DeepFM", field="deepfm", embedding_l2=0.0))
    specs = build_feature_specs(config)
    mine = namespace["MyModel"](specs, config.model_config, config.model_config.deepfm.dnn, name="my_model")
    mine(empty_features(specs), training=False)
    theirs = dense_variables(deepfm)
    assert sorted(dense_variables(mine)) == sorted(theirs)
    for path, variable in dense_variables(mine).items():
        variable.assign(theirs[path])
    for model in (deepfm, mine):
        _upsert(model, "a", [7], [[1.0, 2.0, 0.5]])
        _upsert(model, "b", [9], [[3.0, -1.0, -0.25]])
    batch = _batch([7, 7], [9, 12345])
    np.testing.assert_allclose(mine(batch)["ctr"].numpy(), deepfm(batch)["ctr"].numpy(), rtol=1e-6)


def test_registry_names_and_unknown_names():
    names = registry.model_names()
    assert {"DNN", "DeepFM", "WideAndDeep", "deepfm", "dnn", "wide_and_deep", "MMoE", "mmoe"} <= set(names)
    # every registered model has its settings field in model_config's oneof, and every field there a model
    oneof = {f.name for f in pipeline_pb2.ModelConfig.DESCRIPTOR.oneofs_by_name["model"].fields}
    assert {registry.lookup(name).config_field for name in names} == oneof
    assert registry.lookup("Deepfm") is None and registry.lookup("") is None  # case as written


def test_a_model_module_in_the_models_folder_registers_itself_without_a_list(tmp_path, monkeypatch):
    """A new model is one module in models/: the registry imports every module of the package (no list)."""
    import easyonline.models  # pylint: disable=import-outside-toplevel
    (tmp_path / "toy_model_for_registry_test.py").write_text(
        "from easyonline.models.registry import register\n\n\n"
        "@register('toy_model_for_registry_test', settings_field='deepfm')\n"
        "class ToyModel:\n    pass\n")
    monkeypatch.setattr(easyonline.models, "__path__", [*easyonline.models.__path__, str(tmp_path)])
    monkeypatch.setattr(registry, "_ENTRIES", dict(registry._ENTRIES))  # pylint: disable=protected-access
    assert "easyonline.models.toy_model_for_registry_test" in registry.model_modules()
    entry = registry.lookup("toy_model_for_registry_test")
    assert entry is not None and entry.model_class.__name__ == "ToyModel" and entry.config_field == "deepfm"
    assert "easyonline.models.backbone" not in registry.model_modules()  # blocks are no models


def test_registry_refuses_a_taken_name_for_another_class():
    registry.lookup("deepfm")  # the real models are registered first

    class Impostor:
        pass

    with pytest.raises(ValueError, match=r"model name 'deepfm' is registered twice \(DeepFM and Impostor\)"):
        registry.register("deepfm")(Impostor)
    assert registry.lookup("deepfm").model_class is DeepFM
    assert registry.register("deepfm", "DeepFM")(DeepFM) is DeepFM  # the same class again is harmless
    with pytest.raises(ValueError, match="at least one name"):
        registry.register()


def test_builder_refuses_an_unregistered_name():
    config = parse_pipeline_config(_CONFIG.format(model_class="dnn", field="dnn", embedding_l2=0.0))
    config.model_config.model_class = "xgboost"
    with pytest.raises(KeyError, match="'xgboost' is not registered"):
        build_model(config, build_feature_specs(config))


# FMInteraction ----------------------------------------------------------------------------------------------


def test_fm_interaction_by_hand():
    # v1 = [1, 2], v2 = [3, -1], v3 = [0.5, 2]
    # sum v = [4.5, 3], (sum v)^2 = [20.25, 9]; sum v^2 = [1 + 9 + 0.25, 4 + 1 + 4] = [10.25, 9]
    # 0.5 * ([20.25, 9] - [10.25, 9]) summed over dims = 0.5 * (10 + 0) = 5
    # (= the pairwise dot products: v1.v2 + v1.v3 + v2.v3 = 1 + 4.5 - 0.5 = 5)
    embeddings = tf.constant([[[1.0, 2.0], [3.0, -1.0], [0.5, 2.0]]])
    result = FMInteraction()(embeddings)
    assert result.shape == (1,)
    np.testing.assert_allclose(result.numpy(), [5.0], rtol=1e-6)


def test_fm_interaction_of_one_field_is_zero():
    # One field has no pairs: (v)^2 - v^2 = 0.
    np.testing.assert_allclose(FMInteraction()(tf.constant([[[3.0, -4.0]], [[1.0, 1.0]]])).numpy(), [0.0, 0.0])


def test_fm_interaction_gradient_by_hand_and_as_tensorflow_derives_it():
    # d/dv_f of sum over pairs of v_i.v_j is sum v - v_f: for the example above, v1's gradient is
    # [4.5, 3] - [1, 2] = [3.5, 1]; the written-out gradient must equal the one TensorFlow derives.
    embeddings = tf.constant([[[1.0, 2.0], [3.0, -1.0], [0.5, 2.0]]])
    with tf.GradientTape() as tape:
        tape.watch(embeddings)
        result = FMInteraction()(embeddings)
    np.testing.assert_allclose(tape.gradient(result, embeddings).numpy()[0, 0], [3.5, 1.0], rtol=1e-6)
    values, upstream = tf.random.stateless_normal([8, 5, 4], [1, 2]), tf.random.stateless_normal([8, 4], [3, 4])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(values)
        written = tf.reduce_sum(FMInteraction()(values, per_dim=True) * upstream)
        summed = tf.reduce_sum(values, axis=1)
        derived = tf.reduce_sum(0.5 * (tf.square(summed) - tf.reduce_sum(tf.square(values), axis=1)) * upstream)
    np.testing.assert_allclose(written.numpy(), derived.numpy(), rtol=1e-5)
    np.testing.assert_allclose(tape.gradient(written, values).numpy(), tape.gradient(derived, values).numpy(),
                               rtol=1e-5, atol=1e-5)


# the models -------------------------------------------------------------------------------------------------
# Rows looked up outside training: a known id gets its row, padding (-1) and unknown ids get zeros.
# Models with a first-order weight store it as one more column: [v0, v1 | w].


def test_deepfm_logits_by_hand():
    model = _build("DeepFM", "deepfm")
    assert model.tables.extra_dims == 1
    _upsert(model, "a", [7], [[1.0, 2.0, 0.5]])
    _upsert(model, "b", [9], [[3.0, -1.0, -0.25]])
    kernel, _ = model.deep_logit.get_weights()
    model.deep_logit.set_weights([np.zeros_like(kernel), np.zeros(1, np.float32)])  # deep part = 0
    model.bias.assign(0.1)
    logits, = model(_batch([7, 7], [9, 12345]), training=False).values()
    assert logits.shape == (2,)
    # sample 0: first order 0.5 - 0.25 = 0.25; FM [1, 2].[3, -1] = 3 - 2 = 1; deep 0; bias 0.1 -> 1.35
    # sample 1: b = 12345 is unknown (zeros): first order 0.5; FM 0; deep 0; bias 0.1 -> 0.6
    np.testing.assert_allclose(logits.numpy(), [1.35, 0.6], rtol=1e-6)


def test_wide_and_deep_logits_by_hand():
    model = _build("wide_and_deep", "wide_and_deep")
    assert model.tables.extra_dims == 1
    _upsert(model, "a", [7], [[1.0, 2.0, 0.5]])
    _upsert(model, "b", [9], [[3.0, -1.0, -0.25]])
    kernel, _ = model.deep_logit.get_weights()
    model.deep_logit.set_weights([np.zeros_like(kernel), np.array([0.2], np.float32)])  # deep part = 0.2
    model.bias.assign(0.1)
    logits, = model(_batch([7, 7], [9, -1]), training=False).values()
    assert logits.shape == (2,)
    # sample 0: linear 0.5 - 0.25 = 0.25; no FM term; deep 0.2; bias 0.1 -> 0.55
    # sample 1: b = -1 is padding (zeros): linear 0.5 + 0.2 + 0.1 -> 0.8
    np.testing.assert_allclose(logits.numpy(), [0.55, 0.8], rtol=1e-6)


def test_dnn_logits_by_hand():
    model = _build("DNN", "dnn")
    assert model.tables.extra_dims == 0
    _upsert(model, "a", [7], [[1.0, 2.0]])
    _upsert(model, "b", [9], [[3.0, -1.0]])
    # hidden = relu(concat(v_a, v_b) @ K) with K = [[1, 0], [0, 1], [1, 0], [0, 1]]: relu(v_a + v_b)
    hidden_layer = model.deep._layers[0]  # pylint: disable=protected-access
    hidden_layer.set_weights([np.array([[1, 0], [0, 1], [1, 0], [0, 1]], np.float32), np.zeros(2, np.float32)])
    model.deep_logit.set_weights([np.array([[1.0], [-2.0]], np.float32), np.array([0.5], np.float32)])
    model.bias.assign(0.1)
    logits, = model(_batch([7, 8], [9, 9]), training=False).values()
    assert logits.shape == (2,)
    # sample 0: relu([1 + 3, 2 - 1]) = [4, 1]; 4 * 1 + 1 * -2 + 0.5 = 2.5; + bias 0.1 -> 2.6
    # sample 1: a = 8 unknown (zeros): relu([3, -1]) = [3, 0]; 3 + 0 + 0.5 + 0.1 -> 3.6 (5.6 without the relu)
    np.testing.assert_allclose(logits.numpy(), [2.6, 3.6], rtol=1e-6)


def test_embedding_regularization_by_hand():
    model = _build("dnn", "dnn", embedding_l2=0.5)
    _upsert(model, "a", [7], [[1.0, 2.0]])
    _upsert(model, "b", [9], [[3.0, -1.0]])
    model(_batch([7, 8], [9, 9]), training=False)
    # a rows [1, 2] and [0, 0]: sum of squares 5 and 0, mean 2.5; b rows [3, -1] twice: 10 and 10, mean 10.
    # 0.5 * (2.5 + 10) = 6.25
    assert len(model.losses) == 1
    assert float(model.losses[0]) == pytest.approx(6.25, rel=1e-6)


# a multi-task model's DeepFM terms (deepfm_terms) ---------------------------------------------------------------
# Ids a and b (dim 2), raw feature r; labels y1, y2; two towers t1 and t2. With deepfm_terms each id's row
# holds one first-order weight, shared by the tasks: [v0, v1 | w].

_TASKS_CONFIG = """
model_dir: "/tmp/unused"
file_train_input {{ paths: "unused.csv" }}
data_config {{
  input_fields {{ input_name: "y1" input_type: INT32 }}
  input_fields {{ input_name: "y2" input_type: FLOAT }}
  input_fields {{ input_name: "a" input_type: INT64 }}
  input_fields {{ input_name: "b" input_type: INT64 }}
  input_fields {{ input_name: "r" input_type: FLOAT }}
  label_fields: ["y1", "y2"]
  separator: ","
}}
feature_configs {{ input_names: "a" embedding_dim: 2 }}
feature_configs {{ input_names: "b" embedding_dim: {b_dim} }}
feature_configs {{ input_names: "r" feature_type: RawFeature }}
model_config {{
  {groups}
  model_class: "{model_class}"
  {field} {{
    {body}
    task_towers {{ tower_name: "t1" label_name: "y1" dnn {{ hidden_units: [2] }} }}
    task_towers {{ tower_name: "t2" label_name: "y2" loss_type: L2_LOSS dnn {{ hidden_units: [2] }} }}
    {terms}
  }}
}}
"""
_BODIES = {"mmoe": "expert_dnn { hidden_units: [4] } num_expert: 2", "dbmtl": "bottom_dnn { hidden_units: [4] }"}
# a and b feed the towers and the first-order term; r only the first-order term
_WIDE_GROUPS = """
  feature_groups { group_name: "all" feature_names: ["a", "b"] wide_deep: WIDE_AND_DEEP }
  feature_groups { group_name: "wide" feature_names: ["r"] wide_deep: WIDE }
"""


def _tasks_config(field, terms=True, groups=_WIDE_GROUPS, b_dim=2):
    return parse_pipeline_config(_TASKS_CONFIG.format(
        model_class=field, field=field, body=_BODIES[field], groups=groups, b_dim=b_dim,
        terms="deepfm_terms: true" if terms else ""))


def _build_tasks(field, terms=True):
    config = _tasks_config(field, terms)
    validate_pipeline_config(config)
    specs = build_feature_specs(config)
    model = build_model(config, specs)
    model(empty_features(specs), training=False)  # creates the dense variables
    return model


def _tasks_batch(a, b, r):
    return {"a": tf.constant(a, tf.int64), "b": tf.constant(b, tf.int64), "r": tf.constant(r, tf.float32)}


@pytest.mark.parametrize("field", ["mmoe", "dbmtl"])
def test_easyrecs_multi_task_models_have_no_deepfm_terms_unless_asked(field):
    model = _build_tasks(field, terms=False)
    assert model.wide_dim == 0 and model.tables.extra_dims == 0 and model.deepfm_scales is None


@pytest.mark.parametrize("field", ["mmoe", "dbmtl"])
def test_deepfm_terms_add_the_shared_first_order_and_fm_terms_scaled_per_task_by_hand(field):
    model = _build_tasks(field)
    assert model.wide_dim == 1 and model.tables.extra_dims == 1  # one first-order weight per id
    assert model.deepfm_scales.numpy().tolist() == [[1.0, 1.0], [1.0, 1.0]]  # each task adds both terms whole
    _upsert(model, "a", [7], [[1.0, 2.0, 0.25]])
    _upsert(model, "b", [9], [[3.0, -1.0, 0.5]])
    batch = _tasks_batch([7, 7], [9, 12345], [2.0, 0.0])
    model.deepfm_scales.assign(np.zeros((2, 2), np.float32))
    towers = model(batch, training=False)  # the towers' logits alone (r feeds no tower)
    assert list(towers) == [t.name for t in model.tasks] == ["t1", "t2"]  # {task: logits}, in tower order
    model.dense_linear.set_weights([np.array([[0.5]], np.float32)])  # r's linear weight
    model.deepfm_scales.assign(np.array([[1.0, 2.0], [0.5, -1.0]], np.float32))  # [first order, FM] x [t1, t2]
    logits = model(batch, training=False)
    # sample 0: first order 0.25 + 0.5 + 2 x 0.5 = 1.75, FM [1, 2].[3, -1] = 1:
    #   t1 1 x 1.75 + 0.5 x 1 = 2.25; t2 2 x 1.75 - 1 x 1 = 2.5
    # sample 1: b = 12345 unknown (zeros), r = 0: first order 0.25, FM 0: t1 0.25, t2 0.5
    np.testing.assert_allclose(logits["t1"].numpy() - towers["t1"].numpy(), [2.25, 0.25], rtol=1e-5)
    np.testing.assert_allclose(logits["t2"].numpy() - towers["t2"].numpy(), [2.5, 0.5], rtol=1e-5)


def test_deepfm_terms_need_one_embedding_dim_and_name_the_field():
    with pytest.raises(ConfigError) as raised:
        validate_pipeline_config(_tasks_config("mmoe", b_dim=3))
    assert raised.value.path == "model_config.mmoe.deepfm_terms", raised.value
    validate_pipeline_config(_tasks_config("mmoe", terms=False, b_dim=3))  # EasyRec's MMoE: any dims


def test_deepfm_terms_refuse_a_two_logit_tower_and_name_the_field():
    """A JRC_LOSS tower has two logits (num_class 2): one term added to both would cancel in its softmax."""
    config = _tasks_config("mmoe")
    tower = config.model_config.mmoe.task_towers[0]
    tower.num_class = 2
    tower.losses.add(loss_type=pipeline_pb2.LossType.JRC_LOSS).jrc_loss.session_name = "a"
    with pytest.raises(ConfigError) as raised:
        validate_pipeline_config(config)
    assert raised.value.path == "model_config.mmoe.deepfm_terms" and "t1" in str(raised.value), raised.value
