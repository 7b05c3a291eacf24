"""``python -m easyonline.predict``: scores a file or a topic with an export or a checkpoint."""
