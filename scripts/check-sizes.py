#!/usr/bin/env python3
"""Prints the source files and functions over the house's size limits (STYLE.md: files of
about 600 lines at most, functions of about 80), longest first.

    scripts/check-sizes.py [--max-file-lines N] [--max-function-lines N] [--strict] [ROOT]

Exit 0 always (CI runs it as a warning), or 1 with --strict when anything is over.

C++ is not parsed, only scanned: comments, strings and character literals are blanked, then
each '{' is classed by the text before it (since the last ';', '{' or '}'): `namespace`,
a class/struct/enum/union, a function (a ')' before it, at namespace or class scope: its
name is the word before the matching '('), or a block. A function's length is from its
signature's first line to its closing brace. Generated code, build trees and tests' data are
skipped.
"""
import argparse
import os
import re
import sys

SKIP_DIRS = {".git", "build", "build-fuzz", "build-gpu", "corpus", "proto", "onnx-models"}
EXTENSIONS = (".cc", ".h", ".cu", ".cuh")
TYPE_RE = re.compile(r"\b(class|struct|enum|union)\b")
NAMESPACE_RE = re.compile(r"\bnamespace\b")
NAME_RE = re.compile(r"([A-Za-z_~][A-Za-z0-9_:~<>]*)\s*$")
CONTROL = {"if", "for", "while", "switch", "catch", "return", "sizeof", "alignof", "decltype"}


def blank(text):
    """`text` with comments, string and character literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]{0,16})\(', text[i:])
            if m:
                end = ")" + m.group(1) + '"'
                j = text.find(end, i + m.end())
                j = n if j < 0 else j + len(end)
                out.append(re.sub(r"[^\n]", " ", text[i:j]))
                i = j
            else:
                out.append(c)
                i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, lines) of each function defined in `path`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank(f.read())
    found = []
    stack = []  # (kind, start offset of its signature, name)
    last_stop = 0
    for i, c in enumerate(text):
        if c in ";":
            last_stop = i + 1
        elif c == "{":
            head = text[last_stop:i]
            scope = [k for k, _, _ in stack if k != "block"]
            in_function = "function" in (k for k, _, _ in stack)
            if NAMESPACE_RE.search(head) and not in_function:
                kind, name = "namespace", ""
            elif TYPE_RE.search(head) and ")" not in head and not in_function:
                kind, name = "type", ""
            elif ")" in head and not in_function and (not scope or scope[-1] != "function"):
                name = signature_name(head)
                kind = "function" if name else "block"
            else:
                kind, name = "block", ""
            start = last_stop + len(head) - len(head.lstrip())
            stack.append((kind, start, name))
            last_stop = i + 1
        elif c == "}":
            if stack:
                kind, start, name = stack.pop()
                if kind == "function":
                    first = text.count("\n", 0, start) + 1
                    last = text.count("\n", 0, i) + 1
                    found.append((name, first, last - first + 1))
            last_stop = i + 1
    return found


def signature_name(head):
    """The function's name in `head` (its text before '{'), or '' when it is not one."""
    depth = 0
    for j in range(len(head) - 1, -1, -1):  # The '(' matching the last top-level ')'.
        if head[j] == ")":
            depth += 1
        elif head[j] == "(":
            depth -= 1
            if depth == 0:
                m = NAME_RE.search(head[:j])
                if not m:
                    return ""
                name = m.group(1)
                return "" if name.split("::")[-1] in CONTROL else name
    return ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--max-file-lines", type=int, default=600)
    parser.add_argument("--max-function-lines", type=int, default=80)
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args()
    root = os.path.realpath(args.root)
    big_files, big_functions = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if not name.endswith(EXTENSIONS):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = sum(1 for _ in f)
            if lines > args.max_file_lines:
                big_files.append((lines, rel))
            for fn, first, length in functions(path):
                if length > args.max_function_lines:
                    big_functions.append((length, f"{rel}:{first}", fn))
    print(f"files over {args.max_file_lines} lines: {len(big_files)}")
    for lines, rel in sorted(big_files, reverse=True):
        print(f"  {lines:5d}  {rel}")
    print(f"functions over {args.max_function_lines} lines: {len(big_functions)}")
    for length, where, fn in sorted(big_functions, reverse=True):
        print(f"  {length:5d}  {where}  {fn}")
    over = bool(big_files or big_functions)
    return 1 if args.strict and over else 0


if __name__ == "__main__":
    sys.exit(main())
