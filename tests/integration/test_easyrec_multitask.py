"""EasyRec-shaped MultiTower, DBMTL, MMoE, ESMM, DCN and MultiTaskModel (backbone) configs through the judging
harness's own functions.

The configs are written here in the shape of EasyRec's taobao samples (file inputs, ``feature_config {
features }``, ``input_type: CSVInput``, two 0/1 labels, id, tag and raw features, EasyRec's model messages),
not copied. easyonline/tools/easyrec_samples.py's run_samples gives each a Kafka input as a user would, trains a
stream generated from its input_fields through the real local broker with publishing, exports them, serves
each over REST and replays the published updates; every step must pass for every family. The MultiTower,
MMoE and DBMTL samples are the ones with several losses (model-level F1 + pairwise; a tower of
classification + pairwise; JRC over sessions with dice), so one harness run covers the families and the losses.
"""
import pytest

from easyonline.tools.easyrec_samples import STEPS, run_samples

FIELDS = (("clk", "INT32"), ("buy", "INT32"), ("user_id", "STRING"), ("age_level", "INT64"), ("item_id", "STRING"),
          ("cate_id", "STRING"), ("tags", "STRING"), ("price", "DOUBLE"))
FEATURES = """feature_config: {
  features { input_names: "user_id" feature_type: IdFeature embedding_dim: 8 hash_bucket_size: 1000 }
  features { input_names: "age_level" feature_type: IdFeature embedding_dim: 8 num_buckets: 10 }
  features { input_names: "item_id" feature_type: IdFeature embedding_dim: 8 hash_bucket_size: 1000 }
  features { input_names: "cate_id" feature_type: IdFeature embedding_dim: 8 hash_bucket_size: 100 }
  features { input_names: "tags" feature_type: TagFeature embedding_dim: 8 hash_bucket_size: 100 separator: "|" }
  features { input_names: "price" feature_type: RawFeature }
}
"""
USER, ITEM = ("user_id", "age_level"), ("item_id", "cate_id", "tags", "price")


def _group(name, features):
    return (f'  feature_groups {{ group_name: "{name}" '
            + " ".join(f'feature_names: "{f}"' for f in features) + " wide_deep: DEEP }\n")


def _tower(name, label, extra=""):
    return (f'    task_towers {{ tower_name: "{name}" label_name: "{label}" loss_type: CLASSIFICATION num_class: 1 '
            f'weight: 1.0 metrics_set {{ auc {{}} }} dnn {{ hidden_units: [16, 8] }} {extra}}}\n')


MODELS = {
    "multi_tower": ("MultiTower", [("user", USER), ("item", ITEM)], """  multi_tower {
    towers { input: "user" dnn { hidden_units: [16, 8] } }
    towers { input: "item" dnn { hidden_units: [16, 8] } }
    final_dnn { hidden_units: [16, 8] }
    l2_regularization: 1e-6
  }
"""),
    "dcn": ("DCN", [("all", USER + ITEM)], """  dcn {
    deep_tower { input: "all" dnn { hidden_units: [16, 8] } }
    cross_tower { input: "all" cross_num: 2 }
    final_dnn { hidden_units: [8] }
    l2_regularization: 1e-6
  }
"""),
    "mmoe": ("MMoE", [("all", USER + ITEM)], "  mmoe {\n    expert_dnn { hidden_units: [16, 8] }\n    num_expert: 2\n"
             + _tower("ctr", "clk") + _tower("cvr", "buy") + "    l2_regularization: 1e-6\n  }\n"),
    "dbmtl": ("DBMTL", [("all", USER + ITEM)], "  dbmtl {\n    bottom_dnn { hidden_units: [16] }\n"
              + _tower("ctr", "clk", "relation_dnn { hidden_units: [8] } ")
              + _tower("cvr", "buy", 'relation_tower_names: ["ctr"] relation_dnn { hidden_units: [8] } ')
              + "    l2_regularization: 1e-6\n  }\n"),
    "esmm": ("ESMM", [("user", USER), ("item", ITEM)], """  esmm {
    groups { input: "user" dnn { hidden_units: [16, 8] } }
    groups { input: "item" dnn { hidden_units: [16, 8] } }
    ctr_tower { tower_name: "ctr" label_name: "clk" dnn { hidden_units: [8] } num_class: 1 weight: 1.0 loss_type: CLASSIFICATION }
    cvr_tower { tower_name: "cvr" label_name: "buy" dnn { hidden_units: [8] } num_class: 1 weight: 1.0 loss_type: CLASSIFICATION }
    l2_regularization: 1e-6
  }
"""),
}
# EasyRec's MultiTaskModel over a backbone (mmoe_backbone_on_taobao's form, with dbmtl_backbone_on_taobao's
# MaskNet): the group as a feature list, SENet's reweighting, MaskNet's masks, an MMoE layer giving each task
# tower its input
MODELS["mmoe_backbone"] = ("MultiTaskModel", [("all", ("user_id", "age_level", "item_id", "cate_id", "tags"))], """\
  backbone {
    blocks { name: "all" inputs { feature_group_name: "all" } input_layer { only_output_feature_list: true } }
    blocks { name: "senet" inputs { block_name: "all" } keras_layer { class_name: "SENet" senet { reduction_ratio: 4 } } }
    blocks { name: "masknet" inputs { block_name: "senet" } keras_layer { class_name: "MaskNet" masknet {
      mask_blocks { aggregation_size: 16 output_size: 8 } mask_blocks { reduction_factor: 0.5 output_size: 8 }
      mlp { hidden_units: [16] } } } }
    blocks { name: "mmoe" inputs { block_name: "masknet" }
             keras_layer { class_name: "MMoE" mmoe { num_task: 2 num_expert: 3 expert_mlp { hidden_units: [16, 8] } } } }
  }
  model_params {
""" + _tower("ctr", "clk") + _tower("cvr", "buy", 'relation_tower_names: ["ctr"] relation_dnn { hidden_units: [8] } ')
    + "    l2_regularization: 1e-6\n  }\n")
