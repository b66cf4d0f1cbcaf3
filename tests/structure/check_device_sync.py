#!/usr/bin/env python3
"""The step's code waits for the whole device only through runtime/device_sync (README, GPU build):
no raw `Kokkos::fence()` and no `deep_copy` without an execution space in the rooms a training step
runs (kernels, model stages, pipeline, parallel machinery, the trainer's step, the optimizer). An
execution-space instance's fence (`ExecSpace().fence()`) orders only that space's work and is
allowed; a line that must wait anyway says why with `device_sync-ok:` in a comment. Exit 1 naming
each violation."""
import os
import re
import sys

STEP = ["src/tensor", "src/pipeline", "src/parallel", "src/model/stage.cpp", "src/model/stage.hpp",
        "src/model/stage_ends.cpp", "src/model/linear.cpp", "src/model/linear.hpp", "src/model/tp_group.hpp",
        "src/train/trainer.cpp", "modules/optim"]
RAW_FENCE = re.compile(r"\bKokkos::fence\s*\(")
SPACELESS_COPY = re.compile(r"\bdeep_copy\s*\((?!\s*(ExecSpace|Kokkos::DefaultHostExecutionSpace|exec|space)\b)")


def files(root):
    for entry in STEP:
        path = os.path.join(root, entry)
        if os.path.isfile(path):
            yield path
        else:
            for dirpath, _, names in os.walk(path):
                for n in sorted(names):
                    if n.endswith((".cpp", ".hpp")):
                        yield os.path.join(dirpath, n)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
    problems = []
    for path in files(root):
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                code, _, comment = line.partition("//")
                if "device_sync-ok:" in comment:
                    continue
                if RAW_FENCE.search(code):
                    problems.append(f"{os.path.relpath(path, root)}:{n}: Kokkos::fence() in the step's code (use "
                                    "device_sync, or an execution space's fence)")
                if SPACELESS_COPY.search(code):
                    problems.append(f"{os.path.relpath(path, root)}:{n}: deep_copy without an execution space in the "
                                    "step's code (a whole-device wait)")
    for p in problems:
        print(p)
    print(f"check_device_sync: {len(problems)} violation(s)" if problems else "check_device_sync: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
