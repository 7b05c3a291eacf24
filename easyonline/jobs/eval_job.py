"""What ``python -m easyonline.eval`` does once its flags are parsed (jobs/eval_cli.py): scores checkpoints."""
import sys

from absl import flags

from easyonline.checkpoint.checkpointer import latest_checkpoint
from easyonline.checkpoint.mirror import cache_dir_for
from easyonline.eval.evaluator import Evaluator
from easyonline.eval.prometheus_metrics import EvalMetrics
from easyonline.jobs.config_flags import config_from_flags
from easyonline.utils import fileio


def default_eval_dir(model_dir: str) -> str:
    return cache_dir_for(model_dir) + "-eval/eval" if fileio.is_oss(model_dir) else fileio.join(model_dir, "eval")


def evaluate(FLAGS: flags.FlagValues) -> int:  # pylint: disable=invalid-name
    """One checkpoint (--checkpoint_path, --once), or each new one of model_dir until a stop condition."""
    config = config_from_flags(online=False)
    metrics = EvalMetrics(FLAGS.metrics_port, FLAGS.metrics_host) if FLAGS.metrics_port else None

    def print_result(result) -> None:
        print(result.to_json(), flush=True)
        if metrics is not None:
            metrics.update(result)

    evaluator = Evaluator(config, FLAGS.eval_dir or default_eval_dir(config.model_dir),
                          FLAGS.max_eval_samples or config.eval_config.num_examples)
    try:
        if FLAGS.checkpoint_path or FLAGS.once:
            where = FLAGS.checkpoint_path or config.model_dir
            path = latest_checkpoint(where)
            if path is None:
                raise FileNotFoundError(f"no checkpoint at {where}")
            print_result(evaluator.evaluate(path))
        else:
            reason = evaluator.follow(FLAGS.poll_secs, FLAGS.max_evaluations, FLAGS.idle_timeout_secs,
                                      FLAGS.stop_grace_secs, on_result=print_result)
            print(f"eval stopped: {reason}", file=sys.stderr)
    finally:
        evaluator.close()
        if metrics is not None:
            metrics.close()
    return 0
