"""easyonline: online training of recommendation models from Kafka on TFRA.

The metadata, dependencies and console scripts are in pyproject.toml; this file adds the optional C
input decoders and installs samples/ as the package ``easyonline.samples`` (the demo's config).
"""
from setuptools import Extension, find_packages, setup

setup(
    packages=find_packages(include=["easyonline", "easyonline.*"]) + ["easyonline.samples"],
    package_dir={"easyonline.samples": "samples"},
    package_data={"easyonline.samples": ["*.config"]},
    # The input hot path in C (docs/operations.md, "The input path"). optional: without a C
    # compiler the install still succeeds and the same work runs in Python/numpy, slower.
    ext_modules=[
        Extension("easyonline.inputs._record_decoder", ["easyonline/inputs/_record_decoder.c"],
                  extra_compile_args=["-O3"], optional=True),
        Extension("easyonline.features._csv_decoder", ["easyonline/features/_csv_decoder.c"],
                  extra_compile_args=["-O3"], optional=True),
    ],
)
