"""The ground floor: what every other package may use, and that imports nothing above it.

Errors with their exit codes, the TensorFlow/Keras bootstrap, the callback
contract and the trainer view callbacks get, schedules, the stop signal,
rejection kinds and the prequential metrics. Nothing here imports another
easyonline package (tests/unit/test_import_layers.py checks it).
"""
