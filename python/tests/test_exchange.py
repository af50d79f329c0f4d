"""A producer and a consumer in separate Python processes exchange versions; every element of
every version is checked, through both NumPy arrays and torch tensors."""

import threading
import time

import numpy as np
import pytest
import torch

import modelcast
from conftest import WAIT_S
from model_values import LAYOUT, as_numpy, expected


def check_version(view, version):
    assert view.version == version
    assert view.metadata["filled"] == str(version)
    assert view.names() == list(LAYOUT)
    for name, (_, dtype, shape) in LAYOUT.items():
        want = expected(name, version)
        got = view.tensor(name)
        assert tuple(got.shape) == shape
        assert got.dtype == (dtype if isinstance(dtype, torch.dtype) else torch.from_numpy(np.zeros(0, dtype)).dtype)
        np.testing.assert_array_equal(as_numpy(got), want, err_msg=f"{name} in version {version}")
        np.testing.assert_array_equal(view.array(name, bf16="f32"), want, err_msg=f"{name} in version {version}")


def test_versions_cross_processes_with_every_value(producer_process, endpoint):
    with modelcast.Consumer(endpoint, model_name="pytest") as consumer:
        for step in (10, 20, 30, 40):
            version = producer_process.publish(step)
            view = consumer.wait_for_version(version, WAIT_S)
            assert view is not None, f"version {version} did not arrive within {WAIT_S} s"
            # The consumer asks for the newest version only: it is this one, the producer waits for us.
            assert view.step == step
            check_version(view, version)
        stats = consumer.stats()
        assert stats.current_version == 4
        assert stats.versions_rejected == 0
        assert stats.bytes_received > 0
        assert stats.producer_connected
        # Printed, a snapshot shows its fields and values (not "<ConsumerStats object at 0x...>").
        assert repr(stats).startswith("ConsumerStats(current_version=4, producer_connected=True, ")
        assert f"bytes_received={stats.bytes_received}" in repr(stats)


def test_expected_layout_accepts_the_producers_layout(producer_process, endpoint):
    layout = [(name, dtype, shape) for name, (_, dtype, shape) in LAYOUT.items()]
    with modelcast.Consumer(endpoint, model_name="pytest", expected_layout=layout) as consumer:
        version = producer_process.publish(1)
        view = consumer.wait_for_version(version, WAIT_S)
        assert view is not None
        check_version(view, version)
        assert [s.dtype for s in view.specs()] == ["f32", "f32", "bf16", "bool", "i64", "f16", "i32"]


def test_transport_options_choose_the_in_process_loopback(endpoint):
    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest", transports=["ucx", "loopback"]) as producer, \
         modelcast.Consumer(endpoint, model_name="pytest", transports=["loopback"]) as consumer:
        weights = np.arange(10, dtype=np.float64)
        producer.register("w", weights)
        view = consumer.wait_for_version(producer.publish(1).version, WAIT_S)
        assert view is not None
        np.testing.assert_array_equal(view.array("w"), weights)
        assert consumer.stats().transport == "loopback"
        assert producer.stats().transport == "ucx,loopback"
        assert "versions_published=1, " in repr(producer.stats())
        assert "transport='ucx,loopback'" in repr(producer.stats())


def test_a_producer_that_closes_says_so_and_its_version_stays(endpoint):
    with modelcast.Consumer(endpoint, model_name="pytest") as consumer:
        with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as producer:
            weights = np.arange(10, dtype=np.float64)
            producer.register("w", weights)
            assert consumer.wait_for_version(producer.publish(1).version, WAIT_S) is not None
            assert not consumer.stats().producer_stopped
        deadline = time.monotonic() + WAIT_S
        while not consumer.stats().producer_stopped and time.monotonic() < deadline:
            time.sleep(0.01)  # polling a state, bounded by the deadline
        stats = consumer.stats()
        assert stats.producer_stopped, "the producer's last word was not taken"
        assert not stats.producer_connected
        assert consumer.acquire().version == 1


