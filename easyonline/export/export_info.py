"""What an export version's assets say, read without loading its SavedModel.

Serving (serve/loaded_export.py) and a follower of another server
(tools/tfserving_follower.py) both need where the update stream starts, the
config the model was trained with, and the parameters' ids and shapes (an
update message is checked against them before it is applied); one reader, so
the two never disagree.
"""
import dataclasses
import json
import os
from typing import Dict, Optional, Tuple

from easyonline.config.loader import parse_pipeline_config
from easyonline.export.layout import ASSETS_DIR, DENSE_SHAPES_FILE, INCR_UPDATE_FILE, PIPELINE_FILE, newest_version
from easyonline.protos import pipeline_pb2
from easyonline.updates.param_ids import ParameterIds, read_parameter_ids


@dataclasses.dataclass
class ExportInfo:
    path: str  # the version directory
    version: str
    update_info: dict  # incr_update.txt: the update stream and where this export starts in it
    pipeline_config: str
    config: pipeline_pb2.PipelineConfig
    ids: ParameterIds
    widths: Dict[int, int]  # table id -> floats per row
    # dense id -> shape; None for exports made before dense_shapes.json existed (entries are then checked
    # against themselves only)
    dense_shapes: Optional[Dict[int, Tuple[int, ...]]]

    @classmethod
    def read(cls, export_dir: str) -> "ExportInfo":
        """The newest version in ``export_dir`` (or ``export_dir`` itself if it is one); FileNotFoundError
        naming what is missing."""
        path = newest_version(export_dir)
        assets = os.path.join(path, ASSETS_DIR)
        ids = read_parameter_ids(assets)
        with open(os.path.join(assets, INCR_UPDATE_FILE)) as f:
            update_info = json.load(f)
        with open(os.path.join(assets, PIPELINE_FILE)) as f:
            pipeline_config = f.read()
        shapes_path = os.path.join(assets, DENSE_SHAPES_FILE)
        dense_shapes = None
        if os.path.exists(shapes_path):
            with open(shapes_path) as f:
                dense_shapes = {int(i): tuple(shape) for i, shape in json.load(f).items()}
        return cls(path, os.path.basename(os.path.normpath(path)), update_info, pipeline_config,
                   parse_pipeline_config(pipeline_config, PIPELINE_FILE), ids,
                   {table_id: width for table_id, width in ids.tables.values()}, dense_shapes)
