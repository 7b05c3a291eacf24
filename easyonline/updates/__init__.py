"""The update protocol, shared by the trainer (which publishes) and serving (which applies).

- codec: the UpdateMessage wire format, split below a size limit
- param_ids: stable ids of dense parameters and tables (files in model_dir and the export)
- apply_rules: what applying a message means (order, duplicates, gaps, full syncs, checks)
- full_sync: following a full sync to its end, and the rows it did not carry (removed)
- transport: where a stream lives (Kafka topic or directory); open_sink / open_reader
- kafka_sink, directory_sink, readers: the two transports
- replica: an in-memory copy built by the apply rules; model_diff: compare it with a live model
"""
