"""Callbacks run on library threads with the GIL taken; their exceptions are reported, not fatal;
blocking calls release the GIL."""

import signal
import subprocess
import sys
import threading
import time

import numpy as np

import modelcast
from conftest import WAIT_S


def test_on_update_sees_each_version_and_its_exceptions_are_reported(endpoint, monkeypatch):
    seen, reported = [], []
    second = threading.Event()

    def on_update(view):
        seen.append((view.version, float(view.array("w")[0])))
        if view.version == 1:
            raise RuntimeError("callback failure on purpose")
        second.set()

    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    weights = np.zeros(4, dtype=np.float32)
    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as producer, \
         modelcast.Consumer(endpoint, model_name="pytest", on_update=on_update) as consumer:
        producer.register("w", weights)
        for version in (1, 2):
            weights[:] = version
            assert producer.publish(version).version == version
            assert consumer.wait_for_version(version, WAIT_S) is not None
        assert second.wait(WAIT_S)
        # The exception in the first call neither stopped the consumer nor the second call.
        assert seen == [(1, 1.0), (2, 2.0)]
        assert consumer.callback_errors == 1
        assert len(reported) == 1
        assert isinstance(reported[0].exc_value, RuntimeError)
        assert "on_update" in str(reported[0].err_msg or reported[0].object)


def test_an_async_callback_behind_a_decorator_is_reported_as_the_callbacks_error(endpoint, monkeypatch):
    # The check at construction cannot see through a wrapper: the coroutine it returned was never
    # awaited, and the callback's body never ran, with a warning at most.
    import functools
    reported, ran = [], []

    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*args):
            return fn(*args)
        return wrapper

    @logged
    async def on_update(view):
        ran.append(view.version)

    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as producer, \
         modelcast.Consumer(endpoint, model_name="pytest", on_update=on_update) as consumer:
        producer.register("w", np.zeros(4, dtype=np.float32))
        producer.publish(1)
        assert consumer.wait_for_version(1, WAIT_S) is not None
        deadline = time.monotonic() + WAIT_S
        while consumer.callback_errors < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert consumer.callback_errors == 1
    assert ran == []
    assert len(reported) == 1 and isinstance(reported[0].exc_value, TypeError)
    assert "awaitable" in str(reported[0].exc_value)


def test_on_delivery_reports_each_consumer_ack(endpoint):
    deliveries, delivered = [], threading.Event()

    def on_delivery(delivery):
        deliveries.append(delivery)
        delivered.set()

    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest", on_delivery=on_delivery) as producer, \
         modelcast.Consumer(endpoint, model_name="pytest", consumer_name="reader-1") as consumer:
        producer.register("w", np.arange(8, dtype=np.int32))
        version = producer.publish(1).version
        assert consumer.wait_for_version(version, WAIT_S) is not None
        assert delivered.wait(WAIT_S)
        assert deliveries[0].version == version
        assert deliveries[0].consumer == "reader-1"
        assert deliveries[0].bytes >= 32
        assert producer.callback_errors == 0


def test_wait_for_version_releases_the_gil(endpoint):
    # The other thread is woken just before the call and needs the GIL to record that it ran.
    # With a long switch interval this thread keeps the GIL through the few bytecodes around the
    # call, so the other thread can only have run by the time the call returns if the call
    # released the GIL while it waited.
    go, ran = threading.Event(), []
    worker = threading.Thread(target=lambda: (go.wait(WAIT_S), ran.append(True)))
    interval = sys.getswitchinterval()
    with modelcast.Consumer(endpoint, model_name="pytest") as consumer:  # no producer: times out
        worker.start()
        sys.setswitchinterval(5.0)
        try:
            go.set()
            timed_out = consumer.wait_for_version(1, 0.5) is None
            ran_during_wait = bool(ran)
        finally:
            sys.setswitchinterval(interval)
        worker.join(WAIT_S)
    assert timed_out
    assert ran_during_wait


CLOSE_DURING_CALLBACK = """
import sys, threading
import numpy as np
import modelcast
entered, proceed = threading.Event(), threading.Event()
def on_update(view):
    entered.set()
    proceed.wait()  # GIL released; needs it back to return
with modelcast.Producer(control_endpoint=sys.argv[1], model_name="pytest") as producer:
    producer.register("w", np.zeros(16, dtype=np.float32))
    consumer = modelcast.Consumer(sys.argv[1], model_name="pytest", on_update=on_update)
    producer.publish(1)
    assert entered.wait(20)
    sys.setswitchinterval(5.0)  # this thread keeps the GIL up to close() unless it releases it
    proceed.set()
    consumer.close()
print("closed")
"""


