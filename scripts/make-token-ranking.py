#!/usr/bin/env python3
"""Writes FR-Spec's token ranking for a draft: its tokenizer's tokens, most frequent first.

A draft restricted to the N most frequent tokens (`specd generate --draft-vocab N`) reads only N
rows of its output layer per token. Frequencies are counted on two kinds of text, each weighted
as a distribution of its own (so the small one counts as much as the large one):

- Debian 12's Python standard library (code, docstrings, comments; test suites left out);
- text the model writes itself (greedy, with `specd generate`): answers to chat prompts from
  scripts/make-chat-prompts.py and completions of standard-library function headers with their
  docstrings. This is what a target of the same family writes, and what a corpus alone misses
  (names such as ` pivot` or `(arr` that library code rarely uses).

Never HumanEval. The file:

    specd-token-ranking 1 n_vocab=151936
    # comment lines
    <token id>           one per line, most frequent first

Usage: make-token-ranking.py -m MODEL.gguf --out FILE [--specd build/release/specd]
       [--chat-prompts 400] [--code-prompts 400] [--work .cache/token-ranking]
"""
import argparse
import ast
import collections
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PY_ROOT = "/usr/lib/python3.11"
SKIP_PARTS = {"test", "tests", "idle_test", "site-packages", "dist-packages"}
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def corpus_files(root):
    files = []
    for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        if SKIP_PARTS.isdisjoint(path.split(os.sep)):
            files.append(path)
    return files


def tokenize(specd, model, path):
    out = subprocess.run([specd, "tokenize", "-m", model, "-f", path, "--ids-only", "--no-bos"],
                         capture_output=True, text=True, check=True).stdout
    ids = out.strip().strip("[]")
    return [int(t) for t in ids.split(",")] if ids else []


def count_corpus(specd, model, files):
    counts = collections.Counter()
    for path in files:
        with open(path, "rb") as f:
            try:
                f.read().decode("utf-8")
            except UnicodeDecodeError:
                continue
        counts.update(tokenize(specd, model, path))
    return counts


def code_prompts(files, n):
    """Function headers with their docstrings (the body left for the model), every k-th one."""
    heads = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                src = f.read()
            tree = ast.parse(src)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = src.splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.col_offset != 0:
                continue
            doc = ast.get_docstring(node, clean=False)
            if not doc or not node.body or len(doc) > 600:
                continue
            end = node.body[0].end_lineno  # the docstring's last line
            heads.append("\n".join(lines[node.lineno - 1:end]) + "\n")
    step = max(1, len(heads) // n)
    return heads[::step][:n]


def chat_prompts(n, work):
    train = os.path.join(work, "chat-train.jsonl")
    held = os.path.join(work, "chat-heldout.jsonl")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make-chat-prompts.py"), train,
                    held, "--max", str(max(n, 2000))], check=True, capture_output=True)
    with open(train) as f:
        prompts = [json.loads(line)["prompt"] for line in f][:n]
    return [f"<|im_start|>system\n{QWEN_SYSTEM}<|im_end|>\n<|im_start|>user\n{p}<|im_end|>\n"
            "<|im_start|>assistant\n" for p in prompts]


def written_tokens(specd, model, prompts, cache, n_predict=256, group=16):
    """The tokens the model writes after each prompt (greedy), cached in `cache` (JSON lines)."""
    if os.path.exists(cache):
        with open(cache) as f:
            return [t for line in f for t in json.loads(line)["tokens"]]
    tokens = []
    with tempfile.TemporaryDirectory() as tmp, open(cache + ".tmp", "w") as out:
        for first in range(0, len(prompts), group):
            chunk = os.path.join(tmp, "prompts.jsonl")
            with open(chunk, "w") as f:
                for p in prompts[first:first + group]:
                    f.write(json.dumps({"prompt": p}) + "\n")
            run = subprocess.run([specd, "generate", "-m", model, "--strategy", "ar", "--special",
                                  "--prompts", chunk, "-c", "1536", "-n", str(n_predict),
                                  "--temp", "0", "--json"], capture_output=True, text=True,
                                 check=True)
            for line in run.stdout.splitlines():
                record = json.loads(line)
                if "tokens" in record and "index" in record:
                    out.write(json.dumps({"tokens": record["tokens"]}) + "\n")
                    tokens += record["tokens"]
    os.replace(cache + ".tmp", cache)
    return tokens


def n_vocab_of(specd, model):
    out = subprocess.run([specd, "info", "-m", model], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():  # tokenizer.ggml.tokens (array) = [151936 x string]
        if line.strip().startswith("tokenizer.ggml.tokens "):
            return int(line.split("[")[1].split()[0])
    sys.exit(f"error: specd info -m {model} printed no tokenizer.ggml.tokens")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specd", default=os.path.join(ROOT, "build", "release", "specd"))
    ap.add_argument("-m", "--model", required=True, help="the draft (its tokenizer and its text)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--top", type=int, default=32768, help="tokens kept in the file")
    ap.add_argument("--chat-prompts", type=int, default=400)
    ap.add_argument("--code-prompts", type=int, default=400)
    ap.add_argument("--work", default=os.path.join(ROOT, ".cache", "token-ranking"))
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    files = corpus_files(PY_ROOT)
    if not files:
        sys.exit(f"error: no Python files under {PY_ROOT}")
    corpus = count_corpus(args.specd, args.model, files)
    tag = os.path.basename(args.model)
    written = collections.Counter(
        written_tokens(args.specd, args.model, chat_prompts(args.chat_prompts, args.work),
                       os.path.join(args.work, f"{tag}.chat-{args.chat_prompts}.jsonl")))
    written.update(
        written_tokens(args.specd, args.model, code_prompts(files, args.code_prompts),
                       os.path.join(args.work, f"{tag}.code-{args.code_prompts}.jsonl")))
    n_corpus, n_written = sum(corpus.values()), sum(written.values())
    score = collections.defaultdict(float)
    for counts, total in ((corpus, n_corpus), (written, n_written)):
        for token, c in counts.items():
            score[token] += c / total
    # Ties broken by id, so the file is the same on every run.
    ranked = sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))[: args.top]
    n_vocab = n_vocab_of(args.specd, args.model)
    with open(args.out + ".tmp", "w") as f:
        f.write(f"specd-token-ranking 1 n_vocab={n_vocab}\n")
        f.write(f"# {tag}'s tokenizer; by scripts/make-token-ranking.py: {n_corpus} tokens of "
                f"{len(files)} files of {PY_ROOT} (tests left out) and {n_written} tokens the "
                f"model wrote ({args.chat_prompts} chat, {args.code_prompts} code prompts), "
                f"each weighted as a distribution\n")
        f.write(f"# {len(score)} distinct tokens seen, the first {len(ranked)} listed\n")
        for token, _ in ranked:
            f.write(f"{token}\n")
    os.replace(args.out + ".tmp", args.out)
    print(f"{args.out}: {len(ranked)} of {len(score)} distinct tokens")


if __name__ == "__main__":
    main()
