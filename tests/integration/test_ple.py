"""PLE (models/ple.py) from EasyRec's ``ple`` message: it trains, both tasks learn, the updates it publishes
replay into a copy equal to the trained model, a server of an early export replays the rest and answers every
tower's outputs equal to the trained model over REST, and wrong settings name their field.

The stream and config helpers are test_multi_task_models' (two labels, clk and buy; six ids, three numbers);
training, publishing, export and serving are the real ones (TensorFlow, TFRA, a server process on 127.0.0.1).
"""
import os
import re

import numpy as np
import pytest

from easyonline.config import ConfigError, apply_edit_config_json
from easyonline.jobs.online_train import build_trainer
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.param_ids import read_parameter_ids
from easyonline.updates.readers import DirectoryUpdateReader
from tests.integration import test_multi_task_models as multi_task
from tests.integration.test_export_serve import Server, _file_numbers
from tests.integration.test_incremental_updates import _replay
from tests.integration.test_serve_tasks import mmoe_instances, trained_outputs
from tests.integration.test_stock_serving_export import export_in_one_process

# Two extraction layers (the first with shared experts and a shared gate, the last without a shared gate),
# EasyRec's field names.
PLE = """
  model_class: "PLE"
  ple {
    extraction_networks { network_name: "layer1" expert_num_per_task: 2 share_num: 2
                          task_expert_net { hidden_units: [16, 8] } share_expert_net { hidden_units: [16, 8] } }
    extraction_networks { network_name: "layer2" expert_num_per_task: 1 share_num: 1
                          task_expert_net { hidden_units: [8] } share_expert_net { hidden_units: [8] } }
    task_towers { tower_name: "ctr" label_name: "clk" dnn { hidden_units: [8] } }
    task_towers { tower_name: "cvr" label_name: "buy" dnn { hidden_units: [8] } weight: 0.5 }
    l2_regularization: 1e-6
  }
"""


