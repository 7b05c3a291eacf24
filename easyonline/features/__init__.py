"""From config to feature specs, and from CSV lines to feature tensors."""
from easyonline.features.feature_spec import FeatureSpecs, IdFeature, RawFeature, TableSpec, build_feature_specs
from easyonline.features.csv_parser import CsvParser, ParsedBatch
