"""Tasks: what a model is trained to do, as a loss plus the metrics that judge it (TFRS's tasks layer)."""
from easyonline.tasks.ranking import RankingTask
from easyonline.tasks.regression import RegressionTask
from easyonline.tasks.task import Task, Tasks
