"""The publish() stall from Python against the number of tensors a model has.

A model of the same size (--model-mib) is split into 1 to --most tensors (NumPy arrays or torch
tensors on the CPU), registered with one Producer, and published --reps times with one element
changed per version. Per row: the median wall time of the Python call, the median stall the
library measured inside it (PublishTicket.stall_s), and the ceiling in the same run: one
memcpy of the whole model (NumPy copyto between two buffers of its size). What the Python call
adds on top of the library's stall is the binding's per-tensor work.

Run through bench/run.sh pypublish [--json] (it builds the binding in build-bench/); the JSON
has one object per row with the fields printed.
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

import modelcast


def median_ms(samples):
    return 1e3 * statistics.median(samples)


def memcpy_ms(nbytes, reps):
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch both buffers before timing
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - start)
    return median_ms(times)


def make_tensors(kind, count, nbytes):
    elements = max(1, nbytes // count // 4)
    if kind == "torch":
        import torch
        return [torch.full((elements,), float(i)) for i in range(count)], elements * 4 * count
    return [np.full(elements, i, dtype=np.float32) for i in range(count)], elements * 4 * count


def run_row(kind, count, model_bytes, reps):
    tensors, nbytes = make_tensors(kind, count, model_bytes)
    with modelcast.Producer(control_endpoint="tcp://127.0.0.1:0", model_name="pypublish") as producer:
        for i, t in enumerate(tensors):
            producer.register(f"layers.{i // 64}.experts.{i % 64}.weight", t)
        producer.publish(0)  # the first publish prepares the slots
        calls, stalls = [], []
        for step in range(1, reps + 1):
            tensors[step % count][0] = step
            start = time.perf_counter()
            ticket = producer.publish(step)
            calls.append(time.perf_counter() - start)
            stalls.append(ticket.stall_s)
    call, stall, ceiling = median_ms(calls), median_ms(stalls), memcpy_ms(nbytes, reps)
    return {
        "kind": kind,
        "tensors": count,
        "model_bytes": nbytes,
        "publish_call_ms": call,
        "library_stall_ms": stall,
        "binding_ms": call - stall,
        "memcpy_ms": ceiling,
        "publish_call_vs_memcpy": call / ceiling if ceiling > 0 else float("nan"),
        "reps": reps,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-mib", type=float, default=64)
    parser.add_argument("--counts", default="1,1000,20000", help="tensor counts, comma-separated")
    parser.add_argument("--kinds", default="numpy,torch")
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for kind in args.kinds.split(","):
        if kind == "torch":
            try:
                import torch  # noqa: F401
            except ImportError:
                print("pypublish: torch is not installed; its rows are left out", file=sys.stderr)
                continue
        for count in (int(c) for c in args.counts.split(",")):
            rows.append(run_row(kind, count, int(args.model_mib * 2**20), args.reps))
            print(f"pypublish: {kind} x {count} done", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'kind':6} {'tensors':>8} {'MiB':>6} {'call ms':>9} {'stall ms':>9} {'binding ms':>11} "
          f"{'memcpy ms':>10} {'call/memcpy':>12}")
    for r in rows:
        print(f"{r['kind']:6} {r['tensors']:>8} {r['model_bytes'] / 2**20:>6.1f} {r['publish_call_ms']:>9.2f} "
              f"{r['library_stall_ms']:>9.2f} {r['binding_ms']:>11.2f} {r['memcpy_ms']:>10.2f} "
              f"{r['publish_call_vs_memcpy']:>12.2f}")


if __name__ == "__main__":
    main()
