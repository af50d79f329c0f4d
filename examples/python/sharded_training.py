"""A model trained sharded with torch.distributed and served resharded, no rank ever holding all
of it in one place.

    python3 sharded_training.py [--trainers 2] [--steps 300] [--publish-every 25]

Trainers: `--trainers` processes (gloo) learn a linear map y = x A^T (256 outputs, 128 inputs)
with the output rows split between them (column parallelism: rank k holds rows k of the weight,
`torch.tensor_split` along dim 0, and computes its outputs alone). Each rank runs a modelcast Producer
with its rows registered as a piece of the whole [256, 128] weight; rank 0, told the others'
endpoints through `all_gather_object`, is the one the server is told. Every `--publish-every`
steps each rank publishes its own snapshot, with no barrier.

Server: two server ranks (threads of this process here, standing for a tensor-parallel inference
server's processes), each a Consumer keeping its half of the weight's input columns (row
parallelism: `wants={"w": ("shard", 1, k, 2)}`, the other dimension than the trainers'), the two
in one group (`group="server", group_size=2`: they switch steps together). Each computes its
partial product; their sum is the server's answer, whose loss on fresh inputs is
printed for every step served. The script exits 1 unless both server ranks reached the last step
and its loss beats the untrained (zero) weight's and, with more than one step served, the first
step's.
"""

import argparse
import os
import sys
import tempfile
import threading

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import modelcast

OUT, IN = 256, 128


def target():
    """The map the trainers learn: the same on every rank and in the server's check."""
    return torch.randn(OUT, IN, generator=torch.Generator().manual_seed(99))


def trainer(rank, world, init_file, steps, every, endpoints_out, served):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.manual_seed(rank)
    a = target()
    rows = torch.tensor_split(torch.arange(OUT), world)[rank]  # `world` pieces (torch.chunk may make fewer)
    first_row = int(rows[0])
    w = torch.zeros(len(rows), IN)  # this rank's rows of the weight, trained in place
    # One run id per launch, the same on every rank (under Slurm: f"{SLURM_JOB_ID}.{SLURM_RESTART_COUNT}"):
    # consumers never put two runs' pieces together.
    common = dict(model_name="sharded-linear", rank=rank, rank_count=world, transfer_chunk_bytes=64 * 1024,
                  run_id=os.path.basename(init_file))
    producer = None
    if rank != 0:
        producer = modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", **common)
    endpoints = [None] * world
    dist.all_gather_object(endpoints, producer.control_endpoint if producer else "")
    if rank == 0:
        producer = modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", rank_endpoints=endpoints, **common)
        endpoints_out.put(producer.control_endpoint)
    producer.register("w", w, global_shape=[OUT, IN], global_offset=[first_row, 0])
    producer.prepare()
    producer.wait_for_consumers(2, 120)  # both server ranks joined this rank: they see every step from the first
    lr = 0.02
    for step in range(1, steps + 1):
        x = torch.randn(4096, IN)
        y = x @ a[rows].T  # this rank's outputs of the target map
        grad = ((x @ w.T - y).T @ x) / x.shape[0] * 2  # of the mean squared error per output
        w -= lr * grad
        if step % every == 0:
            producer.publish(step)
    served.wait(120)  # the server holds the last step (a producer that closes stops sending)
    producer.close()
    dist.destroy_process_group()


def serve(endpoint, k, served_halves, last):
    """Server rank k: keeps columns half k of the weight and hands a copy of each step's half on,
    until the last step."""
    # One group: a step becomes visible to either server rank only once both hold it.
    consumer = modelcast.Consumer(endpoint, model_name="sharded-linear", wants={"w": ("shard", 1, k, 2)},
                                  group="server", group_size=2, consumer_name=f"server-rank-{k}")
    version, step = 0, 0
    while step < last:
        view = consumer.wait_for_version(version + 1, 120)
        if view is None:
            print(f"server rank {k}: no step after {step}: {consumer.stats().last_error}", file=sys.stderr)
            break
        version, step = view.version, view.step
        # A copy, and the view let go at once: a server that kept every view would hold all of
        # the consumer's buffers (3 by default), and no later step could be installed.
        served_halves[k][step] = (view.tensor("w").clone(), view.box("w"))  # this thread's own dict
        del view
    consumer.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--publish-every", type=int, default=25)
    args = p.parse_args()
    # 0 trainers waited two minutes for endpoints nobody sent; 0 steps between publishes divided by 0.
    for name in ("trainers", "steps", "publish_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.trainers > OUT:
        p.error(f"--trainers ({args.trainers}) must be at most {OUT}: each holds at least one of the weight's rows")
    if args.steps < args.publish_every:
        p.error(f"--steps ({args.steps}) must reach the first publish (--publish-every {args.publish_every})")
    with tempfile.TemporaryDirectory(prefix="mc-sharded-", dir="/tmp") as directory:  # the ranks' rendezvous
        return run(args, directory)


def run(args, directory):
    ctx = mp.get_context("spawn")
    endpoints, served = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=trainer, args=(r, args.trainers, os.path.join(directory, "init"), args.steps,
                                               args.publish_every, endpoints, served))
             for r in range(args.trainers)]
    for proc in procs:
        proc.start()
    endpoint = endpoints.get(timeout=120)  # rank 0's, once bound: the server is told nothing else
    last = args.steps - args.steps % args.publish_every
    halves_by_step = [{}, {}]
    servers = [threading.Thread(target=serve, args=(endpoint, k, halves_by_step, last)) for k in range(2)]
    for s in servers:
        s.start()
    for s in servers:
        s.join()
    served.set()
    for proc in procs:
        proc.join()
    a = target()
    x = torch.randn(512, IN, generator=torch.Generator().manual_seed(7))
    served = sorted(set(halves_by_step[0]) & set(halves_by_step[1]))
    losses = []
    for step in served:
        halves = [halves_by_step[k][step][0] for k in range(2)]
        cols = torch.chunk(torch.arange(IN), 2)
        y = sum(x[:, cols[k]] @ halves[k].T for k in range(2))  # row-parallel: partial sums
        loss = float(((y - x @ a.T) ** 2).mean())
        offset, whole = halves_by_step[0][step][1]
        losses.append(loss)
        print(f"step {step:4d}: served from {args.trainers} trainer ranks to 2 server ranks "
              f"(each [{halves[0].shape[0]}, {halves[0].shape[1]}] of {list(whole)}), loss {loss:.4f}")
    if not served or served[-1] != last:
        print(f"the server did not reach the last step ({last}); it served {served}", file=sys.stderr)
        return 1
    # The trainers start from zero weights: what the server would answer before any step.
    untrained = float(((x @ a.T) ** 2).mean())
    if not (losses[-1] < untrained and (len(losses) == 1 or losses[-1] < losses[0])):
        print(f"the server's loss did not fall: {losses[-1]:.4f} at step {last}, {losses[0]:.4f} at the first "
              f"step served, {untrained:.4f} untrained", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
