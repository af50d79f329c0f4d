"""Arrays and tensors taken from a view stay valid exactly as long as they are used: after the
view object, the Consumer and the Producer are gone, and while newer versions arrive."""

import gc

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
