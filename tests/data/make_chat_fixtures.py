#!/usr/bin/env python3
"""Renders chat fixtures for tests/pretrained_test.cc with the models' own Jinja templates.

   pip install gguf jinja2 && python3 tests/data/make_chat_fixtures.py > tests/data/chat_fixtures.json

Each model's `tokenizer.chat_template` is read from its GGUF in pretrained/ and rendered by the
jinja2 package (as Hugging Face's apply_chat_template does: trim_blocks, lstrip_blocks), so the
fixtures are the template's own output, not specd's. Templates with a tool format (Qwen2.5's
<tool_call>) also render conversations with tools, tool calls and tool answers, `tojson` as
transformers defines it (json.dumps with ensure_ascii=False).
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

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city (°C).",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}}
CLOCK = {"type": "function", "function": {"name": "now", "parameters": {"type": "object",
                                                                        "properties": {}}}}
TOOL_CONVERSATIONS = [
    ([WEATHER], [{"role": "user", "content": "Weather in Paris?"}]),
    ([WEATHER, CLOCK], [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Weather in Paris and the time?"}]),
    ([WEATHER], [
        {"role": "user", "content": "Weather in Paris and Köln?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "call_2", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Köln", "unit": "c"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18}"},
        {"role": "tool", "tool_call_id": "call_2", "content": "{\"temp\": 12}"},
        {"role": "assistant", "content": "Paris 18, Köln 12."},
        {"role": "user", "content": "Thanks"}]),
    ([], [{"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Let me check.", "tool_calls": [
              {"type": "function", "function": {"name": "now", "arguments": {}}}]},
          {"role": "tool", "content": "12:00"}]),
]


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def template_of(path):
    reader = GGUFReader(path)
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main():
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
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
        if "<tool_call>" in template_of("pretrained/" + name):
            for tools, messages in TOOL_CONVERSATIONS:
                text = template.render(messages=messages, add_generation_prompt=True,
                                       tools=tools or None)
                cases.append({"messages": messages, "tools": tools, "add_generation_prompt": True,
                              "text": text})
        out[name] = cases
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