STEPS, EXPORTED_STEP = 30, 10


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(trainer, the version of an export of its step-10 checkpoint, the update directory, the tmp dir): PLE
    trained on 6,000 samples from a file in 30 steps, publishing every 2 steps to a directory."""
    tmp_path = tmp_path_factory.mktemp("ple")
    data, updates = tmp_path / "train.csv", tmp_path / "updates"
    data.write_bytes(b"\n".join(multi_task.lines(0, 6000)) + b"\n")
    config = multi_task.config_for(PLE, tmp_path / "m")
    apply_edit_config_json(config, {
        "train_config.save_checkpoints_steps": EXPORTED_STEP,
        "train_config.incr_save_config": {"sparse_save_steps": 2, "dense_save_steps": 2,
                                          "fs": {"incr_save_dir": str(updates)}}})
    config.ClearField("kafka_train_input")
    config.file_train_input.paths.append(str(data))
    trainer = build_trainer(config, online=False)
    trainer.run()
    assert trainer.step == STEPS
    version, = export_in_one_process(None, (tmp_path / "export", {
        "checkpoint_path": str(tmp_path / "m" / f"model.ckpt-{EXPORTED_STEP}")}, tmp_path / "m"))
    return trainer, version, updates, tmp_path


def test_ple_trains_both_tasks_and_its_updates_replay_exactly(trained):
    trainer, _, updates, tmp_path = trained
    model = trainer.model
    assert [(t.name, t.label_name, t.weight) for t in model.tasks] == [("ctr", "clk", 1.0), ("cvr", "buy", 0.5)]
    first, last = model.extraction
    assert [len(e) for e in first.task_experts] == [2, 2] and len(first.shared_experts) == 2
    assert first.shared_gate is not None and last.shared_gate is None  # the last layer feeds the towers only
    assert [len(e) for e in last.task_experts] == [1, 1] and len(last.shared_experts) == 1
    names = {v.name for v in model.trainable_variables}
    assert any("layer1_task_1_expert_1" in n for n in names) and any("layer2/task_0_gate" in n for n in names), \
        sorted(names)
    outputs, labels = multi_task.outputs_of(trainer)
    multi_task.assert_binary_outputs(outputs, ["ctr", "cvr"])
    # both towers learnt their label (an untrained tower scores about 0.5 on fresh samples)
    assert multi_task.auc(labels["clk"], outputs["probs_ctr"]) > 0.65
    assert multi_task.auc(labels["buy"], outputs["probs_cvr"]) > 0.65
    records = DirectoryUpdateReader(str(updates)).read_available()
    assert len(records) >= 3
    replica = _replay(records, "m")
    ids = read_parameter_ids(str(tmp_path / "m"))
    assert differences_from_model(replica, model, ids) == []
    assert sum(len(t) for t in replica.tables.values()) > 0


def test_a_ple_export_serves_every_towers_outputs_equal_to_the_trained_model(trained):
    trainer, _, updates, tmp_path = trained
    lines = multi_task.lines(50000, 6)  # never trained on
    expected = trained_outputs(trainer, lines)
    names = ["logits_ctr", "logits_cvr", "probs_ctr", "probs_cvr"]  # EasyRec's names, per tower
    assert sorted(expected) == names
    server = Server(tmp_path / "export", tmp_path / "serve.log")
    try:
        last = max(sequence for _, sequence in _file_numbers(updates))
        status = server.wait_for(lambda s: s["last_applied_sequence"] == last, timeout=120)
        assert status["last_applied_step"] == STEPS and status["refused_updates"] == {}  # steps 11-30 as updates
        served = server.predict_outputs(mmoe_instances(lines))
        assert sorted(served) == names
        for name in names:
            np.testing.assert_allclose(served[name], expected[name], atol=1e-5, err_msg=name)
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("old, new, field", [
    ("expert_num_per_task: 2", "expert_num_per_task: 0", "model_config.ple.extraction_networks[0].expert_num_per_task"),
    ("share_expert_net { hidden_units: [16, 8] }", "share_expert_net { hidden_units: [16, 4] }",
     "model_config.ple.extraction_networks[0].share_expert_net.hidden_units"),  # not the task experts' width
    ("share_num: 1", "share_num: 1 share_expert_net {}",
     "model_config.ple.extraction_networks[1].share_expert_net.hidden_units"),  # shared experts without a DNN
])
def test_ple_config_errors_name_the_field(tmp_path, old, new, field):
    broken = PLE.replace(old, new, 1)
    if old == "share_num: 1":  # (the layer's own share_expert_net goes, so only the empty one is left)
        broken = broken.replace("share_expert_net { hidden_units: [8] }", "", 1)
    with pytest.raises(ConfigError, match=re.escape(field)):
        multi_task.config_for(broken, tmp_path / "m")


def test_ple_without_towers_or_layers_is_refused_naming_the_field(tmp_path):
    no_towers = "\n".join(line for line in PLE.splitlines() if "task_towers" not in line)
    with pytest.raises(ConfigError, match=re.escape("model_config.ple.task_towers")):
        multi_task.config_for(no_towers, tmp_path / "m")
    no_layers = re.sub(r"    extraction_networks \{.*?\} \}\n(?=    (extraction_networks|task_towers))", "", PLE,
                       flags=re.S)
    assert "extraction_networks" not in no_layers
    with pytest.raises(ConfigError, match=re.escape("model_config.ple.extraction_networks")):
        multi_task.config_for(no_layers, tmp_path / "m")


def test_the_ple_example_of_docs_models_md_validates(tmp_path):
    """docs/models.md's PLE config, on this module's stream (its labels clk and buy), builds PLE's two layers."""
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "models.md")).read()
    section = doc[doc.index("## PLE"):]
    example = section[section.index("```") + 3:]
    example = example[:example.index("```")].strip()
    assert example.startswith("model_config {") and example.endswith("}")
    config = multi_task.config_for(example[len("model_config {"):-1], tmp_path / "m")
    assert config.model_config.model_class == "PLE" and len(config.model_config.ple.extraction_networks) == 2
