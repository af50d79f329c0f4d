"""The inference server of the PyTorch example: serves Fashion-MNIST predictions from the newest
version the trainer published, and reports the test accuracy of each version it serves.

    python3 server.py [--endpoint ipc://$XDG_RUNTIME_DIR/modelcast-fashion.sock]

The weights are used where modelcast received them: the view's torch tensors (no copy) go
straight into the network's forward pass, and each version stays valid while it is served even
if newer ones arrive meanwhile. Ends after the version marked "last", or after --max-seconds.
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402
import modelcast  # noqa: E402


# A plaintext ipc:// endpoint must lie in a directory only this user can write (modelcast refuses
# /tmp): the user's runtime directory (0700), else the home directory.
DEFAULT_ENDPOINT = "ipc://" + os.path.join(os.environ.get("XDG_RUNTIME_DIR") or os.path.expanduser("~"),
                                           "modelcast-fashion.sock")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", default=DEFAULT_ENDPOINT, help="producer endpoint (default %(default)s)")
    p.add_argument("--max-seconds", type=float, default=600.0, help="give up after this long (default %(default)s)")
    args = p.parse_args()
    torch.set_num_threads(1)

    images, labels = (torch.from_numpy(a) for a in fashion_mnist.load("t10k"))
    # Only versions with the network's exact layout are installed; others are reported and skipped.
    layout = [(name, t.dtype, tuple(t.shape)) for name, t in fashion_mnist.make_model().state_dict().items()]
    consumer = modelcast.Consumer(args.endpoint, model_name="fashion-mnist", expected_layout=layout,
                                  on_error=lambda e: print(f"server: rejected a version: {e}", flush=True))
    deadline = time.monotonic() + args.max_seconds
    served = 0
    while True:
        view = consumer.wait_for_version(served + 1, max(0.0, deadline - time.monotonic()))
        if view is None:
            print(f"server: no new version within --max-seconds ({args.max_seconds} s)", flush=True)
            return 1
        with torch.no_grad():
            predictions = fashion_mnist.forward(view.state_dict(), images).argmax(dim=1)
        accuracy = (predictions == labels).float().mean().item()
        print(f"server: version {view.version} step {view.step} train loss {view.metadata['loss']} "
              f"accuracy {accuracy:.4f} (arrived {view.update_latency_s * 1e3:.1f} ms after publish)", flush=True)
        served = view.version
        if view.metadata.get("last") == "1":
            break
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
