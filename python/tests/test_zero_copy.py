"""Zero copy on both sides: the consumer's arrays and tensors are the view's own bytes, and the
producer snapshots the registered tensors' own memory (no copy taken at registration)."""

import numpy as np
import pytest
import torch

from conftest import LocalPair


@pytest.fixture
def pair(endpoint):
    p = LocalPair(endpoint, {"w": torch.arange(24, dtype=torch.float32).reshape(4, 6),
                             "b": np.arange(7, dtype=np.int64)})
    yield p
    p.close()


def address(array):
    return array.__array_interface__["data"][0]


def test_numpy_arrays_share_the_views_memory(pair):
    view = pair.publish()
    for name in ("w", "b"):
        array = view.array(name)
        assert address(array) == view.data_ptr(name)
        assert address(view.arrays()[name]) == view.data_ptr(name)
        assert array.base is view  # the base object that keeps the version alive
        assert not array.flags.writeable
        assert not array.flags.owndata
    with pytest.raises(ValueError):
        view.array("w")[0, 0] = 1.0  # read-only: other readers share these bytes


def test_torch_tensors_share_the_views_memory(pair):
    view = pair.publish()
    for name in ("w", "b"):
        assert view.tensor(name).data_ptr() == view.data_ptr(name)
        assert view.state_dict()[name].data_ptr() == view.data_ptr(name)
    # Two views of the same version are the same bytes; the consumer copied nothing per reader.
    assert pair.consumer.acquire().data_ptr("w") == view.data_ptr("w")


def test_producer_publishes_the_registered_tensors_own_memory(pair):
    first = pair.publish(1)
    np.testing.assert_array_equal(first.array("w"), np.arange(24, dtype=np.float32).reshape(4, 6))
    # Mutate the registered objects in place, as an optimizer step does, and publish again.
    pair.tensors["w"].mul_(-2.0)
    pair.tensors["b"][3] = 99
    second = pair.publish(2)
    np.testing.assert_array_equal(second.array("w"), -2.0 * np.arange(24, dtype=np.float32).reshape(4, 6))
    assert second.array("b")[3] == 99
    np.testing.assert_array_equal(first.array("w"), np.arange(24, dtype=np.float32).reshape(4, 6))
    stats = pair.producer.stats()
    assert stats.versions_published == 2 and stats.latest_version == second.version


def test_parameters_updated_by_an_optimizer_are_published(endpoint):
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    p = LocalPair(endpoint, dict(layer.named_parameters()))
    try:
        layer(torch.ones(1, 3)).sum().backward()
        optimizer.step()  # updates the parameters' storage in place
        view = p.publish(1)
        for name, param in layer.named_parameters():
            torch.testing.assert_close(view.tensor(name), param.detach(), rtol=0, atol=0)
    finally:
        p.close()


def test_dlpack_refuses_a_copy_or_another_device_rather_than_alias_the_shared_version(pair):
    # The protocol's keywords were dropped: copy=True and dl_device=(2, 0) got a capsule over the
    # version's own bytes, and a mistyped keyword passed in silence.
    view = pair.publish()
    exported = view.dlpack("w")
    for keywords in (dict(copy=True), dict(dl_device=(2, 0))):
        with pytest.raises(BufferError, match="__dlpack__"):
            exported.__dlpack__(**keywords)
    with pytest.raises(TypeError, match="'bogus'"):
        exported.__dlpack__(bogus=1)
    with pytest.raises(TypeError, match="copy=.*takes True, False or None"):
        exported.__dlpack__(copy="yes")
    # What the view can honour: no copy, its own device, an unversioned capsule.
    exported.__dlpack__(dl_device=[1, 0])  # a pair as a list
    capsule = exported.__dlpack__(stream=None, copy=False, dl_device=(1, 0), max_version=(1, 0))
    assert torch.from_dlpack(capsule).data_ptr() == view.data_ptr("w")


def test_a_received_bool_tensor_registered_again_stays_bool(endpoint):
    # A consumer relaying what it received registers the view's tensors: DLPack (before 0.8)
    # has no bool, so a bool tensor went out as u8, and its consumers saw another layout.
    first = LocalPair(endpoint, {"mask": np.array([True, False, True])})
    try:
        view = first.publish()
        relay = LocalPair(endpoint.replace("producer.sock", "relay.sock"), {"mask": view.dlpack("mask")})
        try:
            relayed = relay.publish()
            assert relayed.spec("mask").dtype == "bool"
            assert relayed.array("mask").tolist() == [True, False, True]
        finally:
            relay.close()
    finally:
        first.close()
