"""What ``python -m easyonline.train`` does once its flags are parsed (jobs/train_cli.py): this process's role."""
from absl import flags

from easyonline.distributed.cluster_config import cluster_from_env
from easyonline.distributed.server import run_server
from easyonline.jobs.config_flags import config_from_flags
from easyonline.jobs.online_train import online_train
from easyonline.train.prometheus_metrics import PrometheusMetrics
from easyonline.train.step_spans import StepSpans
from easyonline.train.threading_config import apply_thread_config


def train(FLAGS: flags.FlagValues) -> int:  # pylint: disable=invalid-name
    """A ps serves until stopped; a trainer (alone, chief or worker) trains and prints its summary."""
    config = config_from_flags(online=FLAGS.online)
    cluster = cluster_from_env()
    if cluster is not None and cluster.task_type == "ps":
        return run_server(cluster, config.train_config)
    apply_thread_config(config.train_config)
    callbacks = [PrometheusMetrics(FLAGS.metrics_port, FLAGS.metrics_host)] if FLAGS.metrics_port else []
    if FLAGS.record_step_spans:
        callbacks.append(StepSpans())
    summary = online_train(config, online=FLAGS.online, callbacks=callbacks)
    print("training summary")
    for line in summary.lines():
        print("  " + line)
    return 0
