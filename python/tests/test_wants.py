"""Consumers that keep parts of the model: each rank's view of every tensor is compared with
torch.chunk of the producer's tensor (the split tensor parallelism uses), boxes with slicing."""

import pytest
import torch

import modelcast
from conftest import WAIT_S


@pytest.mark.parametrize("dim,count", [(0, 2), (1, 2), (1, 4)])
def test_each_rank_holds_torch_chunk_of_every_tensor(endpoint, dim, count):
    torch.manual_seed(11)
    model = {"w": torch.randn(300, 130), "e": torch.randn(97, 64).to(torch.bfloat16), "b": torch.randn(130)}
    with modelcast.Producer(control_endpoint=endpoint, model_name="tp") as producer:
        for name, t in model.items():
            producer.register(name, t)
        producer.prepare()
        ranks = [modelcast.Consumer(endpoint, model_name="tp", wants={"*": ("shard", dim, k, count)})
                 for k in range(count)]
        try:
            version = producer.publish(1).version
            for k, consumer in enumerate(ranks):
                view = consumer.wait_for_version(version, WAIT_S)
                assert view is not None, consumer.stats().last_error
                for name, t in model.items():
                    got = view.tensor(name)
                    if dim >= t.dim():
                        assert view.box(name) is None
                        assert torch.equal(got, t), name
                        continue
                    want = torch.chunk(t, count, dim)[k]
                    assert got.shape == want.shape, name
                    assert torch.equal(got, want), f"rank {k}, {name}"
                    offset, whole = view.box(name)
                    assert whole == tuple(t.shape)
                    assert offset[dim] == sum(c.shape[dim] for c in torch.chunk(t, count, dim)[:k])
                assert consumer.stats().wanted_bytes == sum(
                    view.tensor(n).numel() * view.tensor(n).element_size() for n in model)
        finally:
            for consumer in ranks:
                consumer.close()


def test_boxes_and_nothing(endpoint):
    w = torch.arange(40 * 30, dtype=torch.float32).reshape(40, 30)
    with modelcast.Producer(control_endpoint=endpoint, model_name="box") as producer:
        producer.register("w", w)
        producer.register("skip", torch.zeros(1000))
        producer.prepare()
        with modelcast.Consumer(endpoint, model_name="box",
                                wants={"w": [((5, 7), (10, 20))], "*": None}) as consumer:
            view = consumer.wait_for_version(producer.publish(1).version, WAIT_S)
            assert view is not None, consumer.stats().last_error
            assert view.names() == ["w"]
            assert torch.equal(view.tensor("w"), w[5:15, 7:27])
            assert view.box("w") == ((5, 7), (40, 30))


def test_several_boxes_of_a_tensor_are_parts_picked_by_index(endpoint):
    w = torch.arange(40 * 30, dtype=torch.float32).reshape(40, 30)
    boxes = [((0, 0), (8, 30)), ((20, 10), (5, 4)), ((30, 0), (10, 2))]
    with modelcast.Producer(control_endpoint=endpoint, model_name="parts") as producer:
        producer.register("w", w)
        producer.register("b", torch.ones(7))
        producer.prepare()
        with modelcast.Consumer(endpoint, model_name="parts", wants={"w": boxes}) as consumer:
            view = consumer.wait_for_version(producer.publish(1).version, WAIT_S)
            assert view is not None, consumer.stats().last_error
            assert view.parts("w") == [(offset, (40, 30)) for offset, _ in boxes]
            assert view.parts("b") == [None]
            assert view.names() == ["w", "b"], "each name once, however many boxes"
            for part, (offset, extent) in enumerate(boxes):
                want = w[offset[0]:offset[0] + extent[0], offset[1]:offset[1] + extent[1]]
                assert torch.equal(view.tensor("w", part=part), want), part
                assert (view.array("w", part) == want.numpy()).all(), part
                assert torch.equal(torch.from_dlpack(view.dlpack("w", part=part)), want), part
                assert view.box("w", part) == (offset, (40, 30))
            assert torch.equal(view.tensor("w"), view.tensor("w", part=0))  # the first by default
            with pytest.raises(modelcast.InvalidArgumentError, match="'w' has 3 part.*no part 3"):
                view.tensor("w", part=3)


def test_bad_wants_are_refused_naming_them(endpoint):
    with pytest.raises(modelcast.InvalidArgumentError, match="'w'"):
        modelcast.Consumer(endpoint, model_name="x", wants={"w": ("shard", 0, 3, 2)})
    with pytest.raises(modelcast.InvalidArgumentError, match="'w'"):
        modelcast.Consumer(endpoint, model_name="x", wants={"w": "half"})
