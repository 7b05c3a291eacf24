"""EasyRec's backbone: blocks over feature groups and their layers (graph.py, bst_encoder.py); the model is
models/rank_model.py."""
