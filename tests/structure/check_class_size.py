#!/usr/bin/env python3
"""No class with behaviour in src/ or modules/ holds more than LIMIT data members: a part with more
has more than one job. Counts the data members declared at the top level of each class or struct
body (`a_, b_;` is two; methods, types, `using` and static members are not members). Plain records
(no member functions) and deck sections (`*Config`, and `*Keys`: a file's keys as read) are excepted; so, until their split, are the
classes PENDING names, which are listed on every run. Exit 1 naming each class over the limit."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_function_length import strip  # noqa: E402  (comments and literals blanked)

LIMIT = 15
# Not split yet: none.
PENDING = set()
FOLDERS = ["src", "modules"]
HEAD = re.compile(r"\b(class|struct)\s+(\w+)\s*(final\s*)?(:[^;{]*)?\{")


def body_end(code, i):
    """Index of the `}` matching the `{` at i."""
    depth = 0
    for j in range(i, len(code)):
        depth += code[j] == "{"
        depth -= code[j] == "}"
        if depth == 0:
            return j
    return len(code) - 1


def statements(body):
    """Top-level statements of a class body: split at `;`, and after a method's `{...}`."""
    out, cur, depth, j = [], "", 0, 0
    while j < len(body):
        c = body[j]
        if c == "{":
            if depth == 0 and "(" in cur and "=" not in cur:  # a function body: skip it
                j = body_end(body, j) + 1
                out.append(cur + "(){}")
                cur = ""
                continue
            depth += 1
        elif c == "}":
            depth -= 1
        if c == ";" and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += c
        j += 1
    return out


def members(stmt):
    s = re.sub(r"\b(public|private|protected)\s*:", " ", stmt).strip()
    if not s or re.match(r"(using|friend|typedef|static|enum|template|explicit|virtual|~)\b", s):
        return 0
    if re.match(r"(struct|class)\b", s):  # a nested type: its declarators after the body, if any
        s = s[s.rfind("}") + 1:].strip() if "}" in s else ""
        if not s:
            return 0
        return 1 + s.count(",")
    head = re.split(r"=|\{", s, 1)[0]
    if "(" in head:
        return 0  # a function (or constructor) declaration
    depth, names = 0, 1
    for c in s:
        depth += c in "<({["
        depth -= c in ">)}]"
        names += c == "," and depth == 0
    return names


NAMESPACE = re.compile(r"\bnamespace\s*\w*\s*\{")


def without_namespaces(code):
    """The code with each namespace's braces blanked: a class in one is at the top level."""
    chars = list(code)
    for m in NAMESPACE.finditer(code):
        chars[m.end() - 1] = " "
        chars[body_end(code, m.end() - 1)] = " "
    return "".join(chars)


def sources(root):
    for folder in FOLDERS:
        for path, _, names in sorted(os.walk(os.path.join(root, folder))):
            for n in sorted(names):
                if n.endswith((".hpp", ".cpp")):
                    yield os.path.relpath(os.path.join(path, n), root)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
    big, pending, seen = [], [], 0
    for f in sources(root):
        code = without_namespaces(strip(open(os.path.join(root, f), encoding="utf-8").read()))
        for m in HEAD.finditer(code):
            if code[:m.start()].count("{") - code[:m.start()].count("}") > 0 or m.group(2).endswith(("Config", "Keys")):
                continue  # nested in another class (counted there), or a deck section
            end = body_end(code, m.end() - 1)
            body = statements(code[m.end():end])
            n = sum(members(s) for s in body)
            if not any("(" in s and members(s) == 0 for s in body):
                continue  # a plain record
            seen += 1
            if n <= LIMIT:
                continue
            line = f"{f}: {m.group(2)} holds {n} data members (limit {LIMIT})"
            (pending if m.group(2) in PENDING else big).append(line)
    for p in pending:
        print(p + " -- pending its split")
    for b in big:
        print(b)
    print(f"check_class_size: {len(big)} class(es) over {LIMIT} members" if big else
          f"check_class_size: ok ({seen} classes with behaviour within {LIMIT} members, {len(pending)} pending)")
    return 1 if big else 0


if __name__ == "__main__":
    sys.exit(main())
