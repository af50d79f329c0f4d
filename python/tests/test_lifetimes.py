"""Arrays and tensors taken from a view stay valid exactly as long as they are used: after the
view object, the Consumer and the Producer are gone, and while newer versions arrive."""

import gc
import math
import subprocess
import sys

import numpy as np
import torch

from conftest import LocalPair


def values(version):
    return np.arange(1000, dtype=np.float32) * version


def test_array_and_tensor_outlive_view_consumer_and_producer(endpoint):
    p = LocalPair(endpoint, {"w": torch.from_numpy(values(1).copy())})
    view = p.publish()
    array, tensor = view.array("w"), view.tensor("w")
    del view
    p.close()  # stops the consumer, whose receive buffers would be freed if nothing held them
    del p
    gc.collect()
    # Valid memory (a freed buffer would be unmapped or reused): the version's own bytes.
    np.testing.assert_array_equal(array, values(1))
    np.testing.assert_array_equal(tensor.numpy(), values(1))
    assert array.base.version == 1  # the ModelView copy the array owns


def test_view_held_while_new_versions_arrive_keeps_its_values(endpoint):
    weights = torch.from_numpy(values(1).copy())
    p = LocalPair(endpoint, {"w": weights}, buffers=3)
    try:
        old = p.publish(1).array("w")  # only the array holds version 1
        for version in range(2, 8):  # more versions than receive buffers
            weights.copy_(torch.from_numpy(values(version)))
            newest = p.publish(version)
            np.testing.assert_array_equal(newest.array("w"), values(version))
            np.testing.assert_array_equal(old, values(1))
            assert newest.data_ptr("w") != old.__array_interface__["data"][0]
    finally:
        p.close()


def test_releasing_views_lets_buffers_be_reused(endpoint):
    # The counterpart of the test above: once no Python object holds a version, its buffer is
    # free again, so 2 buffers serve any number of versions in turn.
    weights = torch.from_numpy(values(1).copy())
    p = LocalPair(endpoint, {"w": weights}, buffers=2)
    try:
        addresses = set()
        for version in range(1, 7):
            weights.copy_(torch.from_numpy(values(version)))
            view = p.publish(version)
            np.testing.assert_array_equal(view.array("w"), values(version))
            addresses.add(view.data_ptr("w"))
            del view
            gc.collect()
        assert len(addresses) <= 2
    finally:
        p.close()


def test_producer_holds_registered_tensors_until_closed(endpoint):
    import weakref
    p = LocalPair(endpoint, {})
    tensor = torch.from_numpy(values(3).copy())
    p.producer.register("w", tensor)
    watch = weakref.ref(tensor)
    del tensor
    gc.collect()
    assert watch() is not None  # the producer's reference keeps the memory it reads alive
    np.testing.assert_array_equal(p.publish(1).array("w"), values(3))
    p.close()
    gc.collect()
    assert watch() is None  # and close() lets it go


def _blocked_in(call, ready, outcome):
    """Runs call() on this thread after a first short call shows the object works; sets `ready`
    just before the long call, and records in `outcome` what it raised or returned."""
    try:
        call(0.01)
        ready.set()
        outcome.append(call(math.inf))  # wait for ever
    except Exception as e:  # noqa: BLE001 - the test checks which
        outcome.append(e)


def test_close_ends_a_wait_on_another_thread(endpoint):
    import threading

    import modelcast

    p = LocalPair(endpoint, {"w": torch.from_numpy(values(1).copy())})
    try:
        waits = {
            "consumer": lambda timeout: p.consumer.wait_for_version(1, timeout),
            "producer": lambda timeout: p.producer.wait_for_consumers(2, timeout),
        }
        for name, call in waits.items():
            ready, outcome = threading.Event(), []
            waiter = threading.Thread(target=_blocked_in, args=(call, ready, outcome), daemon=True)
            waiter.start()
            assert ready.wait(30), f"the {name}'s first wait never returned"
            (p.consumer if name == "consumer" else p.producer).close()
            waiter.join(30)
            assert not waiter.is_alive(), f"close() left the {name}'s wait_for_* waiting"
            assert len(outcome) == 1 and isinstance(outcome[0], modelcast.StateError), outcome
            assert "closed" in str(outcome[0])
    finally:
        p.close()


