"""Runs an absl command so that ``--help`` shows the command's own description and flags, and exits 0.

absl's ``--help`` shows the docstring and flags of the main module, and
exits 1. Our flags are defined in ``jobs/<verb>_cli.py`` (or the tool's
module) while ``python -m easyonline.<verb>`` runs ``<verb>/__main__.py``:
this registers them as the main module's key flags, shows the defining
module's docstring as the description, and exits 0 after help as the
EasyRec and TensorFlow commands' users expect, and ends the process through ``core/process_exit.py``. A
command in ``core/exit_codes.py``'s table gets its exit codes rendered from it at the end of the description.
A flag absl cannot parse (an unknown flag, a bad value) exits 2, a bad flag, as every other bad flag does
(absl's own exit code 1 is a bug's).
"""
import sys
from typing import Callable

from absl import app, flags

from easyonline.core.errors import BAD_CONFIG
from easyonline.core.exit_codes import help_for_module
from easyonline.core.process_exit import exit_process
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
        module = sys.modules[define_flags.__module__]
        description = (module.__doc__ or "").rstrip() + "\n"
        spec = getattr(module, "__spec__", None)  # (a tool run with -m is __main__: its spec has its name)
        codes = help_for_module(spec.name if spec is not None else define_flags.__module__)
        if codes:
            description += "\n" + codes
        sys.modules["__main__"].__doc__ = description.replace("%", "%%")
        app.usage(shorthelp=asked[0], writeto_stdout=True, exitcode=0)
    def logged_main(argv):
        setup_logging("INFO")
        try:
            code = main(argv)
        except SystemExit as stop:  # a signal handler's or a job's own sys.exit
            code = stop.code
        exit_process(code)  # without Python's teardown: 1.4 s of CPU per command once TensorFlow is loaded

    app.run(logged_main, flags_parser=_parse_flags)


def _parse_flags(argv):
    """absl's parse_flags_with_usage, exiting 2 (a bad flag) instead of 1."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        sys.stderr.write(f"FATAL Flags parsing error: {e}\nPass --helpshort or --helpfull to see help on flags.\n")
        sys.exit(BAD_CONFIG)
