"""Reads a protobuf text config and applies ``--edit_config_json`` overrides.

Parse errors are turned into :class:`ConfigError` naming the dotted path of
the offending field, which protobuf's own message (a line and column) lacks.
"""
import difflib
import json
import logging
import re
from typing import Any, Dict, List, Union

from google.protobuf import descriptor, descriptor_pool, json_format, text_format

from easyonline.core.errors import ConfigError
from easyonline.config.easyrec_compat import normalize, read_easyrec_text
from easyonline.config.secrets import redacted
from easyonline.protos import pipeline_pb2
from easyonline.utils import fileio

log = logging.getLogger(__name__)
_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|#[^\n]*|[A-Za-z_][\w]*|[{}<>\[\]:,]|\S')


def _enclosing_path(text: str, line: int, column: int) -> List[str]:
    """The names of the messages open at (line, column) of ``text``, outermost first."""
    lines = text.split("\n")
    if 0 < line <= len(lines):
        text = "\n".join(lines[: line - 1] + [lines[line - 1][: max(column - 1, 0)]])
    stack: List[str] = []
    name = None
    for token in _TOKEN.findall(text):
        if token.startswith("#") or token == ":":
            continue
        if token in ("{", "<"):
            stack.append(name or "?")
        elif token in ("}", ">") and stack:
            stack.pop()
        name = token if re.match(r"[A-Za-z_]", token) else None
    return stack


_REPEATED_SINGULAR = re.compile(r'should not have multiple "(\w+)" fields')


def parse_pipeline_config(text: str, source: str = "<string>") -> pipeline_pb2.PipelineConfig:
    """Parses protobuf text format into a PipelineConfig, with path-naming errors.

    A singular field given twice takes its last value, as EasyRec reads its configs (``text_format.Merge``),
    with a warning naming it; anything else protobuf refuses is a ConfigError naming the field."""
    config = pipeline_pb2.PipelineConfig()
    easyrec_text = read_easyrec_text(text)
    try:
        try:
            text_format.Parse(easyrec_text, config)
        except text_format.ParseError as e:
            repeated = _REPEATED_SINGULAR.search(str(e))
            if repeated is None:
                raise
            config.Clear()
            text_format.Merge(easyrec_text, config)
            line, column = e.GetLine() or 0, e.GetColumn() or 0
            field = ".".join(_enclosing_path(text, line, column) + [repeated.group(1)])
            log.warning("config field %s is given more than once (%s:%d): the last value is used, as EasyRec "
                        "does", field, source, line)
    except text_format.ParseError as e:
        line, column = getattr(e, "GetLine", lambda: 0)() or 0, getattr(e, "GetColumn", lambda: 0)() or 0
        message = str(e)
        field = re.search(r'no field named "([^"]+)"|field "([^"]+)"|for field (\w+)', message)
        path = _enclosing_path(text, line, column)
        if field:
            path.append(field.group(1) or field.group(2) or field.group(3))
        else:  # e.g. an unknown enum value: the field is the name before the column
            lines = text.split("\n")
            before = lines[line - 1][: max(column - 1, 0)] if 0 < line <= len(lines) else ""
            named = re.search(r"([A-Za-z_]\w*)\s*:\s*$", before)
            if named:
                path.append(named.group(1))
        raise ConfigError(".".join(path) or "<top>", f"{source}:{line}:{column}: {_explained(message)}") from None
    return config


_POSITION = re.compile(r"^\d+:\d+ : ")
_NO_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "(\w+)"')
_NO_VALUE = re.compile(r'Enum type "([\w.]+)" has no value named (\w+)')


def _explained(message: str) -> str:
    """protobuf's parse error without the position it starts with (the caller says ``file:line:column``
    once), and for an unknown field or enum value the closest names that exist (a typo is the usual cause;
    --edit_config_json lists the fields too)."""
    message = _POSITION.sub("", message)
    pool = descriptor_pool.Default()
    try:
        field = _NO_FIELD.search(message)
        if field:
            names = list(pool.FindMessageTypeByName(field.group(1)).fields_by_name)
            return message + _closest(field.group(2), names)
        value = _NO_VALUE.search(message)
        if value:
            names = list(pool.FindEnumTypeByName(value.group(1)).values_by_name)
            return message + _closest(value.group(2), names)
    except KeyError:  # a type of another pool: the message as protobuf has it
        pass
    return message


def _closest(name: str, names: List[str]) -> str:
    """" Did you mean a, b or c?" naming the known names closest to ``name``; the known names when none is close."""
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if len(close) > 1:
        return f" Did you mean {', '.join(close[:-1])} or {close[-1]}?"
    if close:
        return f" Did you mean {close[0]}?"
    return f" (known: {', '.join(sorted(names))})"


