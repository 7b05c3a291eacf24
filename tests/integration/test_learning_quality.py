"""samples/movielens.config and tools/bench/learning_quality.py end to end, on a generated stream of the same schema.

MovieLens itself may not be redistributed, so the stream is generated: users with their own rating bias and
taste per genre, movies with their own quality, in time order (``label,user,movie,genres,hour,weekday``).
The script streams it through the real local broker, trains online with the sample config (ComboFeature and
all), freezes a copy at the half, runs its LR baseline and writes the plot.
"""
import json

import numpy as np

from easyonline.config import apply_edit_config_json, load_pipeline_config
from easyonline.inputs import KafkaInput
from easyonline.jobs.online_train import build_trainer
from easyonline.movielens.sequences import config_lengths, config_sequences, sequence_lines
from easyonline.updates.model_diff import differences_from_model
from easyonline.updates.param_ids import read_parameter_ids
from easyonline.updates.readers import KafkaUpdateReader
from easyonline.utils import preloaded_python
from tests.conftest import PYTHON, ROOT, python_env
from tests.helpers.movielens_files import movielens_files
from tests.integration.test_export_serve import Server, export
from tests.integration.test_incremental_updates import _replay
from tests.integration.test_serve_tasks import trained_outputs
from tests.integration.test_transactional_topics import write_transactions

GENRES = ["Action", "Comedy", "Drama", "Horror", "Romance", "Sci-Fi"]


def _stream(count: int, seed: int = 7) -> list:
    rng = np.random.default_rng(seed)
    users, movies = 200, 300
    user_bias = rng.normal(0, 1, users)
    taste = rng.normal(0, 1.5, (users, len(GENRES)))
    quality = rng.normal(0, 1, movies)
    movie_genres = [sorted(rng.choice(len(GENRES), rng.integers(1, 3), replace=False)) for _ in range(movies)]
    lines = []
    for i in range(count):
        user, movie = int(rng.integers(users)), int(rng.integers(movies))
        genres = movie_genres[movie]
        logit = user_bias[user] + quality[movie] + taste[user, genres].mean()
        label = int(rng.random() < 1 / (1 + np.exp(-logit)))
        lines.append(f"{label},{user},{movie},{'|'.join(GENRES[g] for g in genres)},{i // 400 % 24},{i // 9600 % 7}")
    return lines


def test_the_movielens_config_learns_a_stream_of_its_schema_and_the_bench_reports_it(tmp_path):
    # 4,000 lines (2,000 steps of the sample's batch of 2): its second-half AUC is ~0.71, clear of 0.68 (3,000:
    # ~0.68, too near; 6,000: ~0.73)
    (tmp_path / "stream.csv").write_text("\n".join(_stream(4000)) + "\n")
    png = tmp_path / "quality.png"
    proc = preloaded_python.run([PYTHON, "tools/bench/learning_quality.py", f"--data={tmp_path}", f"--png={png}",
                                 "--window=1000"], preload="trainer", cwd=ROOT, env=python_env(), capture_output=True,
                                text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.index("\n}\n") + 2])
    assert result["samples"] == 4000 and 2000 <= result["half"] < 2100, result
    # Chance is 0.5; the generating model's own AUC is about 0.8. The LR baseline runs on the same lines.
    assert result["easyonline"]["second_half"] > 0.68, result
    assert result["online_lr"]["second_half"] > 0.65, result
    assert result["easyonline_frozen"]["second_half"] > 0.6, result
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _rated_stream(count: int, seed: int = 11) -> list:
    """``liked,rating,user,movie,genres,hour,weekday``: a rating of 1 to 5 from the user's bias, the movie's
    quality and the user's taste for its genres, plus noise; liked = rating >= 4."""
    rng = np.random.default_rng(seed)
    users, movies = 60, 80
    user_bias = rng.normal(0, 0.6, users)
    taste = rng.normal(0, 0.6, (users, len(GENRES)))
    quality = rng.normal(0, 0.8, movies)
    movie_genres = [sorted(rng.choice(len(GENRES), rng.integers(1, 3), replace=False)) for _ in range(movies)]
    lines = []
    for i in range(count):
        user, movie = int(rng.integers(users)), int(rng.integers(movies))
        genres = movie_genres[movie]
        mean = 3.5 + user_bias[user] + quality[movie] + taste[user, genres].mean()
        rating = int(np.clip(np.rint(mean + rng.normal(0, 0.5)), 1, 5))
        lines.append(f"{int(rating >= 4)},{rating},{user},{movie},{'|'.join(GENRES[g] for g in genres)},"
                     f"{i // 50 % 24},{i // 1200 % 7}")
    return lines


