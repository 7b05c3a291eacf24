"""Where the sample configs are: ``samples/`` in a checkout, the package ``easyonline.samples`` when installed.

The demo and the docs' commands name a sample config; from a wheel there is no checkout to find it in.
"""
import importlib.resources
import os

CHECKOUT_SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "samples")


def sample_config(name: str) -> str:
    """The path of sample config ``name`` (e.g. "online.config"): the checkout's, else the installed copy."""
    in_checkout = os.path.join(CHECKOUT_SAMPLES, name)
    if os.path.isfile(in_checkout):
        return in_checkout
    try:
        installed = importlib.resources.files("easyonline.samples") / name
    except ModuleNotFoundError:
        return in_checkout
    return str(installed) if installed.is_file() else in_checkout
