"""The trainer of the PyTorch example: trains a small network on Fashion-MNIST and publishes its
weights with modelcast when the online scheduler says a publish pays off.

    python3 trainer.py [--steps 3000] [--endpoint ipc://$XDG_RUNTIME_DIR/modelcast-fashion.sock]

The model's parameters are registered once (their memory, no copy); publish() snapshots them as
they are after the optimizer step. The scheduler sees the training loss every --log-every steps
and weighs the stall of a publish against serving a staler model. Inference starts at
--warmup-step, which is always published; the last step is published too, marked "last", so that
the example's server knows when to end.
"""

import argparse
import os
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402
import modelcast  # noqa: E402
from modelcast import predictor  # noqa: E402


# A plaintext ipc:// endpoint must lie in a directory only this user can write (modelcast refuses
# /tmp): the user's runtime directory (0700), else the home directory.
DEFAULT_ENDPOINT = "ipc://" + os.path.join(os.environ.get("XDG_RUNTIME_DIR") or os.path.expanduser("~"),
                                           "modelcast-fashion.sock")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", default=DEFAULT_ENDPOINT, help="control endpoint (default %(default)s)")
    p.add_argument("--steps", type=int, default=3000, help="training steps (default %(default)s)")
    p.add_argument("--log-every", type=int, default=20, help="steps between logged losses (default %(default)s)")
    p.add_argument("--warmup-step", type=int, default=None,
                   help="step from which inference is served (default: a fifth of the steps)")
    p.add_argument("--batch-size", type=int, default=64, help="(default %(default)s)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default %(default)s)")
    p.add_argument("--consumers", type=int, default=1, help="servers to wait for before training (default %(default)s)")
    p.add_argument("--wait", type=float, default=30.0, help="seconds to wait for them and for deliveries (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    for name in ("steps", "log_every", "batch_size", "consumers"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not args.wait > 0 or not args.lr > 0:
        p.error("--wait and --lr must be positive")
    if args.steps < 2 * args.log_every:
        p.error("--steps must cover at least two logged steps")
    if args.warmup_step is None:
        args.warmup_step = max(args.log_every, args.steps // 5 // args.log_every * args.log_every)
    if args.warmup_step % args.log_every or not 0 < args.warmup_step < args.steps:
        p.error("--warmup-step must be a logged step (a multiple of --log-every) before --steps")
    return args


class Deliveries:
    """Latest delivery latency, and a wait for a version to reach every consumer (on_delivery runs
    on the producer's service thread)."""

    def __init__(self):
        self._cv = threading.Condition()
        self._count = {}
        self.latency_s = None

    def __call__(self, delivery):
        with self._cv:
            self._count[delivery.version] = self._count.get(delivery.version, 0) + 1
            self.latency_s = delivery.since_publish_s
            self._cv.notify_all()

    def wait(self, version, consumers, timeout):
        with self._cv:
            return self._cv.wait_for(lambda: self._count.get(version, 0) >= consumers, timeout)


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # a small model: one core is plenty, and the server needs one
    images, labels = (torch.from_numpy(a) for a in fashion_mnist.load("train"))
    model = fashion_mnist.make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    deliveries = Deliveries()
    producer = modelcast.Producer(control_endpoint=args.endpoint, model_name="fashion-mnist", on_delivery=deliveries)
    producer.register_all(dict(model.named_parameters()))
    producer.prepare()
    if args.consumers and not producer.wait_for_consumers(args.consumers, args.wait):
        print(f"trainer: fewer than {args.consumers} consumers joined in {args.wait} s; training anyway", flush=True)

    # Stall and delivery start as guesses and are replaced by measurements after each publish.
    scheduler = predictor.OnlineScheduler(predictor.online_options(
        total_steps=args.steps, warmup_step=args.warmup_step, stall_s=0.001, delivery_s=0.01, request_rate=100.0))

    def publish(step, loss, last):
        ticket = producer.publish(step, {"loss": f"{loss:.4f}", "last": int(last)})
        print(f"trainer: step {step} loss {loss:.4f} -> version {ticket.version} (stall {ticket.stall_s * 1e3:.2f} ms)",
              flush=True)
        if deliveries.latency_s is not None:
            scheduler.set_costs(ticket.stall_s, max(0.0, deliveries.latency_s - ticket.stall_s))
        return ticket

    start = time.monotonic()
    window, ticket, published_step = [], None, None
    for step in range(1, args.steps + 1):
        batch = torch.randint(0, images.shape[0], (args.batch_size,))
        loss = torch.nn.functional.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        window.append(loss.item())
        if step % args.log_every:
            continue
        mean = sum(window) / len(window)
        window.clear()
        scheduler.observe(step, mean, time.monotonic() - start)
        decided = scheduler.should_publish(step)
        if step == args.warmup_step or decided or step == args.steps:
            ticket = publish(step, mean, last=step == args.steps)
            published_step = step
    assert published_step == args.steps

    if args.consumers and not deliveries.wait(ticket.version, args.consumers, args.wait):
        print(f"trainer: the last version did not reach {args.consumers} consumers in {args.wait} s", flush=True)
    stats = producer.stats()
    print(f"trainer: {stats.versions_published} versions published (scheduler chose steps "
          f"{list(scheduler.published_steps)}; {scheduler.stats.fits} forecast fits), "
          f"{stats.deliveries} deliveries, {time.monotonic() - start:.1f} s", flush=True)
    producer.close()


if __name__ == "__main__":
    main()
