"""``python -m easyonline.eval``: evaluates every new checkpoint of a model_dir on the eval input."""
