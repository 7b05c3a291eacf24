"""From config to feature specs, and from CSV lines to feature tensors.

``CsvParser`` and ``ParsedBatch`` load TensorFlow, so they are imported on
first use: the Kafka reader process uses the specs and ``vector_csv`` only.
"""
from easyonline.features.feature_spec import FeatureSpecs, IdFeature, RawFeature, TableSpec, build_feature_specs


def __getattr__(name: str):
    if name in ("CsvParser", "ParsedBatch"):
        from easyonline.features import csv_parser  # pylint: disable=g-import-not-at-top  why: loads TensorFlow
        return getattr(csv_parser, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
