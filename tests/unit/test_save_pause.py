"""The chief's save pause (distributed/save_pause.py) over the real shared variables and step updates.

The cluster's shared state (``ClusterState``) in one local graph and session, as a ps holds it: a worker
thread runs the real ``begin_step`` / ``step_updates`` protocol as fast as it can while the chief thread
pauses it again and again; inside each pause the worker must not write (the cluster's step stands still),
and outside the worker steps on. A worker that never answers delays a save by the bounded wait only.
"""
import threading
import time

import easyonline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from easyonline.core.bootstrap import ensure_legacy_keras
from easyonline.distributed import save_pause
from easyonline.distributed.save_pause import SavePause
from easyonline.distributed.shared_state import ClusterState

tf = ensure_legacy_keras()


def _cluster_state():
    graph = tf.Graph()
    with graph.as_default():
        state = ClusterState(2)
        shared = state.step_updates(tf.constant([1.0]), tf.constant([0.5]), trainer_index=1)
        with tf.control_dependencies([shared]):
            step = {"pause": state.pause.read_value()}
        begin = {i: state.begin_step(i) for i in (0, 1)}
        session = tf.compat.v1.Session(graph=graph)
        session.run(tf.compat.v1.global_variables_initializer())
    for i in (0, 1):
        session.run(state.mark_started, {state.trainer_in: i})
    feed = {state.partitions_in: [0], state.offsets_in: [1], state.lag_in: 0}
    return session, state, step, begin, feed


def _stepping_worker(session, state, step, begin, feed, stop: threading.Event) -> threading.Thread:
    """Trainer 1 stepping as a worker does (``before_step``, the step, ``after_step``) until ``stop``."""
    worker = SavePause(session.run, state, begin[1], 1, 2, stop.is_set)

    def work():
        while not stop.is_set():
            worker.before_step()
            worker.after_step(int(session.run(step, feed)["pause"]))

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def test_the_worker_writes_nothing_while_the_chief_saves_and_steps_on_after():
    session, state, step, begin, feed = _cluster_state()
    stop = threading.Event()
    chief = SavePause(session.run, state, begin[0], 0, 2, stop.is_set)
    thread = _stepping_worker(session, state, step, begin, feed, stop)
    try:
        moved_inside, moved_outside = [], []
        for _ in range(5):
            before = session.run(state.global_step)
            time.sleep(0.1)
            moved_outside.append(session.run(state.global_step) - before)
            with chief.others_paused():
                before = session.run(state.global_step)
                time.sleep(0.2)
                moved_inside.append(session.run(state.global_step) - before)
                assert session.run(state.paused)[1] == session.run(state.pause)
    finally:
        stop.set()
        thread.join(30)
    assert moved_inside == [0] * 5
    assert sum(moved_outside) > 0  # the worker stepped between the saves
    assert session.run(state.pause) == 0


def test_a_worker_stuck_inside_a_step_delays_the_save_by_the_bounded_wait_only(monkeypatch, caplog):
    session, state, _, begin, _ = _cluster_state()
    session.run(begin[1])  # trainer 1 entered a step and never ends it (killed)
    monkeypatch.setattr(save_pause, "CHIEF_WAIT_SECS", 0.5)
    chief = SavePause(session.run, state, begin[0], 0, 2, lambda: False)
    started = time.time()
    with chief.others_paused():
        pass
    assert 0.5 <= time.time() - started < 5
    assert "trainer(s) [1] did not hold still" in caplog.text
    session.run(state.mark_finished, {state.trainer_in: 1})  # a finished trainer is not waited for
    started = time.time()
    with chief.others_paused():
        pass
    assert time.time() - started < 0.5


def test_a_chief_that_died_while_saving_leaves_workers_held_until_its_restart_lowers_the_pause():
    """A chief killed inside ``others_paused`` never lowers the flag: simulated by raising it and dropping that
    SavePause (its ``finally`` never runs, as in a SIGKILL); the restarted chief's ``lower`` (SessionEngine._join
    calls it when it finds the ps ready) lets the held worker step on, and its next pause is a new generation."""
    session, state, step, begin, feed = _cluster_state()
    stop = threading.Event()
    session.run(state.set_pause, {state.generation_in: 7})  # the dead chief's pause, never lowered
    thread = _stepping_worker(session, state, step, begin, feed, stop)
    try:
        time.sleep(0.3)
        held_at = session.run(state.global_step)
        time.sleep(0.3)
        assert session.run(state.global_step) == held_at  # held: the flag stays raised with nobody to lower it
        assert session.run(state.paused)[1] == 7
        restarted = SavePause(session.run, state, begin[0], 0, 2, stop.is_set)
        restarted.lower()
        deadline = time.time() + 10
        while session.run(state.global_step) == held_at and time.time() < deadline:
            time.sleep(0.05)
        assert session.run(state.global_step) > held_at  # stepping again
        with restarted.others_paused():
            assert session.run(state.pause) == 8  # past every generation the worker acknowledged
    finally:
        stop.set()
        thread.join(30)
