"""One rank of a model trained sharded with torch.distributed (gloo), for test_ranks.py.

Usage: rank_peer.py RANK WORLD INIT_FILE. Joins the process group, cuts its row shard of the
weight every rank builds alike (torch.chunk along dim 0) and keeps the bias whole (replicated).
Ranks other than 0 bind a Producer on any port; every rank's endpoint goes round with
all_gather_object; rank 0 binds last, told them all, and prints "endpoint E". Each stdin line
"publish STEP" refills the tensors in place with the values of STEP, publishes, and prints
"published STEP"; "quit" (or end of input) closes.
"""

import os
import sys

import torch
import torch.distributed as dist

import modelcast


def values(step):
    """The whole model at `step`: the same on every rank and in the test."""
    g = torch.Generator().manual_seed(step)
    return torch.randn(64, 12, generator=g), torch.randn(12, generator=g)


def main():
    rank, world, init_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    w, b = values(0)
    shards = torch.chunk(w, world, 0)
    offset = sum(s.shape[0] for s in shards[:rank])
    mine = shards[rank].clone()
    common = dict(model_name="ranks", transfer_chunk_bytes=64 * 1024, rank=rank, rank_count=world,
                  run_id=os.path.basename(init_file))  # one per run of the test, the same on its ranks
    producer = None
    if rank != 0:
        producer = modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", **common)
    endpoints = [None] * world
    dist.all_gather_object(endpoints, producer.control_endpoint if producer else "")
    if rank == 0:
        producer = modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", rank_endpoints=endpoints, **common)
        print("endpoint", producer.control_endpoint, flush=True)
    producer.register("w", mine, global_shape=list(w.shape), global_offset=[offset, 0])
    producer.register("b", b)
    producer.prepare()
    for line in sys.stdin:
        words = line.split()
        if words[:1] != ["publish"]:
            break
        step = int(words[1])
        w, b_now = values(step)
        mine.copy_(torch.chunk(w, world, 0)[rank])
        b.copy_(b_now)
        producer.publish(step)
        print("published", step, flush=True)
    producer.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
