"""easyonline: online training of recommendation models from Kafka on TFRA."""
import os

from setuptools import Extension, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _requirements():
    with open(os.path.join(HERE, "requirements.txt")) as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")]


setup(
    name="easyonline",
    version="0.1.0",
    description="Online (streaming) training of recommendation models from Kafka on TFRA dynamic embeddings",
    packages=find_packages(include=["easyonline", "easyonline.*"]),
    python_requires=">=3.9,<3.12",
    install_requires=_requirements(),
    # The input hot path in C (docs/operations.md, "The input path"). optional: without a C
    # compiler the install still succeeds and the same work runs in Python/numpy, slower.
    ext_modules=[
        Extension("easyonline.inputs._record_decoder", ["easyonline/inputs/_record_decoder.c"],
                  extra_compile_args=["-O3"], optional=True),
        Extension("easyonline.features._csv_decoder", ["easyonline/features/_csv_decoder.c"],
                  extra_compile_args=["-O3"], optional=True),
    ],
    entry_points={
        "console_scripts": [
            "easyonline-train=easyonline.jobs.train_cli:run",
            "easyonline-export=easyonline.jobs.export_cli:run",
            "easyonline-serve=easyonline.jobs.serve_cli:run",
            "easyonline-broker=easyonline.tools.local_broker:run",
            "easyonline-produce=easyonline.tools.stream_producer:run",
            "easyonline-read-updates=easyonline.tools.read_updates:run",
            "easyonline-from-easyrec=easyonline.tools.from_easyrec:run",
        ],
    },
)
