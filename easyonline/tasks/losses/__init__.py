"""The loss functions a task can be given (EasyRec's ``losses``, easy_rec/python/loss/ and builders/loss_builder.py).

Each is a plain function ``(labels [B], logits [B] (JRC: [B, 2]), weights [B] or None, sessions [B] or None,
**params) -> scalar``, with EasyRec's formula and reduction; ``terms.py`` binds a config ``Loss``'s parameters
and weight to one (a ``LossTerm``), and a task sums its terms (tasks/ranking.py, tasks/regression.py).
"""
from easyonline.tasks.losses.terms import LossTerm, loss_term

__all__ = ["LossTerm", "loss_term"]