def test_the_multitask_config_trains_both_tasks_and_the_bench_reports_them(tmp_path):
    """samples/movielens_multitask.config loads and trains 500 generated lines through the broker (the
    bench: tools/bench/multitask_quality.py, without its single-task run). (500: liked AUC ~0.76 and rating RMSE
    ~1.0 on the second half, both clear of their bounds; 800 took 150 more steps for ~0.81 and ~0.9.)"""
    (tmp_path / "stream.csv").write_text("\n".join(_rated_stream(500)) + "\n")
    png = tmp_path / "multitask.png"
    proc = preloaded_python.run([PYTHON, "tools/bench/multitask_quality.py", f"--data={tmp_path}", f"--png={png}",
                                 "--window=200", "--skip_single"], preload="trainer", cwd=ROOT, env=python_env(),
                                capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.index("\n}\n") + 2])
    assert result["samples"] == 500 and result["half"] == 250, result
    assert result["liked_auc"]["single"] is None and result["targets"]["liked AUC >= single - 0.003"] is None
    # The generating model's own liked AUC is 0.95 (its mean rating as the score); chance is 0.5.
    assert result["liked_auc"]["multitask"]["second_half"] > 0.65, result
    # Ratings have a standard deviation near 1 about their mean of ~3.5: a model still predicting its initial
    # 0 would score an RMSE above 3.5, one that learned only the mean about 1.
    rmse = result["rating_rmse"]
    assert rmse["multitask"]["second_half"] < 1.5, result
    assert 0.5 < rmse["item_mean_baseline"]["second_half"] < 1.5, result
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_sequence_config_trains_with_the_histories_and_the_bench_reports_it(tmp_path):
    """samples/movielens_din.config loads and trains 500 generated ratings, each with the movie's earlier raters,
    through the broker (the bench: tools/bench/sequence_quality.py, without its single-task run). (500: second-half
    AUC ~0.83, empty histories 12%, mean length 4.1 (the data's, seeded); 800 took 150 more steps for ~0.83.)"""
    movielens_files(tmp_path, 500)
    png = tmp_path / "sequence.png"
    proc = preloaded_python.run([PYTHON, "tools/bench/sequence_quality.py", f"--data={tmp_path}", f"--png={png}",
                                 "--window=200", "--skip_single"], preload="trainer", cwd=ROOT, env=python_env(),
                                capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.index("\n}\n") + 2])
    assert result["samples"] == 500 and result["half"] == 250, result
    assert result["auc"]["single"] is None and result["targets"]["AUC >= single + 0.005"] is None
    # most samples carry a history, none longer than the config's sequence_length (the stream's default)
    assert result["history"]["at_most"] == 100, result
    assert 0 < result["history"]["empty_share"] < 0.2 and 3 < result["history"]["mean_length"] <= 100, result
    # The generating model's own AUC is about 0.9 (its mean rating as the score); chance is 0.5.
    assert result["auc"]["sequence"]["second_half"] > 0.7, result
    assert result["samples_per_sec"]["sequence"] > 0, result
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_sequence_sample_trains_replays_exactly_exports_and_serves_what_it_scores(broker, topic, tmp_path):
    """samples/movielens_din.config itself, with its two attentions (the movie's raters; the user's nearest
    movies with their ratings and similarity buckets), on 800 generated ratings with the bench's sequences,
    written as production writes: lz4-compressed Kafka transactions of 100, every fourth aborted. Every
    committed sample trains and no aborted one, its published updates replay into an equal model, and the
    export serves over REST what the trainer scores (an empty history and full ones)."""
    sample = f"{ROOT}/samples/movielens_din.config"
    movielens_files(tmp_path, 800)
    names = config_sequences(sample)
    lines = sequence_lines(str(tmp_path), config_lengths(sample, names), names)
    broker.create_topic(topic, 1)
    lines = write_transactions(broker.bootstrap, topic, lines, 100, 1, send_before_abort=False)  # the committed ones
    assert len(lines) == 600 and sum(1 for line in lines if line.split(b",")[-3]) > 300  # most carry neighbours
    config = load_pipeline_config(sample)
    apply_edit_config_json(config, {"model_dir": str(tmp_path / "m"), "kafka_train_input.server": broker.bootstrap,
                                    "kafka_train_input.topic": topic})
    publish = config.train_config.incr_save_config  # the sample publishes nothing; a deployment would
    publish.sparse_save_steps, publish.dense_save_steps = 20, 30
    publish.kafka.server, publish.kafka.topic = broker.bootstrap, topic + "_updates"
    trainer = build_trainer(config, online=False, source=KafkaInput(config.kafka_train_input, 200, 200))
    summary = trainer.run()
    assert summary.samples == 600 and summary.rejected == 0
    reader = KafkaUpdateReader(broker.bootstrap, topic + "_updates")
    records = reader.read_available()
    reader.close()
    assert differences_from_model(_replay(records, "m"), trainer.model, read_parameter_ids(str(tmp_path / "m"))) == []

    export(tmp_path / "m", tmp_path / "export")
    asked = lines[-6:] + [b"1,1,2,Action,10,3,,,,,"]  # a new user on a movie nobody rated: no history at all
    expected = trained_outputs(trainer, asked)
    fields = [f.input_name for f in config.data_config.input_fields][1:]
    server = Server(tmp_path / "export", tmp_path / "serve.log")
    try:
        served = server.predict_outputs([dict(zip(fields, line.decode().split(",")[1:])) for line in asked])
        np.testing.assert_allclose(served["probs"], expected["probs"], atol=1e-5)
    finally:
        assert server.stop() == 0
