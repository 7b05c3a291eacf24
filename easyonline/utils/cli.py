"""Runs an absl command so that ``--help`` shows the command's own description and flags, and exits 0.

absl's ``--help`` shows the docstring and flags of the main module, and
exits 1. Our flags are defined in ``jobs/<verb>_cli.py`` (or the tool's
module) while ``python -m easyonline.<verb>`` runs ``<verb>/__main__.py``:
this registers them as the main module's key flags, shows the defining
module's docstring as the description, and exits 0 after help as the
EasyRec and TensorFlow commands' users expect.
"""
import sys
from typing import Callable

from absl import app, flags

from easyonline.utils.logs import setup_logging

HELP_FLAGS = {"--help": True, "-h": True, "-?": True, "--helpshort": True, "--helpfull": False}


def run_command(define_flags: Callable[[], None], main: Callable) -> None:
    """Defines the command's flags, makes them its --help, and runs ``main`` (its return is the exit code)."""
    before = set(flags.FLAGS)
    define_flags()
    for name in sorted(set(flags.FLAGS) - before):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])
    asked = [HELP_FLAGS[a] for a in sys.argv[1:] if a in HELP_FLAGS]
    if asked:
        description = sys.modules[define_flags.__module__].__doc__ or ""
        sys.modules["__main__"].__doc__ = description.replace("%", "%%").rstrip() + "\n"
        app.usage(shorthelp=asked[0], writeto_stdout=True, exitcode=0)
    def logged_main(argv):
        setup_logging("INFO")
        return sys.exit(main(argv))

    app.run(logged_main)
