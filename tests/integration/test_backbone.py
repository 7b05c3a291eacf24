"""EasyRec's backbone models (model_class RankModel: blocks of MLP, DIN and BST layers) trained online.

The configs have the shape of EasyRec's ``din_backbone_on_taobao``, ``bst_backbone_on_taobao`` and
``cl4srec_on_taobao`` samples
(an MLP over the user's group; an input layer with ``output_seq_and_normal_feature`` over a group holding
the target item and its history; a DIN or BST block over it; ``top_mlp``), written here, not copied, over
test_din's stream (the click depends on the history's categories, which no single id holds). The stream is
written as production writes it: librdkafka's transactional producer, zstd-compressed, every fourth
transaction aborted. Each model trains to the end of the topic through the real local broker while
publishing updates; the updates replayed equal the trainer's model; the model has learnt the history's
signal; its export, served over REST, gives what the trainer scores, for an empty history and one longer
than the sequence_length too; the CL4SRec one's export for stock TensorFlow Serving, read in a fresh process
without TFRA, scores the same.
"""
import json

import numpy as np
import pytest

from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.param_ids import read_parameter_ids
from tests.integration.test_din import FIELDS, _train_to_the_end, din_config, din_lines, export_serves_what_it_scores
from tests.integration.test_export_serve import export
from tests.integration.test_incremental_updates import _replay
from tests.integration.test_multi_task_models import auc
from tests.integration.test_positioned_sequence_exports import read_exports
from tests.integration.test_serve_tasks import trained_outputs
from tests.integration.test_stock_serving_export import export_in_one_process
from tests.integration.test_transactional_topics import write_transactions

GROUPS = """
  feature_groups { group_name: "user" feature_names: ["user", "tags", "price"] wide_deep: DEEP }
  feature_groups { group_name: "sequence" feature_names: ["item", "cate", "hist_item", "hist_cate"] wide_deep: DEEP }
"""


def backbone(layer: str) -> str:
    return f"""model_class: "RankModel" model_name: "backbone test"
  backbone {{
    blocks {{ name: "deep" inputs {{ feature_group_name: "user" }}
              keras_layer {{ class_name: "MLP" mlp {{ hidden_units: [16, 8] }} }} }}
    blocks {{ name: "seq_input" inputs {{ feature_group_name: "sequence" }}
              input_layer {{ output_seq_and_normal_feature: true }} }}
    blocks {{ name: "seq" inputs {{ block_name: "seq_input" }} keras_layer {{ {layer} }} }}
    top_mlp {{ hidden_units: [16, 8] }}
  }}
  model_params {{ l2_regularization: 1e-6 }}"""


DIN = backbone('class_name: "DIN" din { attention_dnn { hidden_units: [8, 1] activation: "dice" } '
               'need_target_feature: true }')
BST = backbone('class_name: "BST" bst { hidden_size: 8 num_attention_heads: 2 num_hidden_layers: 1 '
               'intermediate_size: 8 hidden_act: "gelu" max_position_embeddings: 5 hidden_dropout_prob: 0.1 '
               'attention_probs_dropout_prob: 0 }')


# cl4srec_on_taobao's form: one BST encoder (a package) reads the sequence for the score and two augmented
# views of it (another package) for a contrastive loss (AuxiliaryLoss) that joins the loss in training. (The
# encoder gives every position here; the sample's gives the target's alone, which learns this stream's
# signal more slowly: python -m easyonline.tools.easyrec_samples runs the sample itself.)
CL4SREC = """model_class: "RankModel"
  backbone {
    blocks { name: "seq_input" inputs { feature_group_name: "sequence" }
             input_layer { output_seq_and_normal_feature: true } }
    packages { name: "augment" blocks { name: "aug" inputs { block_name: "seq_input" }
      keras_layer { class_name: "SeqAugment" seq_aug { mask_rate: 0.5 crop_rate: 0.5 reorder_rate: 0.5 } } } }
    packages { name: "encoder" blocks { name: "enc" inputs { use_package_input: true }
      keras_layer { class_name: "BST" bst { hidden_size: 8 num_attention_heads: 2 num_hidden_layers: 1
        intermediate_size: 8 max_position_embeddings: 5 hidden_dropout_prob: 0.1 attention_probs_dropout_prob: 0
        } } } }
    blocks { name: "contrastive" inputs { package_name: "encoder" package_input: "augment" }
      inputs { package_name: "encoder" package_input: "augment" } merge_inputs_into_list: true
      keras_layer { class_name: "AuxiliaryLoss" st_params {
        fields { key: "loss_type" value { string_value: "nce_loss" } }
        fields { key: "loss_weight" value { number_value: 0.1 } }
        fields { key: "temperature" value { number_value: 0.15 } } } } }
    blocks { name: "main" inputs { package_name: "encoder" package_input: "seq_input" }
      inputs { feature_group_name: "user" } }
    concat_blocks: "main"
    top_mlp { hidden_units: [16, 8] }
  }"""


