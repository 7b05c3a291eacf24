"""``python -m easyonline.tools.movielens_sequences`` end to end: samples/movielens_din.config's lines from generated
MovieLens-shaped files, from a file of rating events and from a topic to a topic; each sample's sequences hold
only events strictly before its own time (none of the same second, though MovieLens users rate several movies in
one), so nothing later in the stream changes a sample's line."""
import os
import subprocess

from kafka import KafkaConsumer, TopicPartition

from easyonline.config import load_pipeline_config
from easyonline.core.errors import BAD_CONFIG, BAD_INPUT, UNREACHABLE
from easyonline.movielens.ratings import GENRES
from easyonline.tools.stream_producer import produce
from tests.conftest import PYTHON, ROOT, python_env
from tests.helpers.movielens_files import movielens_files

SAMPLE = os.path.join(ROOT, "samples", "movielens_din.config")
FIELDS = [f.input_name for f in load_pipeline_config(SAMPLE).data_config.input_fields]
RATERS = 100  # the sample's SequenceFeatures keep the movie's last 100 raters and the user's 20 nearest movies
NEAREST = 20


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "easyonline.tools.movielens_sequences", *args], cwd=ROOT, env=python_env(),
                          capture_output=True, text=True, timeout=300)


def _events(directory) -> list:
    """u.data + u.item as (time, user, movie, rating, genres), in time order (the file's order within a second),
    read here rather than by the module under test."""
    genres = {}
    for line in (directory / "u.item").read_text(encoding="latin-1").splitlines():
        fields = line.split("|")
        genres[fields[0]] = "|".join(g for g, flag in zip(GENRES, fields[5:]) if flag == "1")
    rows = [line.split("\t") for line in (directory / "u.data").read_text().splitlines()]
    rows.sort(key=lambda r: int(r[3]))
    return [(int(t), user, movie, int(rating), genres[movie]) for user, movie, rating, t in rows]


def _check_histories(lines: list, events: list) -> None:
    """Every sample by brute force: its fields, the movie's raters and their ratings (the most recent first), and
    its neighbours (movies the user rated, each with the rating given), all of events strictly before its time."""
    assert len(lines) == len(events)
    same_second_seen = 0
    for i, (line, (stamp, user, movie, rating, genres)) in enumerate(zip(lines, events)):
        row = dict(zip(FIELDS, line.split(",")))
        assert len(line.split(",")) == len(FIELDS), line
        assert (row["label"], row["user"], row["movie"], row["genres"]) == (str(int(rating >= 4)), user, movie, genres)
        earlier = [e for e in events[:i] if e[0] < stamp]
        same_second_seen += any(e[0] == stamp and (e[1] == user or e[2] == movie) for e in events[:i])
        raters = [e for e in reversed(earlier) if e[2] == movie][:RATERS]
        assert row["movie_raters"] == "|".join(e[1] for e in raters), (i, line)
        assert row["movie_rater_ratings"] == "|".join(str(e[3]) for e in raters), (i, line)
        mine = [(e[2], str(e[3])) for e in earlier if e[1] == user]
        nearest = list(zip(*(row[name].split("|") if row[name] else [] for name in
                             ("neighbour_movies", "neighbour_ratings", "neighbour_similarity"))))
        assert len(nearest) == min(len(mine), NEAREST), (i, line)
        assert all((m, r) in mine for m, r, _ in nearest), (i, line)
    assert same_second_seen >= len(events) // 100  # the data does test the same-second rule


