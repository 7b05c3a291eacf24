"""Incremental updates: the trainer publishes changed parameters; serving applies them.

- param_ids: stable ids of dense parameters and tables (files in model_dir)
- update_codec: the UpdateMessage format, split below a size limit
- change_tracker: keys trained or deleted since the last sparse publish
- kafka_sink / directory_sink: where messages go; update_stream: reading them back
- publisher: the background sender; publish_callback: the trainer's hook
- replica: applies messages to an in-memory copy (checks order and gaps)
"""
