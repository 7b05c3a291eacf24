"""The deployment files (deploy/): what can be checked without a Kubernetes cluster or a Docker daemon.

The manifests parse as YAML and start every role; the TF_CONFIG that each
StatefulSet pod builds (its start script run by a real shell) is one
easyonline's own parser accepts, for the role that pod should have. The
image builds its environment with the README's setup script.
"""
import json
import os
import subprocess

import yaml

from easyonline.distributed.cluster_config import parse_tf_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")


def _documents(name):
    with open(os.path.join(DEPLOY, "k8s", name)) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def _containers(pod_template):
    return pod_template["spec"]["containers"]


def test_tfjob_starts_ps_chief_and_workers_with_the_config_mounted():
    docs = {doc["kind"]: doc for doc in _documents("tfjob.yaml")}
    config_map = docs["ConfigMap"]
    assert "online.config" in config_map["data"]
    specs = docs["TFJob"]["spec"]["tfReplicaSpecs"]
    assert set(specs) == {"PS", "Chief", "Worker"}
    assert specs["Chief"]["replicas"] == 1 and specs["PS"]["replicas"] >= 1
    for spec in specs.values():
        template = spec["template"]
        (container,) = _containers(template)
        assert container["image"] == "easyonline:latest"
        assert "--config=/etc/easyonline/online.config" in container["args"]
        assert {"name": "config", "mountPath": "/etc/easyonline"} in container["volumeMounts"]
        assert template["spec"]["volumes"][0]["configMap"]["name"] == config_map["metadata"]["name"]
        assert spec["restartPolicy"] == "OnFailure"  # a lost ps stops the trainers with exit code 5


def _tf_config_of(start_script, cluster_json, tmp_path, role, hostname):
    """Runs the pod's start script in a real shell, with `exec python` replaced by printing TF_CONFIG."""
    (tmp_path / "cluster.json").write_text(cluster_json)
    script = start_script.replace("/etc/easyonline/cluster.json", str(tmp_path / "cluster.json"))
    script = script.replace("exec python -m easyonline.train", 'printf "%s" "$TF_CONFIG" #')
    out = subprocess.run(["/bin/sh", "-c", script, "start.sh", role], env={"HOSTNAME": hostname, "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)
    return parse_tf_config(out.stdout)


def test_statefulset_pods_build_the_tf_config_of_their_role(tmp_path):
    docs = _documents("statefulsets.yaml")
    data = next(doc for doc in docs if doc["kind"] == "ConfigMap")["data"]
    sets = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "StatefulSet"}
    services = {doc["metadata"]["name"] for doc in docs if doc["kind"] == "Service"}
    cluster = json.loads(data["cluster.json"])
    assert set(sets) == services == {"easyonline-ps", "easyonline-trainer"}
    # the replica counts match the cluster the pods announce
    assert sets["easyonline-ps"]["spec"]["replicas"] == len(cluster["ps"])
    assert sets["easyonline-trainer"]["spec"]["replicas"] == 1 + len(cluster["worker"])
    seen = []
    for name, role in (("easyonline-ps", "ps"), ("easyonline-trainer", "trainer")):
        (container,) = _containers(sets[name]["spec"]["template"])
        assert container["command"] == ["/bin/sh", "/etc/easyonline/start.sh", role]
        for ordinal in range(sets[name]["spec"]["replicas"]):
            parsed = _tf_config_of(data["start.sh"], data["cluster.json"], tmp_path, role, f"{name}-{ordinal}")
            # the pod's own stable name is the address its role and index give it
            assert parsed.address.startswith(f"{name}-{ordinal}.{name}:")
            seen.append((parsed.task_type, parsed.task_index))
    assert sorted(seen) == [("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)]


def test_the_image_builds_its_environment_with_the_readme_setup_script():
    with open(os.path.join(DEPLOY, "Dockerfile")) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"  # the pinned stack needs Python 3.11
    assert "COPY . ." in lines
    assert "RUN bash tools/setup_env.sh" in lines
    for command in ("run_demo.sh", "run_tests.sh"):  # the README's two commands set up with the same script
        with open(os.path.join(ROOT, "tools", command)) as f:
            assert "bash tools/setup_env.sh" in f.read()
    assert lines[-1] == 'ENTRYPOINT ["python", "-m", "easyonline.train"]'
    assert any(line.startswith("ENV PATH=/opt/easyonline/.venv/bin") for line in lines)
