"""``python -m easyonline.<verb> --help`` documents every flag the verb defines."""
import subprocess

import pytest

from tests.conftest import PYTHON, python_env

COMMANDS = {"train": "easyonline.jobs.train_cli", "export": "easyonline.jobs.export_cli", "serve": "easyonline.jobs.serve_cli",
            "eval": "easyonline.jobs.eval_cli", "predict": "easyonline.jobs.predict_cli",
            "tools.read_updates": "easyonline.tools.read_updates", "tools.demo": "easyonline.tools.demo",
            "tools.local_broker": "easyonline.tools.local_broker",
            "tools.local_cluster": "easyonline.tools.local_cluster",
            "tools.stream_producer": "easyonline.tools.stream_producer"}


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_help_lists_every_flag(verb):
    defined = subprocess.run(
        [PYTHON, "-c", f"import sys; from absl import flags; import {COMMANDS[verb]} as m; b = set(flags.FLAGS); "
                       "m.define_flags(); print(' '.join(sorted(set(flags.FLAGS) - b)))"],
        env=python_env(), capture_output=True, text=True, timeout=120)
    assert defined.returncode == 0, defined.stderr[-2000:]
    names = defined.stdout.strip().splitlines()[-1].split()  # the last line: TFRA prints a notice on import
    assert names
    shown = subprocess.run([PYTHON, "-m", f"easyonline.{verb}", "--help"], env=python_env(), capture_output=True,
                           text=True, timeout=120)
    text = shown.stdout + shown.stderr
    missing = [n for n in names if f"--{n}:" not in text and f"--[no]{n}:" not in text]
    assert not missing, text[-2000:]