def test_close_while_a_callback_needs_the_gil_does_not_deadlock(endpoint):
    # close() joins the service thread, which is inside on_update waiting for the GIL; close
    # must release the GIL or both wait for ever. In a child process, so a deadlock is a timeout
    # here rather than a hung test run.
    result = subprocess.run([sys.executable, "-c", CLOSE_DURING_CALLBACK, endpoint], capture_output=True,
                            text=True, timeout=WAIT_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "closed"


# Closing a Producer or Consumer joins its service thread, which runs its callbacks: a close()
# inside one of them, or one that drops the last reference while a callback still uses the object,
# once aborted the process ("Resource deadlock avoided"). Each case runs in a child process, so an
# abort fails its case alone.
CLOSED_FROM_A_CALLBACK = {
    "on_delivery closes its producer": """
def on_delivery(d):
    producer.close()
    done.set()
producer = modelcast.Producer(control_endpoint=endpoint, model_name="pytest", on_delivery=on_delivery)
producer.register("w", weights)
consumer = modelcast.Consumer(producer.control_endpoint, model_name="pytest")
producer.publish(1)
assert done.wait(20)
assert_closed(producer)
consumer.close()
""",
    "on_error closes its consumer": """
def on_error(e):
    consumer.close()
    done.set()
producer = modelcast.Producer(control_endpoint=endpoint, model_name="pytest")
producer.register("w", weights)
consumer = modelcast.Consumer(producer.control_endpoint, model_name="not-served", on_error=on_error)
assert done.wait(20)
assert_closed(consumer)
producer.close()
""",
    "on_update closes its consumer": """
def on_update(view):
    consumer.close()
    done.set()
producer = modelcast.Producer(control_endpoint=endpoint, model_name="pytest")
producer.register("w", weights)
consumer = modelcast.Consumer(producer.control_endpoint, model_name="pytest", on_update=on_update)
producer.publish(1)
assert done.wait(20)
assert_closed(consumer)
producer.close()
""",
    "close() while on_update waits on its consumer": """
entered = threading.Event()
def on_update(view):
    entered.set()
    try:
        consumer.wait_for_version(5, 20)  # returns when closed, holding the last reference
    finally:
        done.set()
producer = modelcast.Producer(control_endpoint=endpoint, model_name="pytest")
producer.register("w", weights)
consumer = modelcast.Consumer(producer.control_endpoint, model_name="pytest", on_update=on_update)
producer.publish(1)
assert entered.wait(20)
consumer.close()
assert done.wait(20)
producer.close()
""",
}


def test_a_callback_may_close_what_runs_it(endpoint):
    prelude = ("import sys, threading\nimport numpy as np\nimport modelcast\n"
               "endpoint = sys.argv[1]\ndone = threading.Event()\nweights = np.zeros(16, dtype=np.float32)\n"
               "def assert_closed(o):\n"
               "    try:\n        o.stats()\n    except modelcast.StateError:\n        return\n"
               "    raise AssertionError('still open')\n")
    failed = []
    for case, script in CLOSED_FROM_A_CALLBACK.items():
        result = subprocess.run([sys.executable, "-c", prelude + script + "print('ok')\n", endpoint],
                                capture_output=True, text=True, timeout=WAIT_S)
        if result.returncode != 0 or result.stdout.strip() != "ok":
            failed.append(f"{case}: rc {result.returncode}, {result.stderr.strip().splitlines()[-1:]}")
    assert not failed, "\n".join(failed)


# The program exits while daemon threads are inside library calls that run without the GIL: a
# publish loop, a wait for a version that never comes (ended by the exit's close), a predictor
# fit. Each takes the GIL back after the interpreter began to finalize, and Python ends such a
# thread by unwinding it: that unwind once aborted the whole process ("terminate called without
# an active exception", exit status 134, every run). Each thread says it is running before the
# main thread exits; the exit finds it in or about to enter its call.
EXIT_DURING_CALLS = """
import sys, threading
import numpy as np
import modelcast
from modelcast import predictor
endpoint = sys.argv[1]
producer = modelcast.Producer(control_endpoint=endpoint, model_name="pytest")
weights = np.zeros(1 << 20, dtype=np.float32)
producer.register("w", weights)
consumer = modelcast.Consumer(endpoint, model_name="pytest")
running = [threading.Event() for _ in range(3)]
def publisher():
    step = 0
    while True:
        producer.publish(step)
        step += 1
        running[0].set()
def waiter():
    running[1].set()
    consumer.wait_for_version(10**9, float("inf"))
def fitter():
    points = predictor.curve_points(list(range(0, 400, 4)), [3.0 / (1 + s / 50) for s in range(0, 400, 4)])
    options = predictor.ForecastOptions()
    options.total_steps = 4000
    while True:
        predictor.forecast_curve(points, options)
        running[2].set()
for target in (publisher, waiter, fitter):
    threading.Thread(target=target, daemon=True).start()
for event in running:
    assert event.wait(20)
print("exiting", flush=True)
"""


def exits_cleanly(script, endpoint, attempts):
    """Runs `script` (which prints "exiting" and ends with daemon threads busy) `attempts` times."""
    for attempt in range(attempts):
        result = subprocess.run([sys.executable, "-c", script, endpoint], capture_output=True, text=True,
                                timeout=WAIT_S * 3)
        assert result.returncode == 0, f"attempt {attempt}: rc {result.returncode}: {result.stderr[-2000:]}"
        assert result.stdout.strip() == "exiting"


def test_an_exit_while_daemon_threads_are_inside_library_calls_is_clean(endpoint):
    exits_cleanly(EXIT_DURING_CALLS, endpoint, 3)


# Daemon threads that catch the library's errors in a loop while the program exits, one of them
# inside an except block: the error's translation ran Python code inside pybind11's catch (...),
# where a thread that finalization ends (pthread_exit) aborted the process, or crashed it (9 runs
# in 10; in an except block, every run even once only the class and message were handed over).
EXIT_WHILE_ERRORS_ARE_CAUGHT = """
import sys, threading
import numpy as np
import modelcast
endpoint = sys.argv[1]
producer = modelcast.Producer(control_endpoint=endpoint, model_name="pytest")
producer.register("w", np.arange(1000, dtype=np.float32))
consumer = modelcast.Consumer(endpoint, model_name="pytest")
producer.publish(1)
view = consumer.wait_for_version(1, 60)
caught = [threading.Event() for _ in range(2)]
def lookup():
    while True:
        try:
            raise KeyError("handled")  # inside an except block, an exception's instance is made at once
        except KeyError:
            try:
                view.array("missing")
            except modelcast.InvalidArgumentError:
                caught[0].set()
def monitor():
    while True:
        try:
            consumer.stats()
        except modelcast.Error:  # closed by the exit's close_all
            pass
        caught[1].set()
for target in (lookup, monitor):
    threading.Thread(target=target, daemon=True).start()
for event in caught:
    assert event.wait(20)
print("exiting", flush=True)
"""


def test_an_exit_while_daemon_threads_catch_library_errors_is_clean(endpoint):
    exits_cleanly(EXIT_WHILE_ERRORS_ARE_CAUGHT, endpoint, 4)


# Ctrl-C during a wait that would last for ever (math.inf) ends it with KeyboardInterrupt, as it
# ends time.sleep: the library's waits block in C++, where Python's signal handlers never ran,
# and such a process could only be killed. The child says it is about to wait; SIGINT follows.
WAIT_FOR_EVER = """
import math, sys
import modelcast
endpoint, which = sys.argv[1], sys.argv[2]
producer = modelcast.Producer(control_endpoint=endpoint, model_name="pytest")
consumer = modelcast.Consumer(endpoint, model_name="pytest")
try:
    print("waiting", flush=True)
    if which == "consumer":
        consumer.wait_for_version(10**9, math.inf)
    else:
        producer.wait_for_consumers(1000, math.inf)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_ctrl_c_ends_a_wait_for_ever(endpoint):
    for which in ("consumer", "producer"):
        child = subprocess.Popen([sys.executable, "-c", WAIT_FOR_EVER, endpoint, which], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        try:
            assert child.stdout.readline().strip() == "waiting"
            child.send_signal(signal.SIGINT)
            out, _ = child.communicate(timeout=WAIT_S)
        finally:
            child.kill()
        # Exactly: UCX's own log (a join the producer answers while the interrupted process tears
        # its consumer down fails there, "shmat ... failed") goes to modelcast's log on stderr.
        assert out.splitlines() == ["interrupted"], (which, out)
        assert child.returncode == 0, which


def test_an_owner_whose_callback_is_its_own_method_is_collected_with_what_it_owns(endpoint):
    # self.consumer = Consumer(..., on_update=self.on_update) is a cycle through the C++ object:
    # the collector could not see the callback's reference, so the consumer's threads, sockets and
    # registration lived on, and its callback ran, until the process exited.
    import gc
    import weakref

    class Server:
        def __init__(self):
            self.updates = 0
            self.consumer = modelcast.Consumer(endpoint, model_name="pytest", on_update=self.on_update)

        def on_update(self, view):
            self.updates += 1

    class Trainer:
        def __init__(self):
            self.weights = np.zeros(4, dtype=np.float32)
            self.producer = modelcast.Producer(control_endpoint=endpoint, model_name="pytest",
                                               on_delivery=self.on_delivery)
            self.producer.register("w", self.weights)

        def on_delivery(self, delivery):
            pass

    trainer = Trainer()
    server = Server()
    assert trainer.producer.wait_for_consumers(1, WAIT_S)
    trainer.producer.publish(1)
    assert server.consumer.wait_for_version(1, WAIT_S) is not None
    gone_server, gone_trainer = weakref.ref(server), weakref.ref(trainer)
    consumer_impl = weakref.ref(server.consumer._impl)
    del server, trainer
    gc.collect()
    assert gone_server() is None, "the owner of a Consumer whose callback is its method was never collected"
    assert consumer_impl() is None
    assert gone_trainer() is None, "the owner of a Producer whose callback is its method was never collected"
