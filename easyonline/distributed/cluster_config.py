"""The cluster and this process's role, from ``TF_CONFIG`` as TensorFlow users write it.

    TF_CONFIG='{"cluster": {"chief": ["h0:2222"], "ps": ["h1:2222", "h2:2222"],
                            "worker": ["h3:2222"]},
                "task": {"type": "ps", "index": 0}}'

The chief and every worker train (EasyRec's convention): they are the
cluster's *trainers*, the chief trainer 0 and worker i trainer i + 1. The
ps hold the parameters. No TF_CONFIG (or an empty one) means
single-process training.
"""
import dataclasses
import json
import os
import re
from typing import Dict, List, Mapping, Optional

from easyonline.core.errors import ConfigError

ROLES = ("chief", "ps", "worker")
_ADDRESS = re.compile(r"^[^\s:]+:\d{1,5}$")


@dataclasses.dataclass
class ClusterConfig:
    cluster: Dict[str, List[str]]
    task_type: str
    task_index: int

    @property
    def num_ps(self) -> int:
        return len(self.cluster["ps"])

    @property
    def num_workers(self) -> int:
        """Worker tasks, not counting the chief (see ``num_trainers``)."""
        return len(self.cluster["worker"])

    @property
    def num_trainers(self) -> int:
        """Tasks that train: the chief and every worker."""
        return 1 + len(self.cluster["worker"])

    @property
    def trainer_index(self) -> int:
        """0 for the chief, 1 + index for a worker (raises for a ps)."""
        if self.task_type == "ps":
            raise ValueError("a ps does not train")
        return 0 if self.task_type == "chief" else 1 + self.task_index

    @property
    def is_chief(self) -> bool:
        return self.task_type == "chief"

    @property
    def device(self) -> str:
        """This task's device prefix, e.g. ``/job:worker/task:0``."""
        return f"/job:{self.task_type}/task:{self.task_index}"

    @property
    def ps_devices(self) -> List[str]:
        return [f"/job:ps/task:{i}" for i in range(self.num_ps)]

    @property
    def address(self) -> str:
        return self.cluster[self.task_type][self.task_index]


def parse_tf_config(text: str) -> Optional[ClusterConfig]:
    """The ClusterConfig in ``text`` (None if empty); a ConfigError on ``TF_CONFIG`` names what is wrong."""
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ConfigError("TF_CONFIG", f"is not JSON: {e}") from None
    if not isinstance(value, dict) or not isinstance(value.get("cluster"), dict):
        raise ConfigError("TF_CONFIG", 'needs {"cluster": {...}, "task": {"type": ..., "index": ...}}')
    cluster = value["cluster"]
    unknown = sorted(set(cluster) - set(ROLES))
    if unknown:
        raise ConfigError("TF_CONFIG.cluster", f"unknown job(s) {unknown}; jobs are {list(ROLES)}")
    for role, least in (("chief", 1), ("ps", 1), ("worker", 0)):
        tasks = cluster.get(role, [] if role == "worker" else None)
        if not isinstance(tasks, list) or len(tasks) < least:
            raise ConfigError(f"TF_CONFIG.cluster.{role}", f"needs a list of at least {least} host:port address(es)")
        bad = [t for t in tasks if not isinstance(t, str) or not _ADDRESS.match(t)]
        if bad:
            raise ConfigError(f"TF_CONFIG.cluster.{role}", f"{bad[0]!r} is not host:port")
    if len(cluster["chief"]) != 1:
        raise ConfigError("TF_CONFIG.cluster.chief", "needs exactly one address (the chief trains and checkpoints)")
    task = value.get("task")
    if not isinstance(task, dict) or task.get("type") not in ROLES:
        raise ConfigError("TF_CONFIG.task.type", f"must be one of {list(ROLES)}, got {task and task.get('type')!r}")
    index = task.get("index", 0)
    count = len(cluster.get(task["type"], []))
    if not isinstance(index, int) or not 0 <= index < count:
        raise ConfigError("TF_CONFIG.task.index", f"must be in [0, {count}) for {task['type']}, got {index!r}")
    return ClusterConfig({role: list(cluster.get(role, [])) for role in ROLES}, task["type"], index)


def cluster_from_env(environ: Mapping[str, str] = os.environ) -> Optional[ClusterConfig]:
    return parse_tf_config(environ.get("TF_CONFIG", ""))