def test_reader_threads_always_see_whole_versions(producer_process, endpoint):
    # Readers acquire the newest view over and over while versions arrive; every view they get
    # must hold exactly its own version's values (the swap is atomic, and a held view is never
    # written into).
    stop, failures, checked = threading.Event(), [], [0] * 3

    def read(index):
        while not stop.is_set():
            view = consumer.acquire()
            if view is None:
                continue
            for name in ("encoder.weight", "counts", "mask"):
                if not np.array_equal(as_numpy(view.tensor(name)), expected(name, view.version)):
                    failures.append(f"{name} of version {view.version}")
            checked[index] += 1

    with modelcast.Consumer(endpoint, model_name="pytest") as consumer:
        readers = [threading.Thread(target=read, args=(i,)) for i in range(3)]
        for r in readers:
            r.start()
        try:
            for step in range(1, 11):
                version = producer_process.publish(step)
                assert consumer.wait_for_version(version, WAIT_S) is not None
        finally:
            stop.set()
            for r in readers:
                r.join(WAIT_S)
    assert not failures, failures[:5]
    assert all(checked), checked


def test_consumers_relay_when_the_producer_asks(endpoint):
    # relay_fanout: the second consumer to ask gets the version from the first, which holds or
    # is receiving it; every value still arrives, and the producer counts who sent what.
    deliveries, both = [], threading.Event()

    def delivered(d):
        deliveries.append(d)
        if len(deliveries) == 2:
            both.set()

    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest", relay_fanout=1,
                            transfer_chunk_bytes=64 << 10, on_delivery=delivered) as producer, \
         modelcast.Consumer(endpoint, model_name="pytest", consumer_name="first") as first, \
         modelcast.Consumer(endpoint, model_name="pytest", consumer_name="second") as second:
        weights = np.arange(1 << 18, dtype=np.float64)  # 2 MiB: several blocks
        producer.register("w", weights)
        version = producer.publish(1).version
        for consumer in (first, second):
            view = consumer.wait_for_version(version, WAIT_S)
            assert view is not None
            np.testing.assert_array_equal(view.array("w"), weights)
        assert both.wait(WAIT_S), f"deliveries: {[(d.consumer, d.relay) for d in deliveries]}"
        direct = [d for d in deliveries if not d.relay]
        relayed = [d for d in deliveries if d.relay]
        assert len(direct) == 1 and len(relayed) == 1
        assert relayed[0].relay == direct[0].consumer
        stats = producer.stats()
        assert stats.relayed_deliveries == 1
        assert stats.bytes_relayed == relayed[0].bytes
        assert stats.relay_faults == 0
        assert stats.connections_opened == 2  # one for each consumer's join
        # The relay counts a block once its send completes, which its loop may see after the
        # receiver has acked: wait (bounded) for the count to arrive.
        deadline = time.monotonic() + WAIT_S
        while first.stats().bytes_relayed + second.stats().bytes_relayed < relayed[0].bytes:
            assert time.monotonic() < deadline, "the relay never counted what it sent"
            time.sleep(0.001)
        assert first.stats().bytes_relayed + second.stats().bytes_relayed == relayed[0].bytes


def test_publish_copies_only_what_the_slot_lacks_while_little_changes(endpoint):
    # A frozen body and a head that changes: once every slot holds a version whose block
    # digests are known, publish() copies only the blocks that differ, and the consumer still
    # gets every value.
    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest", transfer_chunk_bytes=64 << 10) as producer, \
         modelcast.Consumer(endpoint, model_name="pytest") as consumer:
        body = np.arange(1 << 18, dtype=np.float64)  # 2 MiB: 32 blocks
        head = np.zeros(16, dtype=np.float64)
        producer.register("body", body)
        producer.register("head", head)
        copied = []
        for version in range(1, 7):
            head[:] = version
            before = producer.stats().snapshot_bytes_copied
            assert producer.publish(version).version == version
            copied.append(producer.stats().snapshot_bytes_copied - before)
            view = consumer.wait_for_version(version, WAIT_S)
            assert view is not None
            np.testing.assert_array_equal(view.array("body"), body)
            np.testing.assert_array_equal(view.array("head"), head)
        whole = body.nbytes + head.nbytes
        assert copied[:3] == [whole] * 3, f"the first version in each of the three slots is copied whole: {copied}"
        assert all(0 < c <= 64 << 10 for c in copied[3:]), f"only the head's block should be copied: {copied}"


