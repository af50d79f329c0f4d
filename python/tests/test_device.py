"""Device tensors through the Python binding: registering device memory (__cuda_array_interface__,
DLPack, torch CUDA tensors), publish()'s ordering on the trainer's stream, and consumers that
receive into host or device memory with DLPack exports saying where the bytes are.

ctest runs this file with MODELCAST_DEVICE set (simulated by default: host memory standing in for
a GPU, so it runs on machines without one). Device memory comes from the library's own device
runtime through modelcast._core's private _testing_* helpers, wrapped in DeviceArray below, which
exposes __cuda_array_interface__ as CuPy or Numba arrays do.
"""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import modelcast
from modelcast import _core

from conftest import WAIT_S

DLPACK_CUDA = 2
DLPACK_CPU = 1

pytestmark = pytest.mark.skipif(os.environ.get("MODELCAST_DEVICE") in (None, "", "none"),
                                reason="needs MODELCAST_DEVICE=simulated or cuda (ctest sets it)")


def second_device():
    """Device 1 where there is one, so producer and consumer sit on different devices."""
    return 1 if _core._testing_device_count() > 1 else 0


class DeviceArray:
    """`host`'s values in device memory of the library's runtime, with __cuda_array_interface__."""

    def __init__(self, host, device=0, strides=None):
        self.host = np.ascontiguousarray(host)
        self.device = device
        self.strides = strides
        self.ptr = _core._testing_device_alloc(max(self.host.nbytes, 1), device)
        self.upload(self.host)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.host.shape, "typestr": self.host.dtype.str, "data": (self.ptr, False),
                "strides": self.strides, "version": 3}

    def upload(self, values):
        values = np.ascontiguousarray(values, dtype=self.host.dtype)
        assert values.nbytes == self.host.nbytes
        self.host = values  # keeps the source alive for copies queued on a stream
        _core._testing_device_copy(self.ptr, values.ctypes.data, values.nbytes)

    def free(self):
        if self.ptr:
            _core._testing_device_free(self.ptr)
            self.ptr = 0


def read_device(address, spec):
    """The bytes of a device tensor (a view's data_ptr) copied back to the host as a NumPy array."""
    out = np.empty(spec.shape, dtype=np.dtype(NUMPY_OF[spec.dtype]))
    _core._testing_device_copy(out.ctypes.data, address, out.nbytes)
    return out


NUMPY_OF = {"f32": "float32", "i64": "int64", "u8": "uint8", "f16": "float16", "bool": "bool"}


def model_values(step):
    """Values that differ per step and per tensor, odd sizes included."""
    rng = np.random.default_rng(step)
    return {
        "w": rng.standard_normal((33, 17)).astype(np.float32),
        "b": rng.integers(-2**40, 2**40, size=129, dtype=np.int64),
        "bytes": rng.integers(0, 256, size=1001, dtype=np.uint8),
        "half": rng.standard_normal(7).astype(np.float16),
        "mask": rng.integers(0, 2, size=(3, 5)).astype(bool),
    }


class DevicePair:
    """A Producer with `tensors` (DeviceArrays or other objects) and a Consumer with `options`."""

    def __init__(self, endpoint, tensors, **consumer_options):
        self.tensors = tensors
        self.producer = modelcast.Producer(control_endpoint=endpoint, model_name="pydevice")
        self.producer.register_all(tensors)
        self.consumer = modelcast.Consumer(endpoint, model_name="pydevice", **consumer_options)

    def publish(self, step, **order):
        ticket = self.producer.publish(step, **order)
        view = self.consumer.wait_for_version(ticket.version, WAIT_S)
        assert view is not None, f"version {ticket.version} did not arrive within {WAIT_S} s"
        assert view.version == ticket.version
        return view

    def close(self):
        self.consumer.close()
        self.producer.close()


@pytest.fixture
def device_arrays():
    arrays = {name: DeviceArray(values) for name, values in model_values(1).items()}
    yield arrays
    for a in arrays.values():
        a.free()  # after the test closed its producer: nothing reads them any more


def test_device_tensors_arrive_in_a_host_consumer(endpoint, device_arrays):
    pair = DevicePair(endpoint, device_arrays)
    try:
        first = pair.publish(1)
        for name, values in model_values(1).items():
            assert first.spec(name).memory == "host"
            np.testing.assert_array_equal(first.array(name), values)
            assert first.dlpack(name).__dlpack_device__() == (DLPACK_CPU, 0)
        received = torch.from_dlpack(first.dlpack("w"))  # the DLPack protocol, as torch uses it
        assert received.device.type == "cpu" and received.data_ptr() == first.data_ptr("w")
        np.testing.assert_array_equal(received.numpy(), model_values(1)["w"])
        # The trainer updates its device memory in place; the next version has the new values
        # and the version already held keeps the old ones.
        for name, values in model_values(2).items():
            device_arrays[name].upload(values)
        second = pair.publish(2)
        for name, values in model_values(2).items():
            np.testing.assert_array_equal(second.array(name), values)
        np.testing.assert_array_equal(first.array("w"), model_values(1)["w"])
    finally:
        pair.close()


