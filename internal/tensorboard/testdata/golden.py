"""Writes golden.tfevents with TensorBoard's own protobuf classes and record writer.

The Go test (TestGolden) lays out the same scalars with Events and Encode and compares
the bytes. Run from this directory with a Python that has tensorboard installed:

    python golden.py
"""

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

WALL = 1700000000.5
# (step, [(tag, value)]): steps in order, tags in order within a step, as Events lays
# them out. 0.0 checks that a zero simple_value is still written (it is in a oneof).
STEPS = [
    (0, [("update/kl", 0.0)]),
    (3, [("advantage/adv_std", 1.25), ("advantage/reward_mean", 0.5)]),
    (7, [("update/kl", -0.0025)]),
    (1 << 40, [("score/reward_mean", 0.75)]),
]


def main():
    with open("golden.tfevents", "wb") as f:
        w = RecordWriter(f)
        w.write(event_pb2.Event(wall_time=WALL, file_version="brain.Event:2").SerializeToString())
        for step, values in STEPS:
            summary = summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in values])
            w.write(event_pb2.Event(wall_time=WALL, step=step, summary=summary).SerializeToString())


if __name__ == "__main__":
    main()
