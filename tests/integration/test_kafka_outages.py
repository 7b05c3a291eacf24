"""kafka-python's connection errors while a broker is down are folded into one outage (since when, why) and
not printed; a completed connection ends it (easyonline/utils/kafka_outages.py). The trainer's update
publisher connects through the same KafkaSink as here. Real kafka-python against a port where nothing
listens, then the real local broker."""
import json
import re
import subprocess

from easyonline.utils.net import free_port
from tests.conftest import PYTHON, python_env

SCRIPT = r"""
import json, sys
from easyonline.protos import pipeline_pb2
from easyonline.updates.kafka_sink import KafkaSink
from easyonline.utils import kafka_outages
from easyonline.utils.logs import setup_logging
setup_logging("INFO")
out = {}
for name, server in (("down", sys.argv[1]), ("up", sys.argv[2])):
    sink = KafkaSink(pipeline_pb2.IncrSaveConfig.Kafka(server=server, topic="outage_probe"), 1 << 20)
    try:
        sink.connect()
        out[name + "_connected"] = True
    except Exception as e:  # the dead port: bootstrap gives up after its 5 s connect timeout
        out[name + "_connected"] = False
    out[name] = kafka_outages.outage()
    sink.close()
print(json.dumps(out))
"""


def test_connection_errors_are_folded_into_one_outage_that_a_connection_ends(broker):
    proc = subprocess.run([PYTHON, "-c", SCRIPT, f"127.0.0.1:{free_port()}", broker.bootstrap], env=python_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["down_connected"] is False and out["up_connected"] is True, out
    seconds, reason = out["down"]
    assert seconds >= 0 and reason == "connection refused", out
    assert out["up"] is None, out  # the broker answered: the outage is over
    # kafka-python's own lines (E kafka.net.manager] Connection failed: ... ECONNREFUSED, several a second)
    assert not re.search(r"^\S+ \S+ [EW] kafka", proc.stderr, re.M) and "ECONNREFUSED" not in proc.stderr, \
        proc.stderr[-3000:]
