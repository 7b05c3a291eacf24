"""Scoring without training: a model restored from a checkpoint or an export, fed by finite passes over inputs."""
