"""Runs an absl command so that ``--help`` lists its own flags.

absl's ``--help`` shows the flags of the main module, but our flags are
defined in ``jobs/<verb>_cli.py`` while ``python -m easyonline.<verb>`` runs
``<verb>/__main__.py``; this registers them as the main module's key flags.
"""
import sys
from typing import Callable

from absl import app, flags


def run_command(define_flags: Callable[[], None], main: Callable) -> None:
    """Defines the command's flags, makes them its --help, and runs ``main`` (its return is the exit code)."""
    before = set(flags.FLAGS)
    define_flags()
    for name in sorted(set(flags.FLAGS) - before):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])
    app.run(lambda argv: sys.exit(main(argv)))