EXPECTED_OUTPUTS = {"multi_tower": ["probs"], "dcn": ["probs"], "mmoe": ["probs_ctr", "probs_cvr"],
                    "dbmtl": ["probs_ctr", "probs_cvr", "pos_logits_cvr"], "esmm": ["probs_ctcvr", "probs_ctr", "probs_cvr"],
                    "mmoe_backbone": ["probs_ctr", "probs_cvr"]}


def easyrec_sample(family: str) -> str:
    """A config in the shape of EasyRec's ``<family>_on_taobao.config`` samples (file input, CSVInput)."""
    model_class, groups, body = MODELS[family]
    inputs = "".join(f'  input_fields {{ input_name: "{n}" input_type: {t} }}\n' for n, t in FIELDS)
    labels = 'label_fields: "clk"\n  label_fields: "buy"' if family not in ("multi_tower", "dcn") else \
        'label_fields: "clk"'
    return f"""train_input_path: "data/test/tb_data/taobao_train_data"
eval_input_path: "data/test/tb_data/taobao_test_data"
model_dir: "experiments/{family}_taobao_ckpt"
train_config {{
  optimizer_config {{ adam_optimizer {{ learning_rate {{ exponential_decay_learning_rate {{
    initial_learning_rate: 0.001 decay_steps: 1000 decay_factor: 0.5 min_learning_rate: 1e-07 }} }} }}
    use_moving_average: false }}
  num_steps: 5000
  sync_replicas: true
  save_checkpoints_steps: 100
  log_step_count_steps: 100
}}
eval_config {{ metrics_set {{ auc {{}} }} }}
data_config {{
  batch_size: 4096
  {labels}
  prefetch_size: 32
  input_type: CSVInput
{inputs}}}
{FEATURES}model_config {{
  model_class: "{model_class}"
{"".join(_group(n, f) for n, f in groups)}{body}  embedding_regularization: 5e-05
}}
export_config {{ multi_placeholder: false }}
"""


MODEL_LOSSES = """  losses { loss_type: F1_REWEIGHTED_LOSS weight: 1.0 f1_reweighted_loss { f1_beta_square: 2.25 } }
  losses { loss_type: PAIR_WISE_LOSS weight: 1.0 }
"""
MMOE_CTR = ('losses { loss_type: CLASSIFICATION weight: 1.0 } losses { loss_type: PAIR_WISE_LOSS weight: 1.0 } '
            'dnn { hidden_units: [16, 8] }')
DBMTL = """  dbmtl {
    bottom_dnn { hidden_units: [16] activation: "dice" }
    task_towers { tower_name: "ctr" label_name: "clk"
      losses { loss_type: F1_REWEIGHTED_LOSS weight: 1.0 f1_reweighted_loss { f1_beta_square: 1.0 } }
      losses { loss_type: PAIR_WISE_LOSS weight: 1.0 }
      metrics_set { auc {} } dnn { hidden_units: [16, 8] activation: "dice" }
      relation_dnn { hidden_units: [8] activation: "dice" } weight: 1.0 }
    task_towers { tower_name: "cvr" label_name: "buy" num_class: 2
      losses { loss_type: JRC_LOSS jrc_loss { session_name: "user_id" alpha: 0.5 } }
      metrics_set { auc {} } dnn { hidden_units: [16, 8] activation: "dice" }
      relation_tower_names: ["ctr"] relation_dnn { hidden_units: [8] activation: "dice" } weight: 1.0 }
    l2_regularization: 1e-6
  }
"""


