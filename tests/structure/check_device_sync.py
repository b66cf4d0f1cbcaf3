#!/usr/bin/env python3
"""Whole-device waits only through runtime/device_sync: no raw `Kokkos::fence()` and no `deep_copy`
without an execution space (Kokkos fences the whole device around it) in any file of src/ or
modules/. An execution-space instance's fence (`ExecSpace().fence()`) orders only that space's work
and is allowed; a line that must wait anyway (set-up, between steps) says why with `device_sync-ok:`
in a comment. The trainer counts every fence a step makes at run time (tensor/device_counters);
this check also sees the lines no test runs on the host (CUDA-only paths, rare branches). Exit 1
naming each violation."""
import os
import re
import sys

ROOMS = ["src", "modules"]
ALLOWED = {"src/runtime/device_sync.cpp"}  # the one place that fences the whole device
RAW_FENCE = re.compile(r"\bKokkos::fence\s*\(")
SPACELESS_COPY = re.compile(r"\bdeep_copy\s*\((?!\s*(ExecSpace|Kokkos::DefaultHostExecutionSpace|exec|space)\b)")


def files(root):
    for room in ROOMS:
        for dirpath, dirs, names in os.walk(os.path.join(root, room)):
            dirs.sort()
            for n in sorted(names):
                path = os.path.join(dirpath, n)
                if n.endswith((".cpp", ".hpp")) and os.path.relpath(path, root) not in ALLOWED:
                    yield path


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
                    problems.append(f"{os.path.relpath(path, root)}:{n}: Kokkos::fence() (use "
                                    "device_sync, or an execution space's fence)")
                if SPACELESS_COPY.search(code):
                    problems.append(f"{os.path.relpath(path, root)}:{n}: deep_copy without an execution space (a "
                                    "whole-device wait; say why with device_sync-ok: where it is meant)")
    for p in problems:
        print(p)
    print(f"check_device_sync: {len(problems)} violation(s)" if problems else "check_device_sync: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
