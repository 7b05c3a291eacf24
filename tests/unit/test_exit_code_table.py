"""The exit codes' one table (issue 54: quickstart, train --help and operations.md each had a list, none alike):
the docs' block and every command's --help are rendered from core/exit_codes.py."""
import ast
import os
import subprocess
import sys

from easyonline.core import errors, exit_codes
from easyonline.tools import render_exit_codes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _docs_block(path):
    text = open(path, encoding="utf-8").read()
    begin, end = text.index(exit_codes.DOCS_BEGIN), text.index(exit_codes.DOCS_END)
    return text[begin:end + len(exit_codes.DOCS_END)]


def test_the_docs_table_is_what_the_code_renders():
    assert _docs_block(os.path.join(ROOT, "docs", "operations.md")) == exit_codes.render_markdown(), \
        "run python -m easyonline.tools.render_exit_codes --write"


def test_every_code_an_error_carries_is_in_the_table():
    carried = {getattr(errors, name) for name in ("BAD_CONFIG", "UNREACHABLE", "BAD_INPUT", "CLUSTER_FAILURE",
                                                  "MODEL_DIR_LOCKED", "ACCESS_DENIED")}
    assert carried | {0, 1} == {row.code for row in exit_codes.EXIT_CODES}
    # the trainer's own: every error it raises, and a bug's 1 documented rather than left to surprise
    assert [row.code for row in exit_codes.codes_of("train")] == [0, 1, 2, 3, 4, 5, 6, 7]


def test_no_command_keeps_a_list_of_its_own():
    """--help appends the rendered codes (utils/cli.py): a hand-written list in a docstring would drift."""
    for module in exit_codes.COMMANDS.values():
        path = os.path.join(ROOT, *module.split(".")) + ".py"
        doc = ast.get_docstring(ast.parse(open(path, encoding="utf-8").read())) or ""
        assert "Exit codes:" not in doc, path


def test_the_tool_finds_and_rewrites_a_drifted_block(tmp_path):
    docs = tmp_path / "ops.md"
    stale = exit_codes.render_markdown().replace("| `6` |", "| `9` |")
    docs.write_text("# Ops\n\n" + stale + "\n\nafter\n")
    assert render_exit_codes.main(["--check", "--docs", str(docs)]) == 1
    assert render_exit_codes.main(["--write", "--docs", str(docs)]) == 0
    assert docs.read_text() == "# Ops\n\n" + exit_codes.render_markdown() + "\n\nafter\n"
    assert render_exit_codes.main(["--check", "--docs", str(docs)]) == 0


def test_help_ends_with_the_rendered_codes_and_a_bad_flag_exits_2():
    """(tools.read_updates: the one command of the table whose --help imports no TensorFlow)"""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "easyonline.tools.read_updates"]
    shown = subprocess.run(command + ["--help"], env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and exit_codes.render_help("tools.read_updates") in shown.stdout, shown.stdout
    bad = subprocess.run(command + ["--no_such_flag=1"], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Unknown command line flag 'no_such_flag'" in bad.stderr, bad.stderr
