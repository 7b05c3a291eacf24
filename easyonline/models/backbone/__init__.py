"""EasyRec's backbone: blocks over feature groups and their layers (graph.py, bst_encoder.py); the model is
models/backbone_rank_model.py."""
