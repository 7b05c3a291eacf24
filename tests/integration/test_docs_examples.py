"""Every ```python example in docs/python_api.md runs as written (from the repository root) and passes its asserts."""
import json
import os
import re
import subprocess

import pytest

from easyonline.utils import preloaded_python

from tests.conftest import PYTHON, ROOT, python_env

DOC = os.path.join(ROOT, "docs", "python_api.md")


def _examples():
    with open(DOC) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def test_the_api_page_has_examples():
    assert len(_examples()) >= 3


@pytest.mark.parametrize("index", range(len(_examples())))
def test_example_runs(index, tmp_path):
    code = _examples()[index]
    path = tmp_path / f"example_{index}.py"
    path.write_text(code)
    env = python_env()
    env["TMPDIR"] = str(tmp_path)  # the examples' tempfile.mkdtemp() lands in the test's directory
    proc = preloaded_python.run([PYTHON, str(path)], preload="trainer", cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=360)
    assert proc.returncode == 0, f"example {index}:\n{code}\n--- output ---\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}"


# --- README.md, docs/quickstart.md and docs/serving.md: their marked blocks run in order, as written ---------
#
# A block preceded by ``<!-- test: NAME -->`` is run as written (bash, or python for a python block) from a copy
# of the repository's samples/ and .venv, with these substitutions only: /tmp/easyonline becomes the test's
# directory, the ports 9092 (Kafka), 8501 (REST) and 8500 (gRPC) free ones (in the commands and in the samples'
# configs). The blocks that run until stopped (broker, stream, train, restart, fine_tune, serve) are started in
# the background; the test waits for what the docs say they print, runs the next block, and checks each step's
# output. README.md's "Using it" commands are the quickstart's (each one a quickstart command, or one with flags
# added): test_readme_commands_are_quickstart_commands.

QUICKSTART = os.path.join(ROOT, "docs", "quickstart.md")
SERVING = os.path.join(ROOT, "docs", "serving.md")
README = os.path.join(ROOT, "README.md")
QUICKSTART_STEPS = ["broker", "stream", "eval_stream", "train", "stop", "eval", "restart", "stop_again", "offline",
                    "fine_tune", "stop_fine_tune", "export", "serve", "predict"]
SERVING_STEPS = ["rest_api", "grpc_api"]
BACKGROUND = {"broker", "stream", "train", "restart", "fine_tune", "serve"}


def _marked_blocks(path):
    with open(path) as f:
        return [(name, lang, code) for name, lang, code
                in re.findall(r"<!-- test: (\w+) -->\n```(bash|python)\n(.*?)```", f.read(), re.S)]


def _commands(code):
    """The commands of a bash block: continuation lines joined, comments and a trailing & dropped, spaces single."""
    out = []
    for line in code.replace("\\\n", " ").split("\n"):
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(re.sub(r"\s+", " ", line.rstrip("&").strip()))
    return out


def test_readme_commands_are_quickstart_commands():
    with open(README) as f:
        readme = re.search(r"<!-- tested: [^\n]*-->\n```bash\n(.*?)```", f.read(), re.S)
    assert readme, "README.md's Using it block lost its <!-- tested --> marker"
    quickstart = [c for _, lang, code in _marked_blocks(QUICKSTART) if lang == "bash" for c in _commands(code)]
    for command in _commands(readme.group(1)):
        assert any(q == command or q.startswith(command + " ") for q in quickstart), \
            f"README.md's command is none of docs/quickstart.md's tested ones: {command}"


def test_docs_mark_the_steps_the_walkthrough_runs():
    assert [b[0] for b in _marked_blocks(QUICKSTART)] == QUICKSTART_STEPS
    assert [b[0] for b in _marked_blocks(SERVING)] == SERVING_STEPS


