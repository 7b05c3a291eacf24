"""The config's proto files: the models' messages in one file per family, every name still in pipeline_pb2.

pipeline.proto imports the family files with ``import public``, so ``pipeline_pb2.<Name>`` is every message and
enum of the config wherever it is declared. Walks PipelineConfig's descriptor (nothing here lists the config's
messages): each message and enum it reaches is in its family's file, and reachable as pipeline_pb2.<Name>.
"""
import glob
import importlib
import os
import subprocess
import sys

import pytest
from google.protobuf import descriptor

from easyonline.protos import pipeline_pb2
from tests.conftest import ROOT

PROTO_DIR = os.path.join(ROOT, "protos", "easyonline", "protos")
PREFIX = "easyonline/protos/"
# The model families (a ModelConfig `oneof model` field's message is in one of them) and the files they share.
FAMILIES = {
    "rank_models.proto": {"DeepFM", "WideAndDeep", "DNNModel", "MultiTower", "CrossTower", "DCN"},
    "multi_task_models.proto": {"ExpertTower", "MMoE", "DBMTL", "ESMM"},
    "sequence_models.proto": {"DIN", "DINTower", "MultiTowerDIN", "BSTTower", "MultiTowerBST"},
    "backbone.proto": {"ModelParams", "DINEncoder", "BSTEncoder", "SENet", "MMoELayer", "MaskBlock", "MaskNet",
                       "SequenceAugment", "KerasLayer", "BlockInputLayer", "BlockInput", "LambdaLayer",
                       "RecurrentLayer", "BlockLayer", "Block", "BlockPackage", "Backbone"},
}
SHARED = {
    "layers.proto": {"DNN", "MLP"},
    "tower.proto": {"Tower", "TaskTower", "BayesTaskTower"},
    "loss.proto": {"Loss", "F1ReweighedLoss", "BinaryFocalLoss", "PairwiseLoss", "PairwiseFocalLoss",
                   "PairwiseLogisticLoss", "JRCLoss", "LossType"},
    "eval.proto": {"EvalConfig"},
}
EXPECTED_FILE = {name: PREFIX + file for files in (FAMILIES, SHARED) for file, names in files.items() for name in names}
CONFIG_FILES = {PREFIX + "pipeline.proto"} | {PREFIX + f for f in {**FAMILIES, **SHARED}}


def _reachable():
    """Every message and enum descriptor PipelineConfig reaches (fields, nested types), by full name."""
    found = {}

    def walk(d):
        if d.full_name in found:
            return
        found[d.full_name] = d
        for inner in getattr(d, "nested_types", ()):
            walk(inner)
        for inner in getattr(d, "enum_types", ()):
            walk(inner)
        for field in getattr(d, "fields", ()):
            if field.message_type is not None:
                walk(field.message_type)
            if field.enum_type is not None:
                walk(field.enum_type)

    walk(pipeline_pb2.PipelineConfig.DESCRIPTOR)
    return found


def _top_level(d):
    while d.containing_type is not None:
        d = d.containing_type
    return d


def test_every_message_the_config_reaches_is_in_its_family_file_and_in_pipeline_pb2():
    reachable = _reachable()
    ours = {name: d for name, d in reachable.items() if name.startswith("easyonline.protos.")}
    assert {d.file.name for d in reachable.values()} - CONFIG_FILES == {"google/protobuf/struct.proto"}
    for name, d in ours.items():
        top = _top_level(d)
        # (a message added later, e.g. a new model's, may be in any config file: the oneof test below keeps
        # every model's message in a family file)
        assert d.file.name == EXPECTED_FILE[top.name] if top.name in EXPECTED_FILE else d.file.name in CONFIG_FILES, \
            name
        # the old spelling: pipeline_pb2.<Name> (and .<Inner> for nested types) is the family module's class
        value = pipeline_pb2
        for part in name[len("easyonline.protos."):].split("."):
            value = getattr(value, part)
        assert value.DESCRIPTOR is d, name
        module = importlib.import_module("easyonline.protos." + os.path.basename(top.file.name)[:-len(".proto")]
                                         + "_pb2")
        assert getattr(module, top.name) is getattr(pipeline_pb2, top.name), name
    # every name the lists above place is one the config reaches (a renamed or dropped message fails here)
    assert set(EXPECTED_FILE) <= {_top_level(d).name for d in ours.values()}
    # top-level enums' values stay module constants of pipeline_pb2 (pipeline_pb2.CLASSIFICATION)
    for d in ours.values():
        if d.containing_type is None and isinstance(d, descriptor.EnumDescriptor):
            for value in d.values:
                assert getattr(pipeline_pb2, value.name) == value.number, value.name


def test_every_message_of_the_config_files_is_reached_and_every_model_is_in_a_family_file():
    reached = set(_reachable())
    for file in sorted(CONFIG_FILES):
        module = importlib.import_module(file[:-len(".proto")].replace("/", ".") + "_pb2")
        declared = set(module.DESCRIPTOR.message_types_by_name) | set(module.DESCRIPTOR.enum_types_by_name)
        assert declared, file
        assert {"easyonline.protos." + name for name in declared} <= reached, file
    for field in pipeline_pb2.ModelConfig.DESCRIPTOR.oneofs_by_name["model"].fields:
        assert field.message_type.file.name in {PREFIX + f for f in FAMILIES}, field.name
    assert {f.name for f in pipeline_pb2.DESCRIPTOR.public_dependencies} == CONFIG_FILES - {PREFIX + "pipeline.proto"}


def test_the_generated_modules_are_those_of_the_proto_files(tmp_path):
    """Each .proto has its committed _pb2.py, generated from it as tools/gen_protos.sh does (no stale one)."""
    pytest.importorskip("grpc_tools")
    protos = sorted(glob.glob(os.path.join(PROTO_DIR, "*.proto")))
    proc = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + os.path.join(ROOT, "protos"),
                           "--python_out=" + str(tmp_path)] + protos, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    generated = sorted(os.listdir(tmp_path / "easyonline" / "protos"))
    committed = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "easyonline", "protos", "*_pb2.py")))
    assert generated == committed == sorted(os.path.basename(p)[:-len(".proto")] + "_pb2.py" for p in protos)
    for name in generated:
        with open(tmp_path / "easyonline" / "protos" / name) as fresh, \
                open(os.path.join(ROOT, "easyonline", "protos", name)) as kept:
            assert fresh.read() == kept.read(), f"{name} is stale: run tools/gen_protos.sh"