def test_movielens_files_and_an_event_file_give_the_samples_with_histories_of_earlier_events_only(tmp_path):
    movielens_files(tmp_path, 900)
    events = _events(tmp_path)
    out = tmp_path / "din.csv"
    proc = _run(f"--movielens_dir={tmp_path}", f"--output_path={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"wrote 900 samples ({','.join(FIELDS)})" in proc.stdout
    lines = out.read_text().splitlines()
    _check_histories(lines, events)

    # the same ratings as a stream of events: the same lines
    (tmp_path / "events.csv").write_text("".join(f"{t},{u},{m},{r},{g}\n" for t, u, m, r, g in events))
    proc = _run(f"--input_path={tmp_path / 'events.csv'}", f"--output_path={tmp_path / 'from_events.csv'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "from_events.csv").read_text().splitlines() == lines

    # nothing later changes a sample: the first 600 events (whole seconds) give the first 600 lines
    (tmp_path / "head.csv").write_text("".join(f"{t},{u},{m},{r},{g}\n" for t, u, m, r, g in events[:600]))
    assert events[599][0] < events[600][0]
    proc = _run(f"--input_path={tmp_path / 'head.csv'}", f"--output_path={tmp_path / 'head_out.csv'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "head_out.csv").read_text().splitlines() == lines[:600]

    # --sequence_length cuts every sequence
    proc = _run(f"--input_path={tmp_path / 'events.csv'}", f"--output_path={tmp_path / 'short.csv'}",
                "--sequence_length=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    short = [line.split(",") for line in (tmp_path / "short.csv").read_text().splitlines()]
    assert max(len(row[k].split("|")) for row in short for k in range(6, len(FIELDS))) == 2
    assert [row[6] for row in short] == ["|".join(line.split(",")[6].split("|")[:2]) for line in lines]


def test_a_topic_of_events_becomes_a_topic_of_samples(broker, topic, tmp_path):
    movielens_files(tmp_path, 300)
    events = _events(tmp_path)
    broker.create_topic(topic + "_ratings", 1)
    broker.create_topic(topic + "_samples", 1)
    produce(broker.bootstrap, topic + "_ratings", [[f"{t},{u},{m},{r},{g}".encode() for t, u, m, r, g in events]],
            lines_per_message=7, partitions=1)  # several events a message, as a batching producer sends them
    proc = _run(f"--kafka_server={broker.bootstrap}", f"--input_topic={topic}_ratings",
                f"--output_topic={topic}_samples")
    assert proc.returncode == 0, proc.stderr[-3000:]
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    partition = TopicPartition(topic + "_samples", 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    got: list = []
    for _ in range(60):
        got += [record.value.decode() for records in consumer.poll(1000).values() for record in records]
        if len(got) >= len(events):
            break
    consumer.close()
    _check_histories(got, events)
    proc = _run(f"--movielens_dir={tmp_path}", f"--output_path={tmp_path / 'din.csv'}")
    assert (tmp_path / "din.csv").read_text().splitlines() == got


def test_bad_flags_and_inputs_exit_with_their_codes_and_name_the_cause(tmp_path):
    proc = _run(f"--output_path={tmp_path / 'x.csv'}")
    assert proc.returncode == BAD_CONFIG and "exactly one of --movielens_dir" in proc.stderr
    proc = _run(f"--input_path={tmp_path / 'none.csv'}", f"--output_path={tmp_path / 'x.csv'}")
    assert proc.returncode == UNREACHABLE and "none.csv" in proc.stderr
    (tmp_path / "late.csv").write_text("10,u,a,5,Drama\n9,u,b,4,\n")
    proc = _run(f"--input_path={tmp_path / 'late.csv'}", f"--output_path={tmp_path / 'x.csv'}")
    assert proc.returncode == BAD_INPUT and "line 2" in proc.stderr and "time order" in proc.stderr
    (tmp_path / "bad.csv").write_text("10,u,a,five,Drama\n")
    proc = _run(f"--input_path={tmp_path / 'bad.csv'}", f"--output_path={tmp_path / 'x.csv'}")
    assert proc.returncode == BAD_INPUT and "line 1" in proc.stderr
    (tmp_path / "x.config").write_text('data_config { input_fields { input_name: "label" input_type: INT32 } }')
    proc = _run(f"--config={tmp_path / 'x.config'}", f"--input_path={tmp_path / 'late.csv'}",
                f"--output_path={tmp_path / 'x.csv'}")
    assert proc.returncode == BAD_CONFIG and "input_fields" in proc.stderr
    assert not (tmp_path / "x.csv").exists()