def _free_port():
    import socket  # pylint: disable=g-import-not-at-top
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Walkthrough:
    """Runs marked doc blocks in ``work`` (a copy of samples/ and a link to the venv) with the substitutions."""

    def __init__(self, tmp_path):
        import shutil  # pylint: disable=g-import-not-at-top
        import sys  # pylint: disable=g-import-not-at-top
        self.base = tmp_path / "easyonline"
        self.base.mkdir()
        self.work = tmp_path / "repo"
        self.work.mkdir()
        self.ports = {"9092": str(_free_port()), "8501": str(_free_port()), "8500": str(_free_port())}
        (self.work / ".venv").symlink_to(os.path.dirname(os.path.dirname(sys.executable)))
        shutil.copytree(os.path.join(ROOT, "samples"), self.work / "samples")
        for path in (self.work / "samples").glob("*.config"):
            path.write_text(self.sub(path.read_text()))
        self.env = python_env()
        self.background = {}
        self.logs = {}

    def sub(self, text):
        text = text.replace("/tmp/easyonline", str(self.base))
        for port, free in self.ports.items():
            text = re.sub(rf"(?<![0-9]){port}(?![0-9])", free, text)
        return text

    def _argv(self, lang, code):
        return ["bash", "-e", "-c", self.sub(code)] if lang == "bash" else [PYTHON, "-c", self.sub(code)]

    def start(self, name, lang, code):
        log = self.work / f"{name}.log"
        self.logs[name] = log
        with open(log, "w") as out:
            self.background[name] = subprocess.Popen(self._argv(lang, code), cwd=self.work, env=self.env,
                                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def run(self, name, lang, code, timeout=300):
        proc = subprocess.run(self._argv(lang, code), cwd=self.work, env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        assert proc.returncode == 0, f"step {name}:\n{code}\n--- output ---\n{proc.stdout[-3000:]}{proc.stderr[-5000:]}"
        return proc

    def log(self, name):
        return self.logs[name].read_text()

    def wait_for(self, name, pattern, timeout=180):
        import time  # pylint: disable=g-import-not-at-top
        deadline = time.time() + timeout
        while time.time() < deadline:
            if re.search(pattern, self.log(name)):
                return
            assert self.background[name].poll() is None, f"step {name} exited:\n{self.log(name)[-5000:]}"
            time.sleep(0.5)
        raise AssertionError(f"step {name}: no {pattern!r} in {timeout} s:\n{self.log(name)[-5000:]}")

    def finished(self, name, timeout=180):
        rc = self.background.pop(name).wait(timeout)
        assert rc == 0, f"step {name} exited {rc}:\n{self.log(name)[-5000:]}"
        return self.log(name)

    def stop_all(self):
        import signal  # pylint: disable=g-import-not-at-top
        for proc in self.background.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.background.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _json_documents(text):
    decoder, out, i = json.JSONDecoder(), [], 0
    while True:
        i = text.find("{", i)
        if i < 0:
            return out
        try:
            document, i = decoder.raw_decode(text, i)
        except ValueError:  # not JSON (e.g. a Prometheus label set)
            i += 1
            continue
        out.append(document)


def _post(url, body):
    import urllib.error  # pylint: disable=g-import-not-at-top
    import urllib.request  # pylint: disable=g-import-not-at-top
    try:
        with urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode()), timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.timeout(900)
def test_quickstart_and_serving_commands_run_as_written(tmp_path, caplog):
    """docs/quickstart.md from the broker to a served prediction, then docs/serving.md's REST and gRPC examples,
    against the local broker; plus two behaviours the walkthrough leads to: a predict request may leave out an
    input with a default_val (I3), answered as with the default, and a trainer whose model_dir has a checkpoint
    says that it ignores fine_tune_checkpoint."""
    import urllib.request  # pylint: disable=g-import-not-at-top
    steps = {name: (lang, code) for name, lang, code in _marked_blocks(QUICKSTART) + _marked_blocks(SERVING)}
    w = _Walkthrough(tmp_path)
    base, rest = w.base, f"http://127.0.0.1:{w.ports['8501']}"

    def step(name, **kwargs):
        lang, code = steps[name]
        if name in BACKGROUND:
            return w.start(name, lang, code)
        return w.run(name, lang, code, **kwargs)

    try:
        step("broker")
        w.wait_for("broker", "broker ready on")
        step("stream")
        assert "sent 5000 samples" in step("eval_stream").stdout
        step("train")
        w.wait_for("train", r"step=\d+ samples=\d+ rate=")  # a status line: it trains
        step("stop")
        assert "training summary" in w.finished("train")
        result = _json_documents(step("eval").stdout)[-1]
        assert result["samples"] == 5000 and result["auc"] > 0.5, result  # the held-out topic, scored
        step("restart")
        w.wait_for("restart", r"restored \S+model\.ckpt-\d+ \(step [1-9]")  # continues from §4's checkpoint
        step("stop_again")
        assert "training summary" in w.finished("restart")
        assert "training summary" in step("offline").stdout
        step("fine_tune")
        w.wait_for("fine_tune", "initialised the model from .*offline")
        step("stop_fine_tune")
        assert "is ignored" not in w.finished("fine_tune")
        version = step("export").stdout.strip().splitlines()[-1]
        assert os.path.isdir(version) and version.startswith(str(base / "export")), version
        step("serve")
        import time  # pylint: disable=g-import-not-at-top
        deadline = time.time() + 180
        while True:
            assert w.background["serve"].poll() is None, w.log("serve")[-5000:]
            try:  # up, and caught up with the published updates (the answers below compare)
                with urllib.request.urlopen(f"{rest}/v1/models/online", timeout=5) as r:
                    if json.loads(r.read()).get("update_lag_messages") == 0:
                        break
            except OSError:
                pass
            assert time.time() < deadline, w.log("serve")[-5000:]
            time.sleep(1)
        predicted = _json_documents(step("predict").stdout)
        assert [len(p["predictions"]) for p in predicted] == [2, 3], predicted
        assert all(0 < row["probs"] < 1 for p in predicted for row in p["predictions"]), predicted
        answers = _json_documents(step("rest_api").stdout)
        assert answers[0] == predicted[0] and len(answers[1]["outputs"]["probs"]) == 2, answers[:2]
        assert answers[2]["model_version_status"] and answers[-1]["ready"] is True, answers[2:]
        printed = step("grpc_api").stdout
        assert abs(float(re.findall(r"[-0-9.e]+", printed)[-1]) - predicted[0]["predictions"][0]["probs"]) < 1e-5, \
            printed

        # I3 has default_val "0": left out, it is answered as I3 = 0 (a value of its own changes the answer)
        with open(w.work / "samples" / "predict_request.json") as f:
            row = json.load(f)["instances"][0]
        url = f"{rest}/v1/models/online:predict"
        without = {k: v for k, v in row.items() if k != "I3"}
        code, left_out = _post(url, {"instances": [without]})
        assert code == 200, left_out
        assert _post(url, {"instances": [dict(without, I3=0.0)]})[1] == left_out
        assert _post(url, {"instances": [dict(without, I3=3.0)]})[1] != left_out
        code, refused = _post(url, {"instances": [{k: v for k, v in row.items() if k != "C3"}]})
        assert code == 400 and "C3" in refused["error"], refused  # C3 has no default: still required

        # §5's warning: fine_tune_checkpoint with a model_dir that has a checkpoint. The trainer the train command
        # would build for `--config samples/online.config --online --edit_config_json '{"train_config.
        # fine_tune_checkpoint": ".../offline"}'` (build_trainer, as online_train calls it) is built here, in this
        # process, and not run: the warning comes from its restore, at construction, and the command's own path
        # is the steps' above. (A train process of its own cost ~17 s of CPU, for a run stopped by §4's stop file.)
        import logging  # pylint: disable=g-import-not-at-top
        from easyonline.config import apply_edit_config_json, load_pipeline_config  # pylint: disable=g-import-not-at-top
        from easyonline.jobs.online_train import build_trainer  # pylint: disable=g-import-not-at-top
        config = load_pipeline_config(str(w.work / "samples" / "online.config"))
        apply_edit_config_json(config, {"train_config.fine_tune_checkpoint": f"{base}/offline"})
        caplog.set_level(logging.WARNING, logger="easyonline")
        trainer = build_trainer(config, online=True, default_callbacks=False)  # (no publisher: nothing runs)
        assert re.search(rf"train_config.fine_tune_checkpoint {base}/offline is ignored: model_dir {base}/online "
                         r"already has a checkpoint \(\S+model\.ckpt-\d+\)", caplog.text), caplog.text[-5000:]
        assert trainer.restored_from and trainer.restored_from.startswith(f"{base}/online/"), trainer.restored_from
    finally:
        w.stop_all()
