"""Shared fixtures: short ipc:// endpoints, the expected tensor values, and a producer running in a
separate Python process driven line by line over its stdin/stdout."""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import model_values  # noqa: E402  (the values both processes compute)

WAIT_S = 20.0  # bound on every wait for a version or a reply; a passing run takes milliseconds


@pytest.fixture
def endpoint():
    """A fresh ipc:// endpoint (short path: ipc paths are limited to ~100 bytes)."""
    directory = tempfile.mkdtemp(prefix="mcpy-", dir="/tmp")
    yield f"ipc://{directory}/producer.sock"
    shutil.rmtree(directory, ignore_errors=True)


class ProducerProcess:
    """producer_peer.py in its own interpreter; publish() asks it for a version and returns the
    version number it reports, so every wait is on a reply, never a sleep."""

    def __init__(self, endpoint, env=None):
        env = dict(env or os.environ, PYTHONUNBUFFERED="1")
        env.setdefault("UCX_NET_DEVICES", "lo")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "producer_peer.py"), endpoint],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self._reply() == "ready"

    def _reply(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"producer process ended (exit code {self.proc.wait(WAIT_S)})")
        return line.strip()

    def publish(self, step):
        self.proc.stdin.write(f"publish {step}\n")
        self.proc.stdin.flush()
        word, version = self._reply().split()
        assert word == "published"
        return int(version)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.stdin.close()
            assert self.proc.wait(WAIT_S) == 0


@pytest.fixture(params=["shm", "tcp"])
def producer_process(request, endpoint, monkeypatch):
    """The producer process, with UCX on its default transports (shared memory on one host) or
    forced to TCP over loopback; the consumer in this process gets the same setting."""
    if request.param == "tcp":
        monkeypatch.setenv("UCX_TLS", "tcp,self")  # read by UCX when each Consumer/Producer starts
    p = ProducerProcess(endpoint, os.environ)
    yield p
    p.close()


class LocalPair:
    """A Producer and a Consumer in this process, over `endpoint`, with `tensors` registered."""

    def __init__(self, endpoint, tensors, **consumer_options):
        import modelcast
        self.tensors = tensors
        self.producer = modelcast.Producer(control_endpoint=endpoint, model_name="pytest")
        self.producer.register_all(tensors)
        self.consumer = modelcast.Consumer(endpoint, model_name="pytest", **consumer_options)

    def publish(self, step=0):
        """Publishes and returns the version once the consumer has it installed."""
        ticket = self.producer.publish(step)
        view = self.consumer.wait_for_version(ticket.version, WAIT_S)
        assert view is not None, f"version {ticket.version} did not arrive within {WAIT_S} s"
        assert view.version == ticket.version
        return view

    def close(self):
        self.consumer.close()
        self.producer.close()
