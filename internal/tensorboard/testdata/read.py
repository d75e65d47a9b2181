"""Reads a TensorBoard log directory with TensorBoard's own reader and prints it as JSON.

    python read.py DIR

prints {"scalars": {tag: [[step, value], ...]}, "file_versions": [...]}: the scalars
as EventAccumulator loads them (every event file of DIR, in TensorBoard's order), and
the file_version of each file's first event as EventFileLoader reads it.
"""

import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator, event_file_loader


def main(logdir):
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    scalars = {
        tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()[event_accumulator.SCALARS]
    }
    versions = []
    for name in sorted(os.listdir(logdir)):
        if "tfevents" in name:
            first = next(iter(event_file_loader.EventFileLoader(os.path.join(logdir, name)).Load()), None)
            versions.append(first.file_version if first is not None else "")
    json.dump({"scalars": scalars, "file_versions": versions}, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1])
