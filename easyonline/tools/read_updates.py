"""Prints what an update topic or directory holds: one line per message, then a summary.

    python -m easyonline.tools.read_updates --kafka_server 127.0.0.1:9092 --topic updates
    python -m easyonline.tools.read_updates --dir /path/to/incr_save_dir
    python -m easyonline.tools.read_updates --config online.config   # its incr_save_config

It checks the stream as serving would (sequence gaps, malformed messages)
and exits 1 when it found either.
"""
import json
import sys
from typing import Dict, List, Tuple

from absl import flags

from easyonline.config.loader import load_pipeline_config
from easyonline.updates.apply_rules import DUPLICATE, NEXT, StreamCursor
from easyonline.updates.codec import MalformedUpdateError, decode_update, describe
from easyonline.updates.transport import DIRECTORY, KAFKA, StreamLocation, open_reader
from easyonline.utils.cli import run_command

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("kafka_server", "", "Bootstrap brokers of the update topic (host:port, comma-separated).")
    flags.DEFINE_string("topic", "", "The update topic (with --kafka_server).")
    flags.DEFINE_integer("offset", 0, "Kafka offset to start from.")
    flags.DEFINE_string("dir", "", "An incr_save_dir to read instead of Kafka.")
    flags.DEFINE_string("config", "", "A pipeline config: read the stream its train_config.incr_save_config names.")
    flags.DEFINE_integer("max_messages", 0, "Stop after this many messages (0: everything there now).")
    flags.DEFINE_integer("sample_keys", 3, "Keys to show per table and message.")
    flags.DEFINE_bool("json", False, "Print JSON lines instead of the human table.")


def read_all(location: StreamLocation, start: int = 0) -> List[Tuple[int, bytes]]:
    """Every (position, message) there now, from ``start`` (a Kafka offset or a sequence number)."""
    reader = open_reader(location, start)
    out: List[Tuple[int, bytes]] = []
    try:
        while True:  # a directory reader returns a bounded number of files a call
            batch = reader.read_available()
            out.extend(batch)
            if not batch or location.storage == KAFKA:
                return out
    finally:
        reader.close()


def check_stream(records: List[Tuple[int, bytes]], sample_keys: int = 0) -> Tuple[List[Dict], Dict]:
    """Decodes each record; returns per-message summaries and totals (gaps and malformed counted)."""
    rows, totals = [], {"messages": 0, "bytes": 0, "malformed": 0, "gaps": 0, "duplicates": 0, "last_sequence": None}
    cursors: Dict[str, StreamCursor] = {}  # per model, judged by the rules every reader applies
    for position, data in records:
        totals["messages"] += 1
        totals["bytes"] += len(data)
        try:
            message = decode_update(data)
        except MalformedUpdateError as e:
            totals["malformed"] += 1
            rows.append({"position": position, "error": str(e)})
            continue
        summary = describe(message, sample_keys)
        summary["position"], summary["bytes"] = position, len(data)
        header = message.header
        cursor = cursors.setdefault(header.model_name, StreamCursor(header.model_name, header.sequence))
        verdict = cursor.verdict(header)
        if verdict == DUPLICATE:
            totals["duplicates"] += 1
            summary["note"] = "already seen"
        elif verdict != NEXT:  # a gap, another stream, an implausible number: what a reader refuses
            totals["gaps"] += 1
            summary["note"] = f"{verdict.upper()} after {cursor.next_sequence - 1}"
        else:
            switched = cursor.stream_id is not None and header.stream_id != cursor.stream_id
            if header.sequence > cursor.next_sequence or switched:
                summary["note"] = f"full sync from {cursor.next_sequence - 1} of stream {cursor.stream_id}"
            cursor.advance(header)
        totals["last_sequence"] = header.sequence
        rows.append(summary)
    return rows, totals


def _line(row: Dict) -> str:
    if "error" in row:
        return f"{row['position']:>8}  MALFORMED: {row['error']}"
    rows = " ".join(f"t{t}:{n}" for t, n in row["rows"].items()) or "-"
    deletes = " ".join(f"t{t}:{n}" for t, n in row["deletes"].items()) or "-"
    keys = " ".join(f"t{t}:{k}" for t, k in row.get("sample_keys", {}).items())
    return (f"{row['position']:>8}  seq={row['sequence']} step={row['step']} part={row['part']} bytes={row['bytes']} "
            f"dense={row['dense']} rows={rows} deletes={deletes}{' FULL_SYNC' if row.get('full_sync') else ''}"
            f"{' END' if row.get('full_sync_end') else ''}"
            f"{'  ' + row['note'] if 'note' in row else ''}{'  keys ' + keys if keys else ''}")


def main(argv) -> int:
    del argv
    server, topic, directory = FLAGS.kafka_server, FLAGS.topic, FLAGS.dir
    if FLAGS.config:
        configured = StreamLocation.from_config(load_pipeline_config(FLAGS.config).train_config.incr_save_config)
        server, topic, directory = configured.server, configured.topic, configured.directory
    if not directory and not (server and topic):
        print("read_updates: give --dir, or --kafka_server and --topic, or --config", file=sys.stderr)
        return 2
    location = StreamLocation(DIRECTORY, directory=directory) if directory else \
        StreamLocation(KAFKA, server=server, topic=topic)
    records = read_all(location, FLAGS.offset)
    if FLAGS.max_messages:
        records = records[:FLAGS.max_messages]
    rows, totals = check_stream(records, FLAGS.sample_keys)
    for row in rows:
        print(json.dumps(row) if FLAGS.json else _line(row))
    print(json.dumps(totals) if FLAGS.json else
          f"{totals['messages']} messages, {totals['bytes']} bytes, last sequence {totals['last_sequence']}, "
          f"{totals['gaps']} gaps, {totals['duplicates']} duplicates, {totals['malformed']} malformed")
    return 1 if totals["gaps"] or totals["malformed"] else 0


def run() -> None:
    run_command(define_flags, main)


if __name__ == "__main__":
    run()
