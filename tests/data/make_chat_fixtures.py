#!/usr/bin/env python3
"""Renders chat fixtures for tests/pretrained_test.cc with the models' own Jinja templates.

   pip install gguf jinja2 && python3 tests/data/make_chat_fixtures.py > tests/data/chat_fixtures.json

Each model's `tokenizer.chat_template` is read from its GGUF in pretrained/ and rendered by the
jinja2 package (as Hugging Face's apply_chat_template does: trim_blocks, lstrip_blocks), so the
fixtures are the template's own output, not specd's.
"""
import json
import sys

import jinja2
from gguf import GGUFReader

MODELS = ["qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
          "SmolLM2-135M-Instruct.Q4_1.gguf"]
CONVERSATIONS = [
    [{"role": "user", "content": "Write is_prime in Python."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
     {"role": "user", "content": "2+2?"}],
    [{"role": "user", "content": "Ünïcødé 你好 🙂\n\tdef f(): pass"}],
]


def template_of(path):
    reader = GGUFReader(path)
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main():
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    out = {}
    for name in MODELS:
        template = env.from_string(template_of("pretrained/" + name))
        cases = []
        for messages in CONVERSATIONS:
            for add_generation_prompt in (True, False):
                text = template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                       tools=None)
                cases.append({"messages": messages, "add_generation_prompt": add_generation_prompt,
                              "text": text})
        out[name] = cases
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
