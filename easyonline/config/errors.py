"""The one error type for a bad config: it always names the field's path."""


class ConfigError(ValueError):
    """A config problem; ``path`` is the dotted field path, e.g. ``data_config.batch_size``."""

    def __init__(self, path: str, message: str):
        self.path = path
        super().__init__(f"config field {path}: {message}" if path else f"config: {message}")
