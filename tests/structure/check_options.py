#!/usr/bin/env python3
"""Options are parsed once: a deck key that takes one of a few words is a Choice<E> (core/choice.hpp),
checked when the deck is read, and the code compares enums. So no file of src/ or modules/ compares a
deck member with a string literal (`cfg.train.precision == "bf16"`, `l.recompute != "none"`), and
none keeps the old word-holders (`.is("auto")`, parse_precision, parse_recompute). The deck's members
are the names bound in src/train/run_config.cpp, which reads and checks the deck and is the one file
allowed to (data.tokenizer's "auto" stands beside the tokenizers' registry names there). Exit 1 naming
each violation."""
import os
import re
import sys

ROOMS = ["src", "modules"]
DECK = "src/train/run_config.cpp"  # where the deck is read and checked
BOUND = re.compile(r'\{"[a-z_]+\.[a-z_0-9]+",\s*&[\w.]*?(\w+)\s*,')
OLD_WORDS = re.compile(r"\.is\(\"|\bparse_precision\s*\(|\bparse_recompute\s*\(|\bBoolOrWord\b")


def deck_members(root):
    with open(os.path.join(root, DECK), encoding="utf-8") as fh:
        return sorted(set(BOUND.findall(fh.read())))


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
    members = deck_members(root)
    if len(members) < 40:
        print(f"check_options: found only {len(members)} deck members in {DECK}; has the binding changed?")
        return 1
    compare = re.compile(r"[.>](%s)\s*[!=]=\s*\"" % "|".join(members))
    problems = []
    for room in ROOMS:
        for dirpath, dirs, names in os.walk(os.path.join(root, room)):
            dirs.sort()
            for n in sorted(names):
                path = os.path.join(dirpath, n)
                rel = os.path.relpath(path, root)
                if not n.endswith((".cpp", ".hpp")) or rel == DECK:
                    continue
                with open(path, encoding="utf-8") as fh:
                    for i, line in enumerate(fh, 1):
                        code = line.partition("//")[0]
                        m = compare.search(code)
                        if m:
                            problems.append(f"{rel}:{i}: compares the option `{m.group(1)}` with a string "
                                            "(make it a Choice<E> and compare the enum)")
                        if OLD_WORDS.search(code):
                            problems.append(f"{rel}:{i}: parses an option's words again (a Choice<E> holds them)")
    for p in problems:
        print(p)
    print(f"check_options: {len(problems)} violation(s)" if problems else f"check_options: ok ({len(members)} deck members)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
