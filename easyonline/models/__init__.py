"""Ranking models over dynamic embeddings, registered by name (registry.py) and built from model_config.

Import what you need from its module (``models.builder.build_model``,
``models.registry.register``...): this package's import loads nothing, so the
config validator can read the registry's names without loading a model first.
"""
