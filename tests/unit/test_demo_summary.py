"""The demo's words around its numbers (issue 54, item 10): the plot's marker names where the copy was frozen in
trained samples and the stream's drift it stands for; a stream too short to show the recovery is warned about,
and a NO verdict says why."""
from easyonline.tools import demo


def test_the_marker_names_trained_samples_and_the_streams_drift():
    # (a partition reaches the drift before the trained count does: the reader does not interleave evenly)
    assert demo.frozen_marker_label(105000, 120000) == \
        "copy frozen at 105,000 trained samples\n(a partition reached the stream's drift at sample 120,000)"


def test_a_short_stream_is_warned_about_with_the_flags_and_the_sizes_that_show_the_recovery():
    assert demo.short_stream_warning(160000, 60000) is None  # the integration test's sizes recover
    assert demo.short_stream_warning(500000, 200000) is None  # the defaults
    warning = demo.short_stream_warning(100000, 50000)
    assert warning.startswith("--samples 100000 --drift_at 50000: 50,000 samples before the drift are too few "
                              "to learn from and 50,000 after it too few for the online model to recover")
    assert "--drift_at >= 60000 and --samples >= drift_at + 100000" in warning
    assert "50,000 samples before" not in demo.short_stream_warning(200000, 150000)


def test_a_no_verdict_says_why():
    short = demo.why_not_recovered(0.47, trained=12000, frozen_at=5000)
    assert "the model had not learned before the drift (window AUC 0.4700 after 5,000 samples" in short
    assert "too few samples after the drift for the online model to recover (7,000 trained, it needs about " \
           "100,000)" in short and "e.g. --samples 160000 --drift_at 60000" in short
    assert "never reached the drift (3,000 samples trained)" in demo.why_not_recovered(None, 3000, None)
    assert "lucky high" in demo.why_not_recovered(0.72, trained=160000, frozen_at=55000)
    assert not demo.learned(0.55) and demo.learned(0.7) and not demo.learned(None)
