"""The online training loop and what it needs: optimizer, metrics, checkpoints, stops."""
