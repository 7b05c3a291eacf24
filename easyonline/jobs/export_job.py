"""What ``python -m easyonline.export`` does once its flags are parsed (jobs/export_cli.py): writes one export."""
from absl import flags
from kafka.errors import KafkaError

from easyonline.core.errors import BrokerUnreachableError
from easyonline.export.exporter import export_saved_model
from easyonline.jobs.config_flags import config_from_flags


def export(FLAGS: flags.FlagValues) -> int:  # pylint: disable=invalid-name
    """Exports the config's model from --checkpoint_path (default: model_dir's latest) and prints its path."""
    config = config_from_flags(online=False)
    try:
        path = export_saved_model(config, FLAGS.export_dir, FLAGS.checkpoint_path or None,
                                  FLAGS.embedding_export_dir or None, FLAGS.for_stock_serving,
                                  FLAGS.update_signatures)
    except KafkaError as e:
        raise BrokerUnreachableError(f"cannot read the update stream to find where this export starts: {e}") from None
    print(path)
    return 0
