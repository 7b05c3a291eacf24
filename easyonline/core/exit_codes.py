"""Exit codes: the one table of what each code means and which commands return it, and the one place that turns
an error into a job's exit code (each operator-facing error carries its code: ``errors.py``).

``--help`` of every command in the table (``utils/cli.py``) and the block between the markers in
docs/operations.md are rendered from ``EXIT_CODES``: before, quickstart, ``train --help`` and operations.md
each kept a list and no two agreed. ``python -m easyonline.tools.render_exit_codes --write`` rewrites the
docs' block; ``tests/unit/test_exit_code_table.py`` fails when it differs from what this renders.
"""
import sys
import textwrap
from typing import Callable, NamedTuple, Tuple

from easyonline.core.errors import (  # noqa: F401  (re-exported)
    ACCESS_DENIED,
    BAD_CONFIG,
    BAD_INPUT,
    CLUSTER_FAILURE,
    MODEL_DIR_LOCKED,
    UNREACHABLE,
    EasyOnlineError,
)

#: The commands that document their exit codes, and the module whose docstring is each one's --help.
COMMANDS = {"train": "easyonline.jobs.train_cli", "eval": "easyonline.jobs.eval_cli",
            "predict": "easyonline.jobs.predict_cli", "export": "easyonline.jobs.export_cli",
            "serve": "easyonline.jobs.serve_cli", "tools.tfserving_follower": "easyonline.tools.tfserving_follower",
            "tools.read_updates": "easyonline.tools.read_updates", "tools.demo": "easyonline.tools.demo",
            "tools.movielens_sequences": "easyonline.tools.movielens_sequences"}
EVERY = tuple(COMMANDS)
KAFKA_READERS = ("train", "eval", "predict", "export", "serve", "tools.tfserving_follower",
                 "tools.movielens_sequences")


class ExitCode(NamedTuple):
    code: int
    meaning: str
    commands: Tuple[str, ...]


EXIT_CODES = (
    ExitCode(0, "done, or a clean stop: SIGTERM or SIGINT, to the process or to its whole process group "
             "(Ctrl-C); train also at the input's end, num_steps or the stop file; tools.demo whatever its AUC verdicts "
             "say (they are printed, a NO with why)", EVERY),
    ExitCode(1, "a bug: an error nobody anticipated, printed with its Python traceback; please report it with "
             "the log", EVERY),
    ExitCode(1, "the stream has a sequence gap or a malformed message", ("tools.read_updates",)),
    ExitCode(1, "the published updates did not rebuild the trained model exactly when replayed: a bug too (the "
             "summary names the first differences)", ("tools.demo",)),
    ExitCode(BAD_CONFIG, "bad config or flags: the message names the field (also an unknown flag, a bad "
             "TF_CONFIG, a cluster with another number of ps than wrote the checkpoint, oss:// without "
             "credentials; serve: a trainer that signs its updates and no secret given, TLS files that do not "
             "load)", EVERY),
    ExitCode(UNREACHABLE, "something to read is missing or unreachable: the broker or topic, an input file, a "
             "checkpoint, an export, the update stream", KAFKA_READERS),
    ExitCode(BAD_INPUT, "more of the input was malformed than data_config.max_bad_fraction allows",
             ("train", "eval", "predict")),
    ExitCode(BAD_INPUT, "a line of the ratings is malformed or earlier than the one before it (the message names "
             "it)", ("tools.movielens_sequences",)),
    ExitCode(BAD_INPUT, "the TF Serving server is unreachable, or lacks the model or its update signature",
             ("tools.tfserving_follower",)),
    ExitCode(CLUSTER_FAILURE, "a parameter-server cluster lost a ps: restart it (training resumes from the last "
             "checkpoint)", ("train",)),
    ExitCode(MODEL_DIR_LOCKED, "another trainer is writing to this model_dir (the message names its pid and "
             "host)", ("train",)),
    ExitCode(ACCESS_DENIED, "Kafka refused the client: authentication failed, the broker's certificate is not "
             "trusted, or an ACL denies an operation (the message names which); retrying does not help",
             KAFKA_READERS),
)

DOCS_BEGIN = "<!-- exit codes: generated from easyonline/core/exit_codes.py by " \
             "`python -m easyonline.tools.render_exit_codes --write`; edit the table there -->"
DOCS_END = "<!-- end of generated exit codes -->"


def codes_of(command: str) -> Tuple[ExitCode, ...]:
    """The rows ``command`` can return, in code order."""
    if command not in COMMANDS:
        raise KeyError(f"{command!r} is not in exit_codes.COMMANDS")
    return tuple(row for row in EXIT_CODES if command in row.commands)


def render_help(command: str) -> str:
    """The ``Exit codes:`` section of ``command``'s --help."""
    lines = ["Exit codes:"]
    for row in codes_of(command):
        lines.extend(textwrap.wrap(row.meaning, 100, initial_indent=f"  {row.code}  ", subsequent_indent="     "))
    return "\n".join(lines) + "\n"


def render_markdown() -> str:
    """The table in docs/operations.md, markers included."""
    rows = ["| code | meaning | returned by |", "|---|---|---|"]
    for row in EXIT_CODES:
        by = "every command" if row.commands == EVERY else ", ".join(f"`{c}`" for c in row.commands)
        rows.append(f"| `{row.code}` | {row.meaning} | {by} |")
    return "\n".join([DOCS_BEGIN, "", *rows, "", DOCS_END])


def help_for_module(module: str) -> str:
    """The section for the command whose flags ``module`` defines ('' for a command not in the table)."""
    for command, name in COMMANDS.items():
        if name == module:
            return render_help(command)
    return ""


def exit_code_of(error: BaseException) -> int:
    """The exit code for an error a job reports to the operator; 0 for one that is a bug (re-raised)."""
    if isinstance(error, EasyOnlineError):
        return error.exit_code
    if isinstance(error, (FileNotFoundError, TimeoutError)):
        return UNREACHABLE
    return 0


def run_job(job: Callable[[], int]) -> int:
    """Runs ``job``; an operator-facing error becomes ``error: <message>`` on stderr and its exit code."""
    try:
        return job()
    except Exception as e:  # pylint: disable=broad-except
        code = exit_code_of(e)
        if not code:
            raise
        print(f"error: {e}", file=sys.stderr)
        return code