# A child made by fork() holds copies of a Producer and a Consumer whose threads and sockets stayed
# in the parent: its publish() went nowhere (and reused the parent's version numbers), its consumer
# never saw a version, and its exit crashed (close() aborted, the producer's destructor joined a
# thread the child does not have). Now every call there raises StateError, and the child exits
# cleanly while the parent goes on. In a child interpreter, so that a crash fails this test alone.
FORK_AFTER_MAKING = """
import os, sys
import numpy as np
import modelcast
producer = modelcast.Producer(control_endpoint=sys.argv[1], model_name="pytest")
producer.register("w", np.arange(8, dtype=np.float32))
consumer = modelcast.Consumer(sys.argv[1], model_name="pytest")
producer.publish(1)
assert consumer.wait_for_version(1, timeout=20) is not None
pid = os.fork()
if pid == 0:
    for call in (lambda: producer.publish(2), lambda: consumer.acquire(), lambda: producer.stats()):
        try:
            call()
            sys.exit(3)
        except modelcast.StateError as e:
            assert "forked" in str(e) and "'spawn'" in str(e), e
    # A new one connected and then never received a version, saying nothing (UCX's threads
    # stayed in the parent).
    for make in (lambda: modelcast.Consumer(sys.argv[1], model_name="pytest"),
                 lambda: modelcast.Producer(control_endpoint=sys.argv[1], model_name="pytest")):
        try:
            make()
            sys.exit(4)
        except modelcast.StateError as e:
            assert "was forked by process" in str(e) and "'spawn'" in str(e), e
    # Nor in a child of the child (its objects were all forked away already: that was taken
    # for no live objects, and the grandchild's Consumer never received, saying nothing).
    grandchild = os.fork()
    if grandchild == 0:
        try:
            modelcast.Consumer(sys.argv[1], model_name="pytest")
            os._exit(5)
        except modelcast.StateError as e:
            os._exit(0 if "was forked by process" in str(e) else 6)
    _, status = os.waitpid(grandchild, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(os.waitstatus_to_exitcode(status))
    consumer.close()  # nothing to stop in the child
    sys.exit(0)  # a normal exit: atexit closes every live object, then they are collected
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
assert producer.publish(2).version == 2  # the parent's objects are untouched
assert consumer.wait_for_version(2, timeout=20) is not None
print("parent ok")
"""


def test_a_forked_child_is_told_its_objects_stayed_in_the_parent_and_exits_cleanly(endpoint):
    result = subprocess.run([sys.executable, "-c", FORK_AFTER_MAKING, endpoint], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["child", "0", "parent", "ok"], result.stdout + result.stderr


# Arrays and views of a Consumer closed before the fork: the child has them, but not the thread
# of the transport that registered their memory, which their release waited for, so the child
# hung at `del`, at its exit, or in a multiprocessing worker that dropped what it inherited.
FORK_HOLDING_VIEWS = """
import os, sys
import numpy as np
import modelcast
producer = modelcast.Producer(control_endpoint=sys.argv[1], model_name="pytest")
producer.register("w", np.arange(8, dtype=np.float32))
consumer = modelcast.Consumer(sys.argv[1], model_name="pytest")
view = consumer.wait_for_version(producer.publish(1).version, timeout=20)
array = view.array("w")
consumer.close()
producer.close()
pid = os.fork()
if pid == 0:
    assert list(array) == list(range(8)), array
    del array, view
    sys.exit(0)  # and the interpreter's finalization
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
print("parent", list(array) == list(range(8)))
"""


# A Consumer closed in its own callback is destroyed on a thread of its own, which the exit waits
# for; a child forked meanwhile has no such thread and waited for it for ever.
FORK_WHILE_A_CONSUMER_IS_DESTROYED = """
import os, sys, threading
import numpy as np
import modelcast
producer = modelcast.Producer(control_endpoint=sys.argv[1], model_name="pytest")
producer.register("w", np.arange(8, dtype=np.float32))
closed, release = threading.Event(), threading.Event()
def on_update(view):
    consumer.close()  # its destruction waits for this callback to return
    closed.set()
    release.wait(60)
consumer = modelcast.Consumer(sys.argv[1], model_name="pytest", on_update=on_update)
producer.publish(1)
assert closed.wait(30)
pid = os.fork()
if pid == 0:
    sys.exit(0)
release.set()
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_a_child_forked_while_a_consumer_is_destroyed_exits(endpoint):
    result = subprocess.run([sys.executable, "-c", FORK_WHILE_A_CONSUMER_IS_DESTROYED, endpoint], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["child", "0"], result.stdout + result.stderr


def test_a_forked_child_lets_go_of_views_of_a_closed_consumer_and_exits(endpoint):
    result = subprocess.run([sys.executable, "-c", FORK_HOLDING_VIEWS, endpoint], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["child", "0", "parent", "True"], result.stdout + result.stderr


# A Producer or Consumer dropped without close() closes in its destructor, which lets the GIL go;
# a collection on another thread meanwhile found the half-freed object and freed it again (the
# process aborted: "Tried to deallocate unregistered instance"). Another thread that allocates is
# all it takes to collect then. In a child process, so that an abort fails this case alone.
DROPPED_UNCLOSED_WHILE_ANOTHER_THREAD_ALLOCATES = """
import sys, threading
import numpy as np
import modelcast
endpoint = sys.argv[1]
stop = threading.Event()
def allocate():
    while not stop.is_set():
        [[i] for i in range(2000)]
thread = threading.Thread(target=allocate)
thread.start()
try:
    producer = modelcast.Producer(control_endpoint=endpoint, model_name="pytest")
    producer.register("w", np.zeros(4, dtype=np.float32))
    for _ in range(20):
        consumer = modelcast.Consumer(endpoint, model_name="pytest")
        del consumer
    del producer
    for i in range(5):
        other = modelcast.Producer(control_endpoint=endpoint + "-" + str(i), model_name="pytest")
        other.register("w", np.zeros(4, dtype=np.float32))
        del other
finally:
    stop.set()
    thread.join()
print("dropped")
"""


def test_objects_dropped_unclosed_while_another_thread_allocates_go_once(endpoint):
    result = subprocess.run([sys.executable, "-c", DROPPED_UNCLOSED_WHILE_ANOTHER_THREAD_ALLOCATES, endpoint],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "dropped"