def with_model_losses() -> str:
    """MultiTower with model-level F1_REWEIGHTED_LOSS + PAIR_WISE_LOSS (multi_tower_on_taobao's)."""
    text = easyrec_sample("multi_tower")
    return text.replace("  multi_tower {", MODEL_LOSSES + "  multi_tower {", 1)


def mmoe_with_tower_losses() -> str:
    """MMoE whose ctr tower has CLASSIFICATION + PAIR_WISE_LOSS (mmoe_on_taobao_with_multi_loss's)."""
    text = easyrec_sample("mmoe")
    old = 'loss_type: CLASSIFICATION num_class: 1 weight: 1.0 metrics_set { auc {} } dnn { hidden_units: [16, 8] } '
    assert old in text
    return text.replace(old, 'num_class: 1 weight: 1.0 metrics_set { auc {} } ' + MMOE_CTR + " ", 1)


def dbmtl_with_jrc_and_dice() -> str:
    """DBMTL of F1 + PAIR_WISE and JRC towers with dice (dbmtl_on_taobao_with_multi_loss's), and an attention
    over a sequence of several categories a position (seq_multi_sep, as dbmtl_on_multi_numeric_*'s) beside a
    sequence of two numbers a position fed as numbers (dbmtl_on_multi_numeric_raw_*'s)."""
    text = easyrec_sample("dbmtl")
    start, end = text.index("  dbmtl {"), text.index("  embedding_regularization")
    text = text[:start] + DBMTL + text[end:]
    for old, new in (
            ('  input_fields { input_name: "price" input_type: DOUBLE }\n',
             '  input_fields { input_name: "price" input_type: DOUBLE }\n'
             '  input_fields { input_name: "cate_hist" input_type: STRING }\n'
             '  input_fields { input_name: "price_hist" input_type: STRING }\n'),
            ('  features { input_names: "price" feature_type: RawFeature }\n',
             '  features { input_names: "price" feature_type: RawFeature }\n'
             '  features { input_names: "cate_hist" feature_type: SequenceFeature embedding_dim: 8 '
             'embedding_name: "cate_id" separator: "|" seq_multi_sep: ";" sequence_length: 5 }\n'
             '  features { input_names: "price_hist" feature_type: SequenceFeature sub_feature_type: RawFeature '
             'raw_input_dim: 2 embedding_dim: 8 separator: "|" seq_multi_sep: ";" sequence_length: 5 }\n'),
            ('wide_deep: DEEP }\n', 'wide_deep: DEEP sequence_features { group_name: "seq_fea" '
                                    'seq_att_map { key: ["cate_id", "item_id"] hist_seq: ["cate_hist", "price_hist"] '
                                    '} } }\n')):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text



# The harness run: each family once, the MultiTower, MMoE and DBMTL samples with their several losses
# (test_easyrec_losses.py checks their tasks).
SAMPLES = {"multi_tower": with_model_losses, "dcn": lambda: easyrec_sample("dcn"), "mmoe": mmoe_with_tower_losses,
           "dbmtl": dbmtl_with_jrc_and_dice, "esmm": lambda: easyrec_sample("esmm"),
           "mmoe_backbone": lambda: easyrec_sample("mmoe_backbone")}


# Under CI the families with a cheaper end-to-end test of their own are scenarios (conftest.py): MultiTower and
# DCN (test_multi_task_models.py), MMoE (test_serve_tasks.py, test_multi_task_production.py), ESMM
# (test_multi_task_models.py, test_multi_task_arrays.py). DBMTL's JRC, dice and sequence groups and the
# MultiTaskModel backbone run everywhere; python -m easyonline.tools.easyrec_samples runs the harness on every family.
CI_SCENARIOS = ("multi_tower", "dcn", "mmoe", "esmm")


def _families_selected(request) -> list:
    """The families whose test runs in this session: the harness trains only those."""
    selected = {item.callspec.params["family"] for item in request.session.items
                if item.module is request.module and item.get_closest_marker("skip") is None}
    return [family for family in SAMPLES if family in selected]


@pytest.fixture(scope="module")
def results(broker, tmp_path_factory, request):
    configs = tmp_path_factory.mktemp("configs")
    paths = []
    for family in _families_selected(request):
        make = SAMPLES[family]
        path = configs / f"{family}_on_generated.config"
        path.write_text(make())
        paths.append(str(path))
    return {r.name: r for r in run_samples(paths, broker, str(tmp_path_factory.mktemp("runs")), samples=600,
                                           predict_rows=4)}


@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.scenario) if f in CI_SCENARIOS else f
                                    for f in sorted(SAMPLES)])
def test_an_easyrec_sample_loads_trains_exports_serves_every_task_and_replays_equal(results, family):
    result = results[f"{family}_on_generated"]
    assert result.passed == list(STEPS), result.error
    assert result.samples == 600 and result.published > 0
    # every task's prediction output is served (the logits come too)
    assert set(EXPECTED_OUTPUTS[family]) <= set(result.outputs), result.outputs
