"""The MovieLens samples' streams, installed with the package.

``samples/movielens_din.config`` reads behaviour sequences (the movie's earlier raters, the user's earlier
movies most like this one, ...) that its stream must carry: they are built upstream, from the events before
each sample. This package builds them, so that a user who installed easyonline can produce the sample's
input (``python -m easyonline.tools.movielens_sequences``) and the benches and tests build them the same
way: ``ratings`` reads MovieLens-shaped ratings (``u.data`` + ``u.item``, or a time-ordered stream of rating
events), ``sequences`` builds each sample's sequences from events strictly before its own time.
"""