@pytest.mark.parametrize("source", ["device", "host"])
def test_a_cuda_consumer_receives_into_device_memory(endpoint, device_arrays, source):
    tensors = device_arrays if source == "device" else model_values(1)
    device = second_device()
    pair = DevicePair(endpoint, tensors, memory="cuda", device=device)
    try:
        view = pair.publish(1)
        for name, values in model_values(1).items():
            spec = view.spec(name)
            assert (spec.memory, spec.device) == ("cuda", device)
            assert _core._device_of(view.data_ptr(name)) == device  # really device memory
            np.testing.assert_array_equal(read_device(view.data_ptr(name), spec), values)
            exported = view.dlpack(name)
            assert exported.__dlpack_device__() == (DLPACK_CUDA, device)
            info = _core._dlpack_info(exported.__dlpack__(stream=None))
            assert (info["device_type"], info["device_id"]) == (DLPACK_CUDA, device)
            assert info["data"] == view.data_ptr(name)
            assert info["shape"] == list(values.shape)
            capsule_info = _core._dlpack_info(view._dlpack(name))
            assert (capsule_info["device_type"], capsule_info["device_id"]) == (DLPACK_CUDA, device)
            with pytest.raises(modelcast.InvalidArgumentError, match=f"'{name}' is in device memory"):
                view.array(name)
    finally:
        pair.close()


def test_device_views_export_through_dlpack_and_register_again(endpoint, device_arrays):
    """A device consumer's DLPack exports are device tensors another producer can register (the
    DLPack path of register()), and their bytes reach that producer's consumer."""
    pair = DevicePair(endpoint, device_arrays, memory="cuda", device=0)
    relay_endpoint = endpoint.replace("producer.sock", "relay.sock")  # same short directory
    try:
        view = pair.publish(1)
        relay = DevicePair(relay_endpoint, {name: view.dlpack(name) for name in view.names()})
        try:
            relayed = relay.publish(7)
            for name, values in model_values(1).items():
                np.testing.assert_array_equal(relayed.array(name), values)
        finally:
            relay.close()
    finally:
        pair.close()


class FakeTorchStream:
    """What publish() reads of a torch.cuda.Stream: the raw handle in .cuda_stream."""

    def __init__(self, handle):
        self.cuda_stream = handle


# "numpy": a handle held as a NumPy integer, refused once as if its value were wrong.
@pytest.mark.parametrize("as_object", [False, True, "numpy"])
def test_publish_on_a_stream_snapshots_after_the_work_queued_on_it(endpoint, as_object):
    """The trainer's last update is still queued on its stream (held by a gate) when publish() is
    called: publish() must return without waiting for it and snapshot after it."""
    old, new = np.arange(1000, dtype=np.float32), -np.arange(1000, dtype=np.float32)
    w = DeviceArray(old)
    # The update is a device-to-device copy: CUDA waits for the stream before a copy from pageable
    # host memory, which would block here on the gate.
    update = DeviceArray(new)
    stream = _core._testing_device_stream(0)
    pair = DevicePair(endpoint, {"w": w})
    try:
        pair.publish(1)
        gate = _core._TestingGate(stream)
        _core._testing_copy_async(w.ptr, update.ptr, new.nbytes, stream)
        tickets = []
        publisher = threading.Thread(target=lambda: tickets.append(pair.producer.publish(
            2, stream=np.uint64(stream) if as_object == "numpy" else FakeTorchStream(stream) if as_object else stream)))
        publisher.start()
        publisher.join(WAIT_S)
        returned = not publisher.is_alive()
        gate.open()
        publisher.join()
        assert returned, "publish(stream=...) waited for the stream's work instead of ordering after it"
        view = pair.consumer.wait_for_version(tickets[0].version, WAIT_S)
        assert view is not None and view.version == tickets[0].version
        np.testing.assert_array_equal(view.array("w"), new)
    finally:
        pair.close()
        _core._testing_destroy_stream(stream)
        w.free()
        update.free()


@pytest.mark.parametrize("bad", ["stream", 1.5, -1, True])
def test_publish_refuses_a_stream_that_is_no_handle(endpoint, bad):
    with modelcast.Producer(control_endpoint=endpoint) as producer:
        producer.register("x", np.zeros(3, dtype=np.float32))
        with pytest.raises(modelcast.InvalidArgumentError, match="stream must be None, a raw CUDA stream handle"):
            producer.publish(1, stream=bad)
        with pytest.raises(modelcast.InvalidArgumentError, match="event must be None"):
            producer.publish(1, event=bad)


