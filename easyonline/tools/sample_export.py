"""The sample DeepFM trained briefly and exported, and predict requests from the stream: what the serving benches
(tools/bench/predict_latency.py, update_apply_cost.py) serve and ask, made in one place.

``trained_export`` trains samples/online.config's DeepFM (all 39 of Criteo's fields: 13 numbers, 26 ids) on
synthetic lines from a file and exports it as ``python -m easyonline.export`` does; ``requests`` makes requests
as the REST API hands them to ``LoadedExport.predict`` (JSON's types).
"""
import os
import subprocess
import sys
from typing import Dict, List, Optional

from easyonline.config import load_pipeline_config
from easyonline.export.layout import newest_version
from easyonline.jobs.online_train import build_trainer
from easyonline.serve.loaded_export import LoadedExport
from easyonline.tools.sample_configs import sample_config
from easyonline.tools.stream_producer import SyntheticCtrStream, input_field_names


def trained_export(work: str, samples: int, hidden_units: Optional[List[int]] = None) -> str:
    """samples/online.config's DeepFM (its MLP ``hidden_units`` wide, if given) trained on ``samples`` synthetic
    lines from a file in ``work``, exported to ``work``/export; the version's path."""
    data = os.path.join(work, "train.csv")
    with open(data, "wb") as f:
        f.write(b"\n".join(SyntheticCtrStream().lines(0, samples)) + b"\n")
    config = load_pipeline_config(sample_config("online.config"))
    config.model_dir = os.path.join(work, "model")
    if hidden_units:
        config.model_config.deepfm.dnn.hidden_units[:] = hidden_units
    config.data_config.batch_size = 1000
    config.train_config.save_checkpoints_secs = 0
    config.train_config.ClearField("incr_save_config")
    config.ClearField("kafka_train_input")
    config.ClearField("kafka_eval_input")
    config.file_train_input.paths.append(data)
    build_trainer(config, online=False).run()
    subprocess.run([sys.executable, "-m", "easyonline.export", f"--config={work}/model/pipeline.config",
                    f"--export_dir={work}/export", "--log_level=WARNING"], check=True, stdout=subprocess.DEVNULL)
    return newest_version(os.path.join(work, "export"))


def requests(export: LoadedExport, rows: int, count: int) -> List[Dict[str, list]]:
    """``count`` requests of ``rows`` rows each, as the REST API hands them to predict (JSON's types)."""
    fields = input_field_names()
    lines = SyntheticCtrStream().lines(100000, rows * count)
    out = []
    for start in range(0, len(lines), rows):
        values = [dict(zip(fields, line.decode().split(","))) for line in lines[start:start + rows]]
        request = {}
        for name, dtype in export.inputs.items():
            column = [v[name] for v in values]
            if dtype.name == "float32":
                column = [float(x) if x else 0.0 for x in column]
            elif dtype.name == "int64":
                column = [int(x) if x else 0 for x in column]
            request[name] = column
        out.append(request)
    return out
