#!/usr/bin/env python3
"""Reference token ids for tests/pretrained_test.cc from llama.cpp's own tokenizer.

    python3 tests/data/make_pretrained_tokens.py LLAMA_TOKENIZE MODEL.gguf [MODEL.gguf ...]

LLAMA_TOKENIZE is the llama-tokenize binary of the llama.cpp vendored in the llama-cpp-python
0.3.36 sdist (MACHINE.md's recipe). Each model's entry in tests/data/pretrained_tokens.json is
(re)written: every case text tokenized without BOS, special tokens written as text (specd's
Encode(text, false, false)) and, for the cases marked "special", with special tokens parsed.
Other models' entries are kept.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "pretrained_tokens.json")

TEXTS = [
    "Hello world", " Hello world", "Hello  world\n\n\tTabs",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "The year 2026 had 365 days; 3.14159 and 1,000,000.",
    "naïve café – “quotes” — dash… ellipsis", "日本語のテキストと中文文本",
    "Emoji: 🦙🚀 and ZWJ 👩\u200d💻", "   leading and trailing spaces   ",
    "I'm, you're, they've, he'd, we'll", "<|im_start|> is written, not parsed",
    "<start_of_turn>user not parsed either", "x" * 50, "\n\n\n", "a\r\nb\rc",
    "Ελληνικά, русский, العربية, हिन्दी",
    "CamelCaseIdentifier_with_snake_case and ALLCAPS123abc",
    "$ ls -la | grep '^d' > out.txt 2>&1",
    # Code as editors send it: indentation runs, tabs, long numbers, string escapes, operators.
    "class Stack:\n    def __init__(self):\n        self.items: list[int] = []\n\n"
    "    def push(self, x: int) -> None:\n        self.items.append(x)\n",
    "\tif (x >= 0x7fffffff && y != -1) { return a->b[i++] << 3; }\n",
    "s = f\"{name!r:>10} \\u00e9 \\n\" + r'\\d+' + '''doc'''  # noqa\n",
    "123456789012345678901234567890 3.0e-10 1_000_000",
    "        \n            \n",
]
# Texts whose special tokens are parsed (prompts specd builds itself: FIM, chat turns).
SPECIAL_TEXTS = [
    "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n    return c<|fim_middle|>",
    "<|repo_name|>specd\n<|file_sep|>a.py\nimport os\n<|file_sep|>b.py\n",
    "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
]


def tokenize(binary, model, text, special):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(text)
        path = f.name
    try:
        cmd = [binary, "-m", model, "-f", path, "--ids", "--no-bos", "--no-escape",
               "--log-disable"]
        if not special:
            cmd.append("--no-parse-special")
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(path)
    line = [l for l in out.splitlines() if l.startswith("[")][-1]
    return json.loads(line)


def main():
    binary, models = sys.argv[1], sys.argv[2:]
    ref = json.load(open(OUT)) if os.path.exists(OUT) else {}
    for model in models:
        name = os.path.basename(model)
        cases = [{"text": t, "ids": tokenize(binary, model, t, False)} for t in TEXTS]
        if "qwen" in name.lower():
            cases += [{"text": t, "special": True, "ids": tokenize(binary, model, t, True)}
                      for t in SPECIAL_TEXTS]
        ref[name] = cases
    with open(OUT, "w") as f:
        json.dump(ref, f, ensure_ascii=False, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
