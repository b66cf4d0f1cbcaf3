#!/usr/bin/env python3
"""The engine's rooms and what each may include (README, Architecture): every `#include "room/..."`
in src/ and modules/ must follow the table below, so dependencies point one way and src/ never
reaches into modules/ (strategies come in through the registries). Also: no MPI call in the layers
that must not know MPI (collectives belong to the Communicator). Exit 1 naming each violation."""
import os
import re
import sys

# The rooms from the bottom up: a room may include only rooms below it, so dependencies point one
# way and the table itself is checked against the order (layer_order_problems).
ORDER = ["core", "tensor", "plugins", "data", "hdf5", "runtime", "model", "formats", "trace", "parallel",
         "pipeline", "perf", "train", "modules", "app"]
# room -> rooms it may include (besides itself)
ALLOWED = {
    "app": {"train", "pipeline", "parallel", "perf", "runtime", "trace", "formats", "model", "data", "plugins",
            "tensor", "core"},
    "modules": {"pipeline", "runtime", "model", "data", "plugins", "tensor", "core"},
    "train": {"pipeline", "parallel", "perf", "runtime", "trace", "formats", "model", "data", "plugins", "tensor",
              "core"},
    "perf": {"pipeline", "parallel", "runtime", "trace", "model", "plugins", "tensor", "core"},
    "pipeline": {"runtime", "trace", "model", "plugins", "tensor", "core"},
    "parallel": {"runtime", "trace", "formats", "hdf5", "model", "plugins", "tensor", "core"},
    "trace": {"runtime", "model", "hdf5", "plugins", "core"},
    "formats": {"model", "hdf5", "core"},
    "model": {"plugins", "tensor", "core"},
    "runtime": {"plugins", "tensor", "core"},
    "hdf5": {"core"},
    "data": {"plugins", "core"},
    "plugins": {"tensor", "core"},  # the interfaces modules/ implement, and their registry
    "tensor": {"core"},
    "core": set(),
}


def layer_order_problems():
    """Every room of the table placed in ORDER, and allowed to include only rooms below it."""
    problems = [f"room '{r}' has no place in ORDER" for r in ALLOWED if r not in ORDER]
    for room, allowed in ALLOWED.items():
        if room not in ORDER:
            continue
        above = sorted(a for a in allowed if a not in ORDER or ORDER.index(a) >= ORDER.index(room))
        problems += [f"the table lets {room}/ include {a}/, which is not below it in ORDER" for a in above]
    return problems


NO_MPI = ("train", "formats", "hdf5", "model", "tensor", "data")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
MPI_CALL = re.compile(r"\bMPI_[A-Za-z0-9_]+\s*\(")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
    problems = layer_order_problems()
    for top in ("src", "modules"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".cpp", ".hpp")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                room = "modules" if top == "modules" else rel.split(os.sep)[1]
                allowed = ALLOWED.get(room)
                if allowed is None:
                    problems.append(f"{rel}: room '{room}' is not in the architecture table")
                    continue
                with open(path, encoding="utf-8") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) != room and m.group(1) not in allowed:
                            problems.append(f"{rel}:{n}: {room}/ may not include {m.group(1)}/")
                        code = line.split("//")[0]
                        if room in NO_MPI and MPI_CALL.search(code):
                            problems.append(f"{rel}:{n}: MPI call in {room}/ (use the Communicator)")
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} violation(s)" if problems else "check_layers: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