def _trained(broker, topic: str, tmp_path, model: str):
    """``model`` trained into ``tmp_path / "m"`` to the end of ``topic``, written as production writes it
    (librdkafka's transactional producer, zstd-compressed, every fourth transaction aborted: 7500 of 10000
    samples committed), publishing updates; (trainer, its update records)."""
    broker.create_topic(topic, 2)
    committed = write_transactions(broker.bootstrap, topic, din_lines(0, 10000), 250, 2, codec="zstd", send_before_abort=False)
    samples = len(committed)
    assert samples == 7500
    updates = topic + "_updates"
    config = din_config(tmp_path / "m", model, broker.bootstrap, topic, updates, groups=GROUPS)
    return _train_to_the_end(config, samples, broker.bootstrap, updates)


@pytest.fixture(scope="module")
def trained_in_ci(broker, tmp_path_factory):
    """[din]'s and [cl4srec]'s models, each trained (_trained) in a directory of its own, and their exports
    (each one's served export in <its dir>/export, cl4srec's stock export) written by one process: one
    TensorFlow import, not two. The stock export once, of the graph with the most to leave out (its training
    views). {"din" | "cl4srec": (trainer, its update records, its dir, its stock export's version or None)}."""
    models = {}
    for name, model in (("din", DIN), ("cl4srec", CL4SREC)):
        tmp_path = tmp_path_factory.mktemp(name)
        models[name] = (*_trained(broker, f"backbone_{name}", tmp_path, model), tmp_path)
    din, cl4srec = models["din"][2], models["cl4srec"][2]
    *_, stock = export_in_one_process(None, (din / "export", {}, din / "m"), (cl4srec / "export", {}, cl4srec / "m"),
                                      (cl4srec / "stock", {"for_stock_serving": True}, cl4srec / "m"))
    return {"din": (*models["din"], None), "cl4srec": (*models["cl4srec"], stock)}


# Under CI [bst] is a scenario (conftest.py): [cl4srec] runs the same BST encoder (the same settings; gelu is
# hidden_act's default) as a block of a RankModel backbone through every step of this test in CI (it trains
# through the broker, its updates replay exactly, it learns the history, its export serves what it scores, its
# stock export too), [din] runs the user group's MLP block and top_mlp, and test_din_cluster's [bst_backbone]
# trains this very config on the ps cluster, its published updates equal to its checkpoint.
@pytest.mark.parametrize("model,layer", [(DIN, "block_layers/seq/0/hidden/"),
                                         pytest.param(BST, "block_layers/seq/0/layers_/0/query/",
                                                      marks=pytest.mark.scenario),
                                         (CL4SREC, "block_layers/enc/0/layers_/0/query/")],
                         ids=["din", "bst", "cl4srec"])
def test_a_backbone_model_trains_through_the_broker_replays_exactly_learns_the_history_and_serves_what_it_scores(
        broker, topic, tmp_path, model, layer, request):
    if model == BST:  # (the scenario: trained and exported on its own)
        trainer, records = _trained(broker, topic, tmp_path, model)
        export(tmp_path / "m", tmp_path / "export")
        stock = None
    else:
        trainer, records, tmp_path, stock = request.getfixturevalue("trained_in_ci")["din" if model == DIN else
                                                                                      "cl4srec"]
    ids = read_parameter_ids(str(tmp_path / "m"))
    assert differences_from_model(_replay(records, "m"), trainer.model, ids) == []
    # the block's layer is dense parameters like any other: published and replayed
    assert any(name.startswith(layer) for name in ids.dense), sorted(ids.dense)
    # the history's ids are rows of the item table (one row whatever its place)
    parsed = trainer.parser.parse(din_lines(90000, 400))
    known = set(trainer.model.tables.embeddings["item"].params.export()[0].numpy().tolist())
    assert set(parsed.features["hist_item"].flat_values.numpy().tolist()) <= known
    outputs = trainer.model.task_outputs(trainer.model(parsed.features, training=False))
    assert auc(parsed.labels.numpy(), outputs["probs"].numpy()) > 0.75  # the category-in-history signal
    export_serves_what_it_scores(trainer, tmp_path, exported=True)
    if stock is None:
        return
    # the export for stock TensorFlow Serving, read in a fresh process without TFRA, scores the same
    lines = din_lines(80000, 8) + [b"0,u1,i3,c3,1.0,,,"]
    want = trained_outputs(trainer, lines)["probs"]
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{n: (float(v) if n == "price" else v) for (n, _), v in
                                 zip(FIELDS[1:], line.decode().split(",")[1:])} for line in lines]))
    [got] = read_exports(rows, stock)
    assert got["stock"] and not got["tfra"]
    np.testing.assert_allclose(got["probs"], want, atol=1e-6)