def test_a_non_contiguous_device_tensor_is_refused(endpoint):
    a = DeviceArray(np.zeros((4, 6), dtype=np.float32), strides=(4, 16))  # a transposed layout
    try:
        with modelcast.Producer(control_endpoint=endpoint) as producer:
            with pytest.raises(modelcast.InvalidArgumentError, match="tensor 'wt' is not contiguous"):
                producer.register("wt", a)
    finally:
        a.free()


def test_row_strides_of_a_contiguous_device_tensor_are_accepted(endpoint):
    a = DeviceArray(np.zeros((4, 6), dtype=np.float32), strides=(24, 4))
    try:
        with modelcast.Producer(control_endpoint=endpoint) as producer:
            producer.register("w", a)
    finally:
        a.free()


class HostPointerClaimingDevice:
    """__cuda_array_interface__ over a NumPy array's host memory: wrongly located."""

    def __init__(self, array):
        self.array = array
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str,
                                         "data": (array.ctypes.data, False), "version": 3}


def test_a_device_tensor_whose_pointer_is_host_memory_is_refused(endpoint):
    with modelcast.Producer(control_endpoint=endpoint) as producer:
        with pytest.raises(modelcast.InvalidArgumentError,
                           match="tensor 'w' is registered as cuda:0 but its data pointer is in host memory"):
            producer.register("w", HostPointerClaimingDevice(np.ones(16, dtype=np.float32)))


class DlpackClaimingDevice:
    """__dlpack_device__ says CUDA while the DLPack tensor it exports is host memory."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return (DLPACK_CUDA, 0)


def test_a_dlpack_tensor_that_is_not_where_it_says_is_refused(endpoint):
    with modelcast.Producer(control_endpoint=endpoint) as producer:
        with pytest.raises(modelcast.InvalidArgumentError, match=r"tensor 'd': __dlpack_device__\(\) says \(2, 0\)"):
            producer.register("d", DlpackClaimingDevice(np.ones(8, dtype=np.float32)))


def test_host_and_device_tensors_do_not_mix(endpoint):
    a = DeviceArray(np.ones(8, dtype=np.float32))
    try:
        with modelcast.Producer(control_endpoint=endpoint) as producer:
            producer.register("host", torch.zeros(3))
            with pytest.raises(modelcast.InvalidArgumentError, match="must all live in one place"):
                producer.register("dev", a)
    finally:
        a.free()


def test_an_unknown_memory_kind_is_refused(endpoint):
    with pytest.raises(modelcast.InvalidArgumentError, match="memory 'gpu' is not one modelcast knows"):
        modelcast.Consumer(endpoint, memory="gpu")


NO_DEVICE_SCRIPT = r"""
import sys
import numpy as np
import modelcast

endpoint = sys.argv[1]
try:
    modelcast.Consumer(endpoint, memory="cuda")
except modelcast.StateError as e:
    print("consumer:", e)

class Cai:
    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (4096, False), "version": 3}

with modelcast.Producer(control_endpoint=endpoint) as producer:
    try:
        producer.register("w", Cai())
    except modelcast.StateError as e:
        print("producer:", e)
"""


def test_device_memory_without_a_device_is_a_clear_error(endpoint):
    # The device runtime is chosen once per process: this one has a device, so ask another.
    env = dict(os.environ, MODELCAST_DEVICE="none")
    out = subprocess.run([sys.executable, "-c", NO_DEVICE_SCRIPT, endpoint], env=env, capture_output=True,
                         text=True, timeout=WAIT_S)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout + out.stderr
    assert lines[0].startswith("consumer: a consumer receiving into device memory needs a device"), lines[0]
    assert lines[1].startswith("producer: tensor 'w' in device memory needs a device"), lines[1]
    assert "MODELCAST_DEVICE=simulated" in lines[0]


@pytest.mark.skipif(os.environ.get("MODELCAST_DEVICE") != "cuda" or not torch.cuda.is_available(),
                    reason="torch CUDA tensors need MODELCAST_DEVICE=cuda and a GPU")
def test_torch_cuda_tensors_end_to_end(endpoint):
    model = torch.nn.Linear(64, 32).cuda()
    pair = DevicePair(endpoint, dict(model.named_parameters()), memory="cuda", device=0)
    try:
        with torch.no_grad():
            model.weight.mul_(3.0)  # queued on the current stream; publish orders after it
        view = pair.publish(1, stream=torch.cuda.current_stream())
        for name, param in model.named_parameters():
            received = torch.from_dlpack(view.dlpack(name))
            assert received.is_cuda and received.device.index == 0
            torch.testing.assert_close(received, param.detach(), rtol=0, atol=0)
            torch.testing.assert_close(view.tensor(name), param.detach(), rtol=0, atol=0)
    finally:
        pair.close()
