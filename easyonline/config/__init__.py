"""Loading, overriding and validating the pipeline config (one protobuf config drives everything).

``validate.validate_pipeline_config`` checks a whole config, naming the bad
field; it is imported from its module (it reads the model registry).
"""
from easyonline.config.loader import apply_edit_config_json, load_pipeline_config, parse_pipeline_config, to_text
from easyonline.core.errors import ConfigError
