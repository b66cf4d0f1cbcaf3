#!/usr/bin/env python3
"""No function in src/ or modules/ longer than LIMIT lines (issue: a newcomer reads a function on
one screen). A function is a brace block at namespace or class level whose opening is preceded by a
parameter list `)` (possibly followed by const/noexcept/override/-> type/initialisers); lambdas and
blocks inside count toward the function that holds them. Lines are counted from the line of the
signature's name to the closing brace. Exit 1 listing each function over the limit."""
import os
import re
import sys

LIMIT = 80


def strip(text):
    """The text with comments, string and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):  # 1'000 separators
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c if j < n else " " * (n - i)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


HEAD = re.compile(r"\)\s*(const|noexcept|override|final|mutable|\s|->\s*[\w:<>,\s\*&]+)*$")
NOT_FUNC = re.compile(r"\b(if|for|while|switch|catch|return)\s*\($")


def functions(text):
    """(name, first line, last line) of every function body at namespace/class level."""
    code = strip(text)
    found, stack = [], []  # stack: (kind, start line, name) per open brace
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            in_func = any(k == "func" for k, _, _ in stack)
            before = code[max(0, i - 3000):i]
            kind, name, start = "block", "", line
            if not in_func:
                # a constructor's initialiser list: look back past `: a_(x), b_{y}` to the `)`
                head = re.sub(r"\)\s*:\s*[\w:]+\s*[({][^;{}]*$", ")", before.rstrip())
                if HEAD.search(head.rstrip()):
                    depth, j = 0, head.rstrip().rfind(")")
                    while j >= 0:  # the matching `(` of the parameter list
                        depth += head[j] == ")"
                        depth -= head[j] == "("
                        if depth == 0:
                            break
                        j -= 1
                    m = re.search(r"((?:[~\w:]+<[^<>]*>::)*[~\w:]+(?:<[^<>]*>)?|operator\s*\S+)\s*$", head[:j])
                    if m and not NOT_FUNC.search(head[:j + 1]) and m.group(1) not in ("if", "for", "while", "switch", "catch"):
                        kind, name = "func", m.group(1)
                        start = line - (before.rstrip()[before.rstrip().rfind(m.group(1)):]).count("\n")
            stack.append((kind, start, name))
        elif c == "}" and stack:
            kind, start, name = stack.pop()
            if kind == "func":
                found.append((name, start, line))
    return found


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
    long = []
    for top in ("src", "modules"):
        for dirpath, _, files in sorted(os.walk(os.path.join(root, top))):
            for f in sorted(files):
                if f.endswith((".cpp", ".hpp")):
                    path = os.path.join(dirpath, f)
                    with open(path, encoding="utf-8") as fh:
                        for name, a, b in functions(fh.read()):
                            if b - a + 1 > LIMIT:
                                long.append((b - a + 1, f"{os.path.relpath(path, root)}:{a}: {name} is {b - a + 1} lines"))
    for _, msg in sorted(long, reverse=True):
        print(msg)
    print(f"check_function_length: {len(long)} function(s) over {LIMIT} lines" if long else
          f"check_function_length: ok (every function within {LIMIT} lines)")
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
