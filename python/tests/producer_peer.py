"""A producer in its own Python process, for the cross-process tests.

Usage: producer_peer.py ENDPOINT. Registers model_values' tensors once, prints "ready", then for
each stdin line "publish STEP" writes the next version's values into the same tensors in place,
publishes, and prints "published VERSION". "quit" (or end of input) closes it.
"""

import sys

import model_values
import modelcast


def main():
    tensors = model_values.make_tensors()
    producer = modelcast.Producer(control_endpoint=sys.argv[1], model_name="pytest",
                                  transfer_chunk_bytes=64 * 1024)
    producer.register_all(tensors)
    producer.prepare()
    print("ready", flush=True)
    version = 0
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["quit"]:
            break
        version += 1
        model_values.fill(tensors, version)
        ticket = producer.publish(int(words[1]), {"filled": version})
        print("published", ticket.version, flush=True)
    producer.close()


if __name__ == "__main__":
    main()
