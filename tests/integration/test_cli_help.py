"""``python -m easyonline.<verb> --help`` documents every flag the verb defines, starts with the verb's own
description and exits 0."""
import json
import subprocess

import pytest

from easyonline.core import exit_codes
from tests.conftest import PYTHON, python_env
from tests.log_noise import foreign_lines

COMMANDS = {"train": "easyonline.jobs.train_cli", "export": "easyonline.jobs.export_cli", "serve": "easyonline.jobs.serve_cli",
            "eval": "easyonline.jobs.eval_cli", "predict": "easyonline.jobs.predict_cli",
            "tools.read_updates": "easyonline.tools.read_updates", "tools.demo": "easyonline.tools.demo",
            "tools.local_broker": "easyonline.tools.local_broker",
            "tools.apache_kafka": "easyonline.tools.apache_kafka",
            "tools.local_cluster": "easyonline.tools.local_cluster",
            "tools.stream_producer": "easyonline.tools.stream_producer", "tools.from_easyrec": "easyonline.tools.from_easyrec",
            "tools.movielens_sequences": "easyonline.tools.movielens_sequences"}


# Prints {verb: [flags its module defines, its description's first line]}: every module imported in one
# process, each verb's flags removed again before the next defines its own (verbs share flag names).
DEFINED = """
import json, sys
from absl import flags
out = {}
modules = {verb: __import__(module, fromlist=["define_flags"]) for verb, module in json.loads(sys.argv[1]).items()}
for verb, m in modules.items():  # (imported first: importing defines the libraries' flags)
    before = set(flags.FLAGS)
    m.define_flags()
    names = sorted(set(flags.FLAGS) - before)
    out[verb] = [names, m.__doc__.strip().splitlines()[0]]
    for name in names:
        delattr(flags.FLAGS, name)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def helps():
    """{verb: (flags its module defines, its description's first line, its --help text, --help's exit code)}:
    every process started at once (each imports TensorFlow: side by side they take half the time on two cores)."""
    defined = subprocess.Popen([PYTHON, "-c", DEFINED, json.dumps(COMMANDS)], env=python_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shown = {verb: subprocess.Popen([PYTHON, "-m", f"easyonline.{verb}", "--help"], env=python_env(),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for verb in COMMANDS}
    stdout, stderr = defined.communicate(timeout=300)
    assert defined.returncode == 0, stderr[-2000:]
    modules = json.loads(stdout.strip().splitlines()[-1])  # (the last line: TFRA prints a notice on import)
    return {verb: (*modules[verb], *(lambda text: (text, process.returncode))(process.communicate(timeout=300)[0]))
            for verb, process in shown.items()}


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_help_lists_every_flag(verb, helps):
    names, _, text, _ = helps[verb]  # (the last line of the first: TFRA prints a notice on import)
    assert names
    missing = [n for n in names if f"--{n}:" not in text and f"--[no]{n}:" not in text]
    assert not missing, text[-2000:]


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_help_starts_with_the_commands_description_and_exits_0(verb, helps):
    _, description, text, code = helps[verb]
    assert code == 0, text[-2000:]
    assert description in text and "__main__" not in description
    assert text.index(description) < text.index("flags:")


@pytest.mark.parametrize("verb", sorted(COMMANDS))
def test_commands_start_without_library_noise(verb, helps):
    """No 'E ... Unable to register cuDNN factory', TFRA's GraphKeys and horovod warnings or its
    _SingleDeviceSaver print (each of these commands imports TensorFlow and TFRA, or their siblings do)."""
    text = helps[verb][2]
    assert not foreign_lines(text), foreign_lines(text)


def test_easyrec_flags_are_accepted_by_train(helps):
    text = helps["train"][2]
    assert "--pipeline_config_path: Alias for --config." in text
    assert "--[no]continue_train:" in text


@pytest.mark.parametrize("verb", sorted(set(COMMANDS) & set(exit_codes.COMMANDS)))
def test_help_ends_with_the_commands_exit_codes(verb, helps):
    """Rendered from core/exit_codes.py, as docs/operations.md's table is (issue 54: the lists disagreed)."""
    text = helps[verb][2]
    assert exit_codes.render_help(verb) in text, text[:3000]
    assert text.count("Exit codes") == 1, text[:3000]
