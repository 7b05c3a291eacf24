"""The start-up lines TensorFlow and TFRA print that mean nothing are dropped, and only those
(easyonline/core/quiet_libraries.py); EASYONLINE_LIBRARY_LOGS=1 brings them back. Keras 3 stays out of TFRA's
import either way (core/bootstrap.py). Real TensorFlow and TFRA,
imported in a child process as a command imports them."""
import subprocess

from tests.conftest import PYTHON, python_env
from tests.log_noise import foreign_lines

IMPORT = r"""
import logging, os, sys
import easyonline
import tensorflow as tf
import tensorflow_recommenders_addons
keras3_loaded = "keras" in sys.modules  # TFRA's import tries Keras 3; easyonline leaves it out
import keras  # and a user's own import of Keras 3 works afterwards
from easyonline.core.quiet_libraries import filtered_stderr_fd
with filtered_stderr_fd():  # C++-style lines through fd 2: the known one dropped, any other passed
    os.write(2, b"2026-01-01 00:00:00.000000: E external/x/cuda_dnn.cc:1] Unable to register cuDNN factory: "
                b"Attempting to register factory for plugin cuDNN when one has already been registered\n")
    os.write(2, b"2026-01-01 00:00:00.000000: E external/x/y.cc:2] a real error\n")
tf.get_logger().warning("a real warning")
tf.get_logger().warning("An exception occurred when import horovod.tensorflow: horovod is broken")
print("done", keras3_loaded, keras.__version__.split(".")[0], flush=True)
"""


def _run(**env):
    return subprocess.run([PYTHON, "-c", IMPORT], env={**python_env(), **env}, capture_output=True, text=True,
                          timeout=300)


def test_only_the_known_noise_is_dropped_and_the_switch_brings_it_back():
    quiet = _run()
    assert quiet.returncode == 0 and quiet.stdout == "done False 3\n", quiet.stderr[-3000:]
    assert "cuDNN" not in quiet.stderr and "cuFFT" not in quiet.stderr and "GraphKeys" not in quiet.stderr
    assert "No module named 'horovod'" not in quiet.stderr
    # what is not noise passes: another C++ error, TensorFlow's other warnings, a broken horovod
    assert "E external/x/y.cc:2] a real error" in quiet.stderr
    assert "a real warning" in quiet.stderr and "horovod is broken" in quiet.stderr
    assert [line for line in foreign_lines(quiet.stderr)
            if "a real" not in line and "horovod is broken" not in line] == []

    loud = _run(EASYONLINE_LIBRARY_LOGS="1")
    assert loud.returncode == 0, loud.stderr[-3000:]
    assert "Unable to register cuDNN factory" in loud.stderr and "GraphKeys" in loud.stderr
    assert "_SingleDeviceSaver removed" in loud.stdout
    assert loud.stdout.endswith("done False 3\n")  # Keras 3 is left out of TFRA's import with the switch too