def test_a_zero_dimensional_tensor_in_metadata_is_sent_as_its_number(endpoint):
    # The README's publish(step, {"loss": loss}) with a torch loss sent
    # "tensor(0.2736, grad_fn=<MeanBackward0>)".
    layer = torch.nn.Linear(2, 1)
    loss = layer(torch.ones(1, 2)).pow(2).mean()
    loss.backward()
    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as producer, \
            modelcast.Consumer(endpoint, model_name="pytest") as consumer:
        producer.register("w", layer.weight)
        version = producer.publish(1, {"loss": loss, "lr": np.float32(0.5), "seen": np.array(7)}).version
        view = consumer.wait_for_version(version, WAIT_S)
        assert view is not None
        assert view.metadata == {"loss": str(loss.item()), "lr": "0.5", "seen": "7"}


def test_bf16_tensors_become_arrays_only_as_the_caller_says(endpoint):
    # NumPy has no bf16: array() refuses one unless told to copy it into float32 (exactly) or to
    # give its raw 16-bit codes (no copy); arrays() likewise, for a model with any bf16 tensor.
    values = torch.tensor([[1.5, -3.25, 1e-3], [65280.0, -0.0, 7.0]], dtype=torch.bfloat16)
    codes = values.view(torch.int16).numpy().view(np.uint16)
    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as producer, \
         modelcast.Consumer(endpoint, model_name="pytest") as consumer:
        producer.register("w", values)
        producer.register("n", np.arange(4, dtype=np.int32))
        view = consumer.wait_for_version(producer.publish(1).version, WAIT_S)
        assert view is not None
        for refused in (lambda: view.array("w"), lambda: view.arrays()):
            with pytest.raises(modelcast.InvalidArgumentError, match=r"'w' is bf16.*bf16='f32'"):
                refused()
        with pytest.raises(modelcast.InvalidArgumentError, match="bf16 must be None, 'bits' or 'f32', not 'f16'"):
            view.array("w", bf16="f16")
        copy = view.array("w", bf16="f32")
        assert copy.dtype == np.float32 and copy.shape == (2, 3) and not copy.flags.writeable
        np.testing.assert_array_equal(copy, values.float().numpy())
        bits = view.array("w", bf16="bits")
        assert bits.dtype == np.uint16 and not bits.flags.writeable
        np.testing.assert_array_equal(bits, codes)
        assert bits.__array_interface__["data"][0] == view.data_ptr("w")  # the version's bytes, no copy
        every = view.arrays(bf16="f32")
        np.testing.assert_array_equal(every["w"], values.float().numpy())
        np.testing.assert_array_equal(every["n"], np.arange(4, dtype=np.int32))


def test_a_consumer_insists_on_a_delivery_path(endpoint):
    # path= reaches the consumer's join (as ConsumerOptions::path), and stats() names the path used.
    with pytest.raises(modelcast.InvalidArgumentError, match="'teleport'"):
        modelcast.Consumer(endpoint, model_name="pytest", path="teleport")
    with modelcast.Producer(control_endpoint=endpoint, model_name="pytest") as producer, \
         modelcast.Consumer(endpoint, model_name="pytest", path="host_ucx") as consumer:
        producer.register("w", np.arange(10, dtype=np.float64))
        assert consumer.wait_for_version(producer.publish(1).version, WAIT_S) is not None
        assert consumer.stats().path == "host_ucx"
        assert "path='host_ucx'" in repr(consumer.stats())
        # A path these memories cannot use is refused at the join, saying why; nothing is installed.
        with modelcast.Consumer(endpoint, model_name="pytest", path="cuda_ipc") as refused:
            deadline = time.monotonic() + WAIT_S
            while "cuda_ipc" not in refused.stats().last_error:
                assert time.monotonic() < deadline, "the join was not refused"
                time.sleep(0.01)
            assert refused.acquire() is None
