"""Sequences whose positions hold several ids (``seq_multi_sep``) or numbers (a raw SequenceFeature) through both
exports: both are read in one fresh process, the stock one first and without TFRA loading, and each must score what
the trainer scores (their ids come flat with positions, and each position is pooled in the graph both exports trace).

The model trains from a file (the broker adds nothing to what an export holds); test_easyrec_multitask.py trains
the same kinds of sequence through the broker, serves them over REST and replays their updates.
"""
import json

import numpy as np

from easyonline.config import parse_pipeline_config
from easyonline.config.validate import validate_pipeline_config
from easyonline.utils import preloaded_python
from easyonline.jobs.online_train import build_trainer
from tests.conftest import PYTHON, python_env
from tests.integration.test_stock_serving_export import export_in_one_process
from tests.unit.test_sequence_features import CONFIG, MODEL, MULTI, RAW

# Scores rows of input strings (argv[1], a JSON file) through the serving_default of each export (argv[2:]), one
# after another in this process: prints a line per export, its probabilities and whether TFRA was loaded when it had
# scored (a stock export read first: not, had it needed TFRA's ops or modules).
READER = r"""
import json, sys
from easyonline.serve.loaded_export import LoadedExport
import tensorflow as tf
rows = json.load(open(sys.argv[1]))
for version in sys.argv[2:]:
    export = LoadedExport(version)
    serve = export.signatures["serving_default"]
    inputs = {name: tf.constant([row[name] for row in rows], dtype=spec.dtype)
              for name, spec in serve.structured_input_signature[1].items()}
    print(json.dumps({"probs": serve(**inputs)["probs"].numpy().tolist(), "stock": export.for_stock_serving,
                      "tfra": any(m.startswith("tensorflow_recommenders_addons") for m in sys.modules)}), flush=True)
"""


def read_exports(rows, *versions):
    """What READER prints for each of ``versions`` (in one fresh process, in that order), as dicts."""
    out = preloaded_python.run([PYTHON, "-c", READER, str(rows), *versions], preload="serving", env=python_env(), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()[-len(versions):]
    assert len(lines) == len(versions), out.stdout[-3000:]
    return [json.loads(line) for line in lines]


FIELDS = ("label", "item", "cate", "hist", "hist_cate", "nums", "wtags", "ihist")


def _lines(count: int, seed: int = 1):
    """label,item,cate,hist,hist_cate,nums,wtags,ihist: hist_cate 1-2 categories at each of hist's positions;
    nums 0-3 positions of 1-2 numbers (raw_input_dim 2)."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(count):
        n = int(rng.integers(0, 4))
        hist = "|".join(f"i{rng.integers(0, 9)}" for _ in range(n))
        cates = "|".join(";".join(f"c{rng.integers(0, 5)}" for _ in range(int(rng.integers(1, 3)))) for _ in range(n))
        nums = ";".join(":".join(f"{x:.2f}" for x in rng.uniform(-2, 5, int(rng.integers(1, 3))))
                        for _ in range(int(rng.integers(0, 4))))
        lines.append(f"{rng.integers(0, 2)},i{rng.integers(0, 9)},c{rng.integers(0, 5)},{hist},{cates},{nums},"
                     f"t{rng.integers(0, 3)}:1,{rng.integers(0, 9)}")
    return lines


def test_both_exports_score_positioned_sequences_as_the_trainer(tmp_path):
    config = parse_pipeline_config((CONFIG % ("", MODEL)).replace(*MULTI).replace(*RAW))
    config.model_dir = str(tmp_path / "m")
    data = tmp_path / "train.csv"
    data.write_text("\n".join(_lines(600)) + "\n")
    config.ClearField("file_train_input")
    config.file_train_input.paths.append(str(data))
    config.data_config.batch_size = 100
    config.train_config.save_checkpoints_secs = 0
    validate_pipeline_config(config)
    trainer = build_trainer(config, online=False)
    assert trainer.run().samples == 600
    # both export kinds, made by one process (one TensorFlow import) as the export command makes each
    normal, stock = export_in_one_process(tmp_path / "m", (tmp_path / "export", {}),
                                          (tmp_path / "stock", {"for_stock_serving": True}))
    lines = _lines(12, seed=2)
    batch = trainer.parser.parse([line.encode() for line in lines])
    assert batch.size == 12 and not batch.rejected
    assert batch.features["hist_cate/positions"].flat_values.numpy().max() >= 1  # several ids at some position
    want = trainer.model.task_outputs(trainer.model(batch.features, training=False))["probs"].numpy()
    assert want.std() > 0  # (scores that differ: a wrong pooling could not match them by chance)
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([dict(zip(FIELDS[1:], line.split(",")[1:])) for line in lines]))
    # one reader for both (one TensorFlow start): the stock export first, so that TFRA is not loaded before it scores
    for version, stock_kind, got in zip((stock, normal), (True, False), read_exports(rows, stock, normal)):
        assert got["stock"] is stock_kind and got["tfra"] is not stock_kind
        np.testing.assert_allclose(got["probs"], want, atol=1e-6, err_msg=version)