def load_pipeline_config(path: str, edit_config_json: str = "") -> pipeline_pb2.PipelineConfig:
    """Loads a config file (local or oss://), applies JSON overrides and reads EasyRec's forms
    (easyrec_compat.py)."""
    try:
        text = fileio.read_text(path)
    except FileNotFoundError:
        raise ConfigError("", f"config file {path} does not exist") from None
    config = parse_pipeline_config(text, source=path)
    if edit_config_json:
        apply_edit_config_json(config, edit_config_json)
    normalize(config)
    return config


def to_text(config: pipeline_pb2.PipelineConfig) -> str:
    """The config as text to save or print: secrets redacted (see secrets.py)."""
    return text_format.MessageToString(redacted(config))


_SEGMENT = re.compile(r"^([A-Za-z_]\w*)(?:\[(\d+)\])?$")


def _convert(field: descriptor.FieldDescriptor, value: Any, path: str) -> Any:
    fd = descriptor.FieldDescriptor
    try:
        if field.type == fd.TYPE_ENUM:
            if isinstance(value, str):
                enum_value = field.enum_type.values_by_name.get(value)
                if enum_value is None:
                    allowed = ", ".join(field.enum_type.values_by_name)
                    raise ConfigError(path, f"{value!r} is not one of {allowed}")
                return enum_value.number
            return int(value)
        if field.type == fd.TYPE_BOOL:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                return value.lower() in ("true", "1")
            return bool(value)
        if field.type in (fd.TYPE_FLOAT, fd.TYPE_DOUBLE):
            return float(value)
        if field.type == fd.TYPE_STRING:
            return value if isinstance(value, str) else json.dumps(value)
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(path, f"cannot set {value!r}: expected {field.type} value") from None


def _merge_json(value: Any, message, path: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(path, f"a message takes a JSON object, got {value!r}")
    try:
        json_format.ParseDict(value, message)
    except json_format.ParseError as e:
        raise ConfigError(path, str(e)) from None


def apply_edit_config_json(config: pipeline_pb2.PipelineConfig, edits: Union[str, Dict[str, Any]]) -> None:
    """Applies EasyRec-style overrides: {"train_config.num_steps": 10, "feature_configs[0].embedding_dim": 8}."""
    if isinstance(edits, str):
        try:
            edits = json.loads(edits)
        except json.JSONDecodeError as e:
            raise ConfigError("--edit_config_json", f"not valid JSON: {e}") from None
    if not isinstance(edits, dict):
        raise ConfigError("--edit_config_json", "must be a JSON object of field path -> value")
    for path, value in edits.items():
        message = config
        segments = path.split(".")
        for i, segment in enumerate(segments):
            here = ".".join(segments[: i + 1])
            match = _SEGMENT.match(segment)
            field = message.DESCRIPTOR.fields_by_name.get(match.group(1)) if match else None
            if match is None or field is None:
                known = ", ".join(sorted(message.DESCRIPTOR.fields_by_name))
                raise ConfigError(here, f"no such field (fields here: {known})")
            index = match.group(2)
            last = i == len(segments) - 1
            is_repeated = field.label == descriptor.FieldDescriptor.LABEL_REPEATED
            is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
            if is_map:
                if not last or not isinstance(value, dict):
                    raise ConfigError(here, "a map field takes a JSON object")
                target = getattr(message, field.name)
                for k, v in value.items():
                    target[str(k)] = str(v)
                break
            if is_repeated and index is not None:
                container = getattr(message, field.name)
                idx = int(index)
                if idx >= len(container):
                    raise ConfigError(here, f"index {idx} out of range (the list has {len(container)} entries)")
                if field.message_type is None:
                    if not last:
                        raise ConfigError(here, "scalar list entries have no sub-fields")
                    container[idx] = _convert(field, value, here)
                    break
                message = container[idx]
                if last:
                    _merge_json(value, message, here)
                continue
            if is_repeated:
                if not last or not isinstance(value, list):
                    raise ConfigError(here, "a repeated field takes a JSON list (or use name[index])")
                container = getattr(message, field.name)
                del container[:]
                for item in value:
                    if field.message_type is None:
                        container.append(_convert(field, item, here))
                        continue
                    _merge_json(item, container.add(), here)
                break
            if field.message_type is not None:
                message = getattr(message, field.name)
                if last:
                    _merge_json(value, message, here)
                continue
            if not last:
                raise ConfigError(here, "is a scalar; it has no sub-fields")
            setattr(message, field.name, _convert(field, value, here))
