"""Checkpoints: the parameters and the stream positions saved together, restored, mirrored to OSS."""
