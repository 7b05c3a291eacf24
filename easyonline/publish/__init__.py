"""The trainer's side of incremental updates: what changed, when to publish it, base and delta saves.

- publish_callback: the trainer's hook (IncrementalPublish), on the schedule of incr_save_config
- publisher: the background sender (retries, backpressure, sequence numbers)
- snapshot: reads the changed rows and dense values out of the model
- base_delta: base and delta inference models on files (InferenceSaves)

The message format, the transports and the apply rules are in ``easyonline.updates``,
which serving depends on too.
"""
