#!/usr/bin/env python3
"""Builds chat prompts (user messages) from text Debian installs, for distilling a draft model
on the answers its target writes: questions about Python standard-library functions (from their
source and docstrings, via `ast`) and about commands (from their man pages' NAME and DESCRIPTION
sections). Writes two JSONL files, {"prompt": "..."} per line: one to train on and one held out
(about 1 in 20 items, chosen by a hash of the item's name, so the split is stable).

    python3 scripts/make-chat-prompts.py OUT_TRAIN.jsonl OUT_HELDOUT.jsonl [--max N]
"""
import argparse
import ast
import gzip
import hashlib
import json
import os
import random
import re

PY_ROOT = "/usr/lib/python3.11"
MAN_ROOT = "/usr/share/man/man1"
SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages"}

CODE_TEMPLATES = [
    "What does this Python function do?\n\n```python\n{src}\n```",
    "Explain the following code step by step.\n\n```python\n{src}\n```",
    "Can you add comments to this function?\n\n```python\n{src}\n```",
    "Is there a bug in this code? If so, fix it.\n\n```python\n{src}\n```",
    "Rewrite this function to be shorter.\n\n```python\n{src}\n```",
]
DOC_TEMPLATES = [
    "Write a Python function `{name}` that does the following: {doc}",
    "In Python's `{module}` module, what is `{name}` for? The documentation says: {doc}",
    "Explain this in simple words: {doc}",
    "Give an example of using `{module}.{name}` in Python.",
]
MAN_TEMPLATES = [
    "What does the `{cmd}` command do?",
    "How do I use `{cmd}` on Linux? It is described as: {desc}",
    "Summarize this text:\n\n{text}",
    "Write a shell command that uses `{cmd}` ({desc}) and explain it.",
]


def held_out(key):
    return hashlib.sha1(key.encode()).digest()[0] % 20 == 0


def first_paragraph(doc, limit=400):
    para = doc.strip().split("\n\n")[0]
    para = " ".join(para.split())
    return para[:limit]


def python_items(rng):
    for dirpath, dirnames, filenames in os.walk(PY_ROOT):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for filename in sorted(filenames):
            if not filename.endswith(".py"):
                continue
            path = os.path.join(dirpath, filename)
            module = os.path.relpath(path, PY_ROOT)[:-3].replace("/", ".")
            try:
                source = open(path, encoding="utf-8").read()
                tree = ast.parse(source)
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            lines = source.split("\n")
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    continue
                if node.name.startswith("_"):
                    continue
                key = f"{module}.{node.name}.{node.lineno}"
                doc = ast.get_docstring(node)
                src = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if isinstance(node, ast.FunctionDef) and 3 <= src.count("\n") <= 30:
                    template = rng.choice(CODE_TEMPLATES)
                    yield key, template.format(src=src)
                if doc and len(doc) > 40:
                    template = rng.choice(DOC_TEMPLATES)
                    yield key + ".doc", template.format(
                        name=node.name, module=module, doc=first_paragraph(doc))


def strip_roff(text):
    out = []
    for line in text.split("\n"):
        if line.startswith((".\\\"", "'\\\"")):
            continue
        if line.startswith("."):
            # Macros: keep the arguments of font macros (.B word), drop the rest.
            m = re.match(r"^\.(B|I|BI|BR|IR|RB|RI|IB)\s+(.*)$", line)
            if not m:
                out.append("")
                continue
            line = m.group(2).replace('"', "")
        line = re.sub(r"\\f[BIRP]|\\f\(..|\\s[-+]?\d", "", line)
        line = line.replace("\\-", "-").replace("\\(em", "--").replace("\\(aq", "'")
        line = line.replace("\\&", "").replace("\\e", "\\").replace("\\ ", " ")
        line = re.sub(r"\\\(..|\\\*\(..|\\\*.|\\.", "", line)
        out.append(line)
    return "\n".join(out)


def man_items(rng):
    for filename in sorted(os.listdir(MAN_ROOT)):
        if not filename.endswith(".1.gz"):
            continue
        cmd = filename[: -len(".1.gz")]
        if cmd.startswith(("gcloud", "gsutil", "bq")):
            continue  # the Google Cloud SDK's thousands of pages, not Debian's
        try:
            raw = gzip.open(os.path.join(MAN_ROOT, filename)).read().decode("utf-8", "replace")
        except (OSError, EOFError):
            continue
        if raw.startswith(".so "):
            continue  # an alias of another page
        sections = re.split(r"\n\.S[Hh]\s+", "\n" + raw)
        name_section = desc_section = ""
        for s in sections:
            title = s.split("\n", 1)[0].strip().strip('"').upper()
            body = s.split("\n", 1)[1] if "\n" in s else ""
            if title == "NAME":
                name_section = " ".join(strip_roff(body).split())
            elif title == "DESCRIPTION":
                desc_section = strip_roff(body)
        m = re.search(r"\s-+\s+(.*)", name_section)
        desc = m.group(1).strip()[:200] if m else ""
        paragraph = ""
        for para in re.split(r"\n\s*\n", desc_section):
            para = " ".join(para.split())
            if len(para) > 120:
                paragraph = para[:600]
                break
        if not desc and not paragraph:
            continue
        template = rng.choice(MAN_TEMPLATES if paragraph else MAN_TEMPLATES[:2])
        if not desc and "{desc}" in template:
            template = MAN_TEMPLATES[2]
        yield f"man.{cmd}", template.format(cmd=cmd, desc=desc, text=paragraph)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("train")
    parser.add_argument("held_out")
    parser.add_argument("--max", type=int, default=0, help="at most this many training prompts")
    args = parser.parse_args()
    rng = random.Random(1)
    train, test = [], []
    for source in (python_items(rng), man_items(rng)):
        for key, prompt in source:
            (test if held_out(key) else train).append(prompt)
    rng.shuffle(train)
    rng.shuffle(test)
    if args.max:
        train = train[: args.max]
    for path, items in ((args.train, train), (args.held_out, test)):
        with open(path, "w", encoding="utf-8") as f:
            for p in items:
                f.write(json.dumps({"prompt": p}, ensure_ascii=False) + "\n")
    print(f"{len(train)} training prompts, {len(test)} held out")


if __name__ == "__main__":
    main()
