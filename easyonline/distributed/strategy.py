"""EasyRec's ``train_config.train_distribute``, read as what runs here.

Training here is one trainer process, or one trainer of the asynchronous
parameter-server cluster ``TF_CONFIG`` names (docs/distributed.md); there is
no synchronous or GPU training. So:

* ``NoStrategy`` (the default) and ``PSStrategy`` mean exactly that: with
  ``TF_CONFIG`` the ps cluster, without it one process;
* the synchronous and GPU strategies (Mirrored, MultiWorkerMirrored,
  CollectiveAllReduce, Horovod, Sok, EmbeddingParallel, Exascale) are
  accepted, so that EasyRec's samples run, with one warning saying what runs
  instead; so is ``num_gpus_per_worker`` above 1.
"""
import logging
from typing import Optional

from easyonline.distributed.cluster_config import ClusterConfig
from easyonline.protos import pipeline_pb2

log = logging.getLogger(__name__)
Strategy = pipeline_pb2.DistributionStrategy

# What each of EasyRec's synchronous / GPU strategies does there (the warning names it).
SYNCHRONOUS = {
    Strategy.MirroredStrategy: "synchronous training on the GPUs of one machine",
    Strategy.CollectiveAllReduceStrategy: "synchronous all-reduce training over several machines",
    Strategy.ExascaleStrategy: "PAI's exascale embedding training",
    Strategy.MultiWorkerMirroredStrategy: "synchronous all-reduce training over the GPUs of several machines",
    Strategy.HorovodStrategy: "synchronous Horovod all-reduce training",
    Strategy.SokStrategy: "GPU embeddings of NVIDIA's Sparse Operation Kit, over Horovod",
    Strategy.EmbeddingParallelStrategy: "embeddings sharded over Horovod's GPU workers",
}


def what_runs(cluster: Optional[ClusterConfig]) -> str:
    """This process's training, as the warning says it."""
    if cluster is None:
        return "this trainer runs as one process on the CPU (no TF_CONFIG)"
    return (f"this process runs as trainer {cluster.trainer_index} of {cluster.num_trainers} of the asynchronous "
            f"parameter-server cluster TF_CONFIG names ({cluster.num_ps} ps), on the CPU (docs/distributed.md)")


def distribution_warning(train: pipeline_pb2.TrainConfig, cluster: Optional[ClusterConfig]) -> Optional[str]:
    """The one warning for ``train_distribute`` / ``num_gpus_per_worker`` (None when they mean what runs)."""
    strategy = train.train_distribute
    gpus = train.num_gpus_per_worker if train.HasField("num_gpus_per_worker") else 1
    if strategy in SYNCHRONOUS:
        text = (f"train_config.train_distribute: {Strategy.Name(strategy)} (EasyRec: {SYNCHRONOUS[strategy]}) "
                f"is not available here: {what_runs(cluster)}")
    elif gpus > 1:
        text = f"train_config.train_distribute: {Strategy.Name(strategy)}: {what_runs(cluster)}"
    else:
        return None
    if gpus > 1:
        text += f"; num_gpus_per_worker: {gpus} is ignored (no GPU training here)"
    return text


def log_distribution(train: pipeline_pb2.TrainConfig, cluster: Optional[ClusterConfig]) -> None:
    """Logs at a trainer's start what ``train_distribute`` means here: one warning for a strategy this project
    does not have (module docstring), an info line for PSStrategy."""
    warning = distribution_warning(train, cluster)
    if warning:
        log.warning("%s", warning)
    elif train.train_distribute == Strategy.PSStrategy:
        log.info("train_config.train_distribute: PSStrategy: %s", what_runs(cluster))
