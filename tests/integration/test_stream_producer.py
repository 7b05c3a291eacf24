"""The synthetic stream is deterministic per sample index and has learnable, drifting labels."""
import numpy as np

from easyonline.tools.stream_producer import SyntheticCtrStream, input_field_names


def test_sample_i_does_not_depend_on_how_it_is_asked_for():
    a = SyntheticCtrStream(seed=3).lines(0, 2500)
    b = SyntheticCtrStream(seed=3)
    later_first = b.lines(1700, 800)  # asked for out of order and in other pieces
    assert a == b.lines(0, 1700) + later_first
    assert SyntheticCtrStream(seed=4).lines(0, 10) != a[:10]
    assert len(a[0].split(b",")) == len(input_field_names()) == 40


def test_conversions_add_a_second_label_only_ever_after_a_click():
    plain, two = SyntheticCtrStream().lines(0, 3000), SyntheticCtrStream(conversions=True).lines(0, 3000)
    assert input_field_names(conversions=True)[:3] == ["label", "buy", "I1"]
    assert all(len(line.split(b",")) == 41 for line in two)
    assert [line.split(b",", 2)[0::2] for line in two] == [line.split(b",", 1) for line in plain]  # else the same
    clicks, buys = (np.array([int(line.split(b",")[i]) for line in two]) for i in (0, 1))
    assert buys.sum() > 0.2 * clicks.sum() and not (buys & (1 - clicks)).any()


def test_ids_grow_and_drift_changes_labels_not_ids():
    stream = SyntheticCtrStream(drift_at=5000)
    _, _, early = stream.arrays(0, 2000)
    _, _, late = stream.arrays(200000, 2000)
    assert late.max() > early.max()  # new ids appear over time
    drifted = SyntheticCtrStream(drift_at=0)
    labels_a, num_a, cats_a = stream.arrays(1000, 3000)
    labels_b, num_b, cats_b = drifted.arrays(1000, 3000)
    np.testing.assert_array_equal(cats_a, cats_b)
    assert (labels_a != labels_b).mean() > 0.1


def test_the_producer_says_how_far_it_is_while_it_sends(broker, topic, caplog):
    import logging  # pylint: disable=g-import-not-at-top
    from easyonline.tools.stream_producer import produce  # pylint: disable=g-import-not-at-top
    with caplog.at_level(logging.INFO, logger="easyonline.tools.stream_producer"):
        sent = produce(broker.bootstrap, topic, SyntheticCtrStream().chunks(0, 20000, chunk=1000), rate=8000,
                       progress_secs=0.5)
    assert sent == 20000
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("sent ")]
    assert len(progress) >= 3 and all(f"samples to {topic}" in line for line in progress), progress
