#!/usr/bin/env python3
"""The code map (src/README.md) covers every room and names only rooms that exist.

A room is a folder of src/ or modules/, at any depth, that holds source files. The code map is the
section of src/README.md under the heading "## Code map"; it names a room with a `###` heading that
holds the room's path from the repository root, e.g. "### `src/app/`" or "### `modules/comm/`".
Every source file of a room is named in its section, in backquotes, by its name (`trainer.cpp`), its
stem (`trainer`, for the pair) or its stem with braces (`trainer.{hpp,cpp}`); every room's section
states its invariants (a sentence starting "Invariant").
Fails (exit 1, one line per problem) when a room has no such heading, when a room has two, when a
file is not named in its room's section, and when src/README.md mentions anywhere a folder `src/...`
or `modules/...` that does not exist.
Prints "check_code_map: ok" otherwise. Usage: check_code_map.py [ROOT] (default: this checkout)."""
import os
import re
import sys

TOPS = ("src", "modules")
SOURCE = (".cpp", ".hpp", ".h", ".cc", ".cu", ".cuh", ".c", ".py")
MAP_HEADING = re.compile(r"^##\s+Code map\s*$")
SECTION = re.compile(r"^##\s")
ROOM_HEADING = re.compile(r"^###\s")
# A folder path from the root: src/ or modules/ and one or more folder names, each ending in "/"
# (in "src/train/trainer.hpp" the folder is "src/train/"). Not preceded by a path character, so
# "tests/src/x/" is not taken for "src/x/".
FOLDER = re.compile(r"(?<![\w./-])((?:%s)/(?:[\w.-]+/)+)" % "|".join(TOPS))


def rooms(root):
    """Folders under src/ and modules/ holding source files, as "src/app/"; files at the top."""
    found, loose = set(), []
    for top in TOPS:
        for dirpath, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if not any(f.endswith(SOURCE) for f in files):
                continue
            rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
            if rel == top:
                loose += [f"{top}/{f}" for f in sorted(files) if f.endswith(SOURCE)]
            else:
                found.add(rel + "/")
    return found, loose


CODE = re.compile(r"`([^`]+)`")


def named_files(text):
    """The file names and stems a section names in backquotes: `a.{hpp,cpp}` names a.hpp and a.cpp."""
    names = set()
    for token in CODE.findall(text):
        for word in re.split(r"[\s():]+", token):
            word = word.rstrip(",;.")
            m = re.fullmatch(r"([\w-]+)\.\{([\w,]+)\}", word)
            if m:
                names |= {f"{m.group(1)}.{e}" for e in m.group(2).split(",")}
            elif re.fullmatch(r"[\w.-]+", word):
                names.add(word)
    return names


def unnamed(root, room, section):
    """The source files of room that its section does not name."""
    names = named_files(section)
    folder = os.path.join(root, room)
    files = sorted(f for f in os.listdir(folder) if f.endswith(SOURCE) and os.path.isfile(os.path.join(folder, f)))
    return [f for f in files if f not in names and os.path.splitext(f)[0] not in names]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
    readme = os.path.join(root, "src", "README.md")
    problems = []
    try:
        with open(readme, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as e:
        print(f"src/README.md: cannot read the code map ({e.strerror})")
        return 1

    # The rooms the code map's headings name.
    named, in_map, seen_map = {}, False, False
    sections, current = {}, None  # each room's section text
    for n, line in enumerate(lines, 1):
        if MAP_HEADING.match(line):
            in_map = seen_map = True
            continue
        if SECTION.match(line):
            in_map, current = False, None
        elif in_map and ROOM_HEADING.match(line):
            current = None
            for path in FOLDER.findall(line):
                named.setdefault(path, []).append(n)
                current = path
                sections.setdefault(path, "")
        elif current:
            sections[current] += line + "\n"
    if not seen_map:
        problems.append('src/README.md: no "## Code map" section')

    present, loose = rooms(root)
    for f in loose:
        problems.append(f"{f}: a source file outside any room of {f.split('/')[0]}/")
    for room in sorted(present - set(named)):
        problems.append(f"{room}: a room with no heading in src/README.md's code map")
    for room, at in sorted(named.items()):
        if len(at) > 1:
            problems.append(f"src/README.md:{at[1]}: {room} has a second heading (first at line {at[0]})")

    for room in sorted(present & set(named)):
        for f in unnamed(root, room, sections.get(room, "")):
            problems.append(f"{room}{f}: not named in its room's section of src/README.md's code map")
        if "Invariant" not in sections.get(room, ""):
            problems.append(f"{room}: its section of src/README.md's code map states no invariant")

    # Every folder the page mentions, in the code map or not, must exist.
    reported = set()
    for n, line in enumerate(lines, 1):
        for path in FOLDER.findall(line):
            if path not in reported and not os.path.isdir(os.path.join(root, path)):
                reported.add(path)
                problems.append(f"src/README.md:{n}: names {path}, which does not exist")

    for p in problems:
        print(p)
    print(f"check_code_map: {len(problems)} problem(s)" if problems else "check_code_map: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
