"""Loading, overriding and validating the pipeline config."""
from easyonline.config.errors import ConfigError
from easyonline.config.loader import load_pipeline_config, parse_pipeline_config, apply_edit_config_json, to_text
from easyonline.config.validate import validate_pipeline_config
