"""JSON lines and user parse functions, turned into samples by the same decoder as CSV.

Each record (a dict keyed by input_name) is written as one quoted CSV line in
input_fields order and decoded by CsvParser, so type checks, hashing and the
rejection of bad samples (with their reason) are the same for every format.
A list in a tag or sequence field is its values (joined with the feature's
separator); an object in a weighted tag field is its {id: weight} pairs.
"""
import json
from typing import Any, Callable, Dict, List, Sequence

from easyonline.features.csv_parser import CsvParser, ParsedBatch
from easyonline.core.rejections import BAD_RECORD, rejection
from easyonline.features.feature_spec import FeatureSpecs
from easyonline.features.parse_fn import load_parse_fn
from easyonline.protos import pipeline_pb2


def _json_records(line: bytes) -> List[Dict[str, Any]]:
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return [value]


class RecordParser:
    """Parses lines through a records function (JSON or user), then CsvParser's decoder."""

    def __init__(self, specs: FeatureSpecs, to_records: Callable[[bytes], Any], source: str):
        self._csv = CsvParser(specs)
        self._to_records = to_records
        self._source = source
        self._fields = [f.name for f in specs.input_fields]
        self._labels = set(specs.label_names)
        self._joiners = {part.input_name: part.separator for f in specs.id_features for part in (f.combo or (f,))
                         if part.multi_value}
        self._joiners.update((f.input_name, f.separator) for f in specs.raw_features if f.is_vector)
        # sequences of several values a position: a list of lists is their positions' values
        self._inner = {f.input_name: f.multi_separator for f in specs.id_features if f.multi_separator}
        # weighted tags: a JSON object {id: weight} is their "id<kv>weight" values
        self._pairs = {f.input_name: f.kv_separator for f in specs.id_features if f.weighted}
        self._separator = specs.separator

    def _cell(self, name: str, value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, bool):
            text = "1" if value else "0"
        elif isinstance(value, (list, tuple)) and name in self._joiners:
            text = self._joiners[name].join(
                self._inner[name].join(str(x) for x in v) if isinstance(v, (list, tuple)) and name in self._inner
                else str(v) for v in value)
        elif isinstance(value, dict) and name in self._pairs:
            text = self._joiners[name].join(f"{k}{self._pairs[name]}{v}" for k, v in value.items())
        elif isinstance(value, (dict, list, tuple)):
            raise ValueError(f"field {name!r} holds a {type(value).__name__}")
        else:
            text = str(value)
        return '"' + text.replace('"', '""') + '"' if (self._separator in text or '"' in text) else text

    def _to_line(self, record: Dict[str, Any]) -> bytes:
        missing = [label for label in self._labels if record.get(label) is None]
        if missing:
            raise ValueError(f"label field {missing[0]!r} is missing")
        return self._separator.join(self._cell(name, record.get(name)) for name in self._fields).encode()

    def parse(self, lines: Sequence[bytes]) -> ParsedBatch:
        good, rejected = [], []
        for line in lines:
            if not line.strip():
                continue
            try:
                records = self._to_records(line)
                if isinstance(records, dict):
                    records = [records]
                for record in records or []:
                    if not isinstance(record, dict):
                        raise ValueError(f"{self._source} returned a {type(record).__name__}, not a dict")
                    good.append(self._to_line(record))
            except Exception as e:  # pylint: disable=broad-except
                rejected.append((line, rejection(BAD_RECORD, f"{self._source}: {type(e).__name__}: {e}")))
        batch = self._csv.parse_exact(good)
        batch.rejected = rejected + batch.rejected
        return batch


def make_parser(specs: FeatureSpecs, data: pipeline_pb2.DataConfig):
    """The parser for data_config.input_format."""
    if data.input_format == pipeline_pb2.DataConfig.JSON:
        return RecordParser(specs, _json_records, "json")
    if data.input_format == pipeline_pb2.DataConfig.CUSTOM:
        return RecordParser(specs, load_parse_fn(data.parse_fn), data.parse_fn)
    return CsvParser(specs)
