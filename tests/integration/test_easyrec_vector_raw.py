"""An EasyRec-shaped MultiTower with a vector raw feature (raw_input_dim), range names (auto_expand_input_fields,
``field[1-3]`` in its group), a GPU train_distribute and file_shard, through the real broker.

The config is written here in the shape of EasyRec's multi_tower_with_embed / multi_tower_export samples, not
copied. The judging harness's own functions give it a Kafka input as a user would: it loads (one warning for the
strategy), trains, exports, serves over REST (the vector as one string per row) and the published updates
replay equal to the trained model. A stream with bad vectors among good samples trains the good ones, and the
bad ones are dead-lettered with their reason.
"""
import collections
import json
import logging
import os

from kafka import KafkaConsumer

from easyonline.core.rejections import rejection_kind
from easyonline.jobs.online_train import build_trainer
from easyonline.serve.process import ServingProcess
from easyonline.tools.stream_producer import produce
from easyonline.tools.easyrec_samples import (STEPS, SampleGenerator, load_sample, python_env, replay_differences,
                                              run_samples)

SAMPLE = """train_input_path: "data/test/embed_data.csv"
eval_input_path: "data/test/embed_data.csv"
model_dir: "experiments/multitower_with_embed/"
train_config {
  optimizer_config: { adam_optimizer: { learning_rate: { exponential_decay_learning_rate {
    initial_learning_rate: 0.001 decay_steps: 100000 decay_factor: 0.5 min_learning_rate: 0.0000001 } } }
    use_moving_average: false }
  num_steps: 1000
  sync_replicas: true
  train_distribute: MirroredStrategy
  num_gpus_per_worker: 2
}
eval_config { metrics_set: { auc {} } }
data_config {
  input_fields { input_name: 'clk' input_type: INT32 }
  input_fields { input_name: 'field[1-2]' input_type: STRING }
  input_fields { input_name: "field3" input_type: STRING }
  input_fields { input_name: "price" input_type: DOUBLE }
  auto_expand_input_fields: true
  file_shard: true
  label_fields: 'clk'
  batch_size: 1024
  prefetch_size: 32
  input_type: CSVInput
}
feature_config: {
  features: { input_names: 'field1' feature_type: IdFeature embedding_dim: 8 hash_bucket_size: 2000 }
  features: { input_names: 'field2' feature_type: IdFeature embedding_dim: 8 hash_bucket_size: 2000 }
  features: { input_names: 'field3' feature_type: RawFeature raw_input_dim: 6 }
  features: { input_names: 'price' feature_type: RawFeature min_val: 0 max_val: 10 }
}
model_config: {
  model_class: 'MultiTower'
  feature_groups: { group_name: 'user' feature_names: 'field[1-3]' wide_deep: DEEP }
  feature_groups: { group_name: 'item' feature_names: 'price' feature_names: 'field3' wide_deep: DEEP }
  multi_tower {
    towers { input: "user" dnn { hidden_units: [16, 8] } }
    towers { input: "item" dnn { hidden_units: [8] } }
    final_dnn { hidden_units: [8] }
  }
  embedding_regularization: 1e-5
}
export_config { }
"""


def _sample(tmp_path) -> str:
    path = tmp_path / "multi_tower_with_vector.config"
    path.write_text(SAMPLE)
    return str(path)


def test_a_vector_raw_feature_sample_loads_trains_exports_serves_and_replays_equal(broker, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="easyonline.distributed.strategy"):
        [result] = run_samples([_sample(tmp_path)], broker, str(tmp_path / "runs"), samples=600, predict_rows=4)
    assert result.passed == list(STEPS), result.error
    assert result.samples == 600 and result.published > 0 and "probs" in result.outputs
    warnings = [r.getMessage() for r in caplog.records if "train_distribute" in r.getMessage()]
    assert warnings == ["train_config.train_distribute: MirroredStrategy (EasyRec: synchronous training on the GPUs "
                        "of one machine) is not available here: this trainer runs as one process on the CPU (no "
                        "TF_CONFIG); num_gpus_per_worker: 2 is ignored (no GPU training here)"]
    # the export takes the vector as one string per row; a row of another length is a bad request naming it
    server = ServingProcess(str(tmp_path / "runs" / "run0" / "export"), str(tmp_path / "serve.log"),
                            env=python_env())
    try:
        row = {"field1": "a", "field2": "b", "price": 3.5}
        code, body = server.post(json.dumps({"instances": [dict(row, field3="1|2|3|4|5|6")]}).encode())
        assert code == 200 and 0 <= body["predictions"][0]["probs"] <= 1
        code, body = server.post(json.dumps({"instances": [dict(row, field3="1|2|3|4|5|6"),
                                                           dict(row, field3="1|2|3")]}).encode())
        assert code == 400 and "raw feature field3 needs 6 finite numbers joined by '|'" in json.dumps(body), body
    finally:
        server.stop()


def test_bad_vectors_are_dead_lettered_with_their_reason_and_the_good_samples_train_and_replay_exactly(
        broker, topic, tmp_path):
    model_dir = tmp_path / "work" / "model"
    os.makedirs(model_dir.parent)
    config = load_sample(_sample(tmp_path), broker.bootstrap, topic, str(model_dir), topic + "_updates",
                         batch_size=100)
    config.data_config.dead_letter_topic = topic + "_dead"
    generator = SampleGenerator(config, seed=3)
    lines = [generator.line(row) for row in generator.samples(900)]
    bad_vectors = {b"1|2|3|4|5": "5 numbers, raw_input_dim is 6", b"1|2|3|4|5|6|7": "7 numbers, raw_input_dim is 6",
                   b"1|2|x|4|5|6": "'x' is not a finite number", b"1|2|3|inf|5|6": "'inf' is not a finite number"}
    bad_lines = {}
    for i, vector in enumerate(bad_vectors):  # every 200th line's vector replaced by a bad one
        fields = lines[200 * i + 100].split(b",")
        fields[3] = vector
        bad_lines[b",".join(fields)] = bad_vectors[vector]
        lines[200 * i + 100] = b",".join(fields)
    broker.create_topic(topic, 2)
    produce(broker.bootstrap, topic, [lines], partitions=2)
    trainer = build_trainer(config, online=False)
    summary = trainer.run()
    assert summary.samples == 896 and summary.rejected == 4
    assert {k: v for k, v in trainer.bad_input.counts.items() if v} == {"bad_value": 4}
    consumer = KafkaConsumer(topic + "_dead", bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=30000)
    dead = {}
    for record in consumer:
        headers = dict(record.headers)
        assert rejection_kind(headers["reason"].decode()) == headers["kind"].decode() == "bad_value"
        dead[record.value] = headers["reason"].decode()
        if len(dead) == len(bad_lines):
            break
    consumer.close()
    assert dead == {line: f"bad_value: raw feature field3: {why}" + (" (joined by '|')" if "numbers" in why else "")
                    for line, why in bad_lines.items()}
    published, differences = replay_differences(broker.bootstrap, topic + "_updates", trainer, str(model_dir))
    assert published > 0 and differences == []
    counts = collections.Counter(len(line.split(b",")[3].split(b"|")) for line in lines)
    assert counts[6] == 898  # the generator's vectors have raw_input_dim numbers (two bad ones do too)
