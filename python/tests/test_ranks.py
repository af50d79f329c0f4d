"""A model trained on two ranks with torch.distributed (gloo), each rank a process with its own
Producer holding its row shard of the weight and a copy of the bias; consumers told rank 0's
endpoint assemble the whole weight, or a column half of it, checked against the model both
ranks were cut from (rank_peer.values)."""

import os
import subprocess
import sys
import tempfile

import torch

import modelcast
import rank_peer
from conftest import HERE, WAIT_S


def wait_for_step(consumer, step):
    view = consumer.wait_for_version(1, WAIT_S)
    while view is not None and view.step < step:
        view = consumer.wait_for_version(view.version + 1, WAIT_S)
    return view


def test_two_torch_distributed_ranks_publish_one_model():
    world = 2
    directory = tempfile.mkdtemp(prefix="mcranks-", dir="/tmp")
    env = dict(os.environ, PYTHONUNBUFFERED="1", UCX_NET_DEVICES="lo")
    ranks = [subprocess.Popen([sys.executable, os.path.join(HERE, "rank_peer.py"), str(r), str(world),
                               os.path.join(directory, "init")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    try:
        words = ranks[0].stdout.readline().split()
        assert words[:1] == ["endpoint"], words
        whole = modelcast.Consumer(words[1], model_name="ranks")
        columns = modelcast.Consumer(words[1], model_name="ranks", wants={"w": ("shard", 1, 1, 2), "b": None})
        for step in (1, 2):
            for r in ranks:
                r.stdin.write(f"publish {step}\n")
                r.stdin.flush()
                assert r.stdout.readline().split() == ["published", str(step)]
            w, b = rank_peer.values(step)
            view = wait_for_step(whole, step)
            assert view is not None and view.step == step, whole.stats().last_error
            assert torch.equal(view.tensor("w"), w)
            assert torch.equal(view.tensor("b"), b)
            assert view.box("w") is None
            half = wait_for_step(columns, step)
            assert half is not None and half.step == step, columns.stats().last_error
            assert half.names() == ["w"]
            assert torch.equal(half.tensor("w"), torch.chunk(w, 2, 1)[1])
            assert half.box("w") == ((0, 6), (64, 12))
        whole.close()
        columns.close()
    finally:
        for r in ranks:
            if r.poll() is None:
                r.stdin.close()
        for r in ranks:
            r.wait(timeout=WAIT_S)
