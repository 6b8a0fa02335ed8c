"""Structured output and tool calls through specd serve, driven by the official openai client.

Usage: structured_test.py SPECD_BINARY [unittest args]. Runs the default pair (Qwen2.5-Coder-1.5B
drafted by the 0.5B, fetched by scripts/get-models.sh; skipped without it) once speculative and
once plain: every constrained answer follows its schema or grammar, the two servers write the
same greedy text, and a tool conversation goes call -> answer -> final reply.
"""
import json
import os
import sys
import unittest

import openai
import pydantic

from specd_server import Server as BaseServer

SPECD = sys.argv.pop(1)
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TARGET = os.path.join(ROOT, "pretrained", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
DRAFT = os.path.join(ROOT, "pretrained", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city's name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False},
    "strict": True}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "languages": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "role": {"enum": ["developer", "designer", "manager"]}},
    "required": ["name", "age", "languages", "role"],
    "additionalProperties": False}


class Person(pydantic.BaseModel):
    name: str
    age: int
    languages: list[str]
    role: str


def follows_person_schema(value):
    return (isinstance(value, dict) and set(value) == set(PERSON_SCHEMA["required"])
            and isinstance(value["name"], str) and len(value["name"]) <= 40
            and isinstance(value["age"], int) and 0 <= value["age"] <= 150
            and isinstance(value["languages"], list) and len(value["languages"]) <= 4
            and all(isinstance(x, str) for x in value["languages"])
            and value["role"] in ("developer", "designer", "manager"))


@unittest.skipUnless(os.path.exists(TARGET) and os.path.exists(DRAFT),
                     "the default pair is not fetched (scripts/get-models.sh)")
class StructuredTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.spec = BaseServer(SPECD, "-m", TARGET, "-md", DRAFT, "--parallel", "2")
        cls.plain = BaseServer(SPECD, "-m", TARGET, "--spec-type", "none", "--parallel", "2")
        cls.clients = [openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="none",
                                     max_retries=0, timeout=300) for s in (cls.spec, cls.plain)]
        cls.client = cls.clients[0]

    @classmethod
    def tearDownClass(cls):
        assert cls.spec.stop() == 0 and cls.plain.stop() == 0

    def chat(self, client, messages, **kw):
        return client.chat.completions.create(model=self.spec.model, messages=messages, temperature=0,
                                              **kw)

    def test_json_schema_answers_follow_the_schema_with_and_without_speculation(self):
        fmt = {"type": "json_schema",
               "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True}}
        for who in ("a senior Rust developer from Lisbon", "a young designer", "our manager"):
            messages = [{"role": "user", "content": f"Describe {who} as JSON."}]
            answers = [self.chat(c, messages, response_format=fmt, max_tokens=160)
                       for c in self.clients]
            texts = [a.choices[0].message.content for a in answers]
            self.assertEqual(texts[0], texts[1], who)  # speculation changes nothing
            self.assertTrue(follows_person_schema(json.loads(texts[0])), texts[0])
            self.assertEqual(answers[0].choices[0].finish_reason, "stop")
            self.assertGreater(answers[0].model_extra["specd"]["n_accepted"], 0)

    def test_sampled_json_object_answers_are_json(self):
        for seed in (1, 2, 3):
            answer = self.client.chat.completions.create(
                model=self.spec.model, temperature=0.7, seed=seed, max_tokens=200,
                response_format={"type": "json_object"},
                messages=[{"role": "user", "content": "List three fruits and their colours."}])
            self.assertIsInstance(json.loads(answer.choices[0].message.content), (dict, list))

    def test_parse_with_a_pydantic_model(self):
        completion = self.client.beta.chat.completions.parse(
            model=self.spec.model, temperature=0, max_tokens=200, response_format=Person,
            messages=[{"role": "user",
                       "content": "Invent a software engineer who knows two languages."}])
        person = completion.choices[0].message.parsed
        self.assertIsInstance(person, Person)
        self.assertTrue(person.name)

    def test_tool_conversation_call_then_answer(self):
        messages = [{"role": "system", "content": "Use the tools to answer."},
                    {"role": "user", "content": "What is the weather in Paris, in celsius?"}]
        first = self.chat(self.client, messages, tools=[WEATHER, TIME], tool_choice="required",
                          max_tokens=96)
        choice = first.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.assertIsNone(choice.message.content)
        calls = choice.message.tool_calls
        self.assertGreaterEqual(len(calls), 1)
        self.assertIn(calls[0].function.name, ("get_weather", "get_time"))
        args = json.loads(calls[0].function.arguments)
        if calls[0].function.name == "get_weather":
            self.assertEqual(set(args), {"city", "unit"})
            self.assertIn(args["unit"], ("celsius", "fahrenheit"))
        messages.append(choice.message.model_dump(exclude_none=True))
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": json.dumps({"temperature": 21, "sky": "clear"})})
        # The answer in words: with the tools still offered ("auto") this 1.5B model tends to
        # call again, copying its template's example call.
        final = self.chat(self.client, messages, tools=[WEATHER, TIME], tool_choice="none",
                          max_tokens=64)
        self.assertEqual(final.choices[0].finish_reason, "stop")
        self.assertIn("21", final.choices[0].message.content)

    def test_named_tool_choice_and_parallel_calls(self):
        messages = [{"role": "user", "content": "Weather in Paris and in Rome, in celsius?"}]
        named = {"type": "function", "function": {"name": "get_weather"}}
        both = self.chat(self.client, messages, tools=[WEATHER, TIME], tool_choice=named,
                         max_tokens=128)
        calls = both.choices[0].message.tool_calls
        self.assertTrue(all(c.function.name == "get_weather" for c in calls))
        one = self.chat(self.client, messages, tools=[WEATHER, TIME], tool_choice=named,
                        parallel_tool_calls=False, max_tokens=128)
        self.assertEqual(len(one.choices[0].message.tool_calls), 1)
        self.assertEqual(one.choices[0].message.tool_calls[0].function.arguments,
                         calls[0].function.arguments)

    def test_streamed_tool_calls_equal_the_whole_answer(self):
        messages = [{"role": "user", "content": "Weather in Oslo and in Rome, in celsius?"}]
        kw = dict(tools=[WEATHER], tool_choice="required", max_tokens=128)
        whole = self.chat(self.client, messages, **kw).choices[0]
        streamed, finish = {}, None
        for chunk in self.chat(self.client, messages, stream=True, **kw):
            delta = chunk.choices[0].delta
            self.assertFalse(delta.content)  # a forced call writes no text
            for call in delta.tool_calls or []:
                streamed[call.index] = (call.function.name, call.function.arguments)
            finish = chunk.choices[0].finish_reason or finish
        self.assertEqual(finish, "tool_calls")
        self.assertEqual([streamed[i] for i in sorted(streamed)],
                         [(c.function.name, c.function.arguments)
                          for c in whole.message.tool_calls])

    def test_llama_server_grammar_and_json_schema(self):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.spec.port, timeout=120)

        def post(path, body):
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, json.loads(response.read())

        status, body = post("/completion", {
            "prompt": "Q: Is Python dynamically typed?\nA:", "n_predict": 16, "temperature": 0,
            "grammar": 'root ::= " " ("yes" | "no") "."'})
        self.assertEqual(status, 200)
        self.assertIn(body["content"], (" yes.", " no."))
        status, body = post("/completion", {
            "prompt": "A person record:", "n_predict": 160, "temperature": 0,
            "json_schema": PERSON_SCHEMA})
        self.assertEqual(status, 200)
        self.assertTrue(follows_person_schema(json.loads(body["content"])), body["content"])
        status, body = post("/v1/completions", {
            "prompt": "A person record:", "max_tokens": 160, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"schema": PERSON_SCHEMA}}})
        self.assertEqual(status, 200)
        self.assertTrue(follows_person_schema(json.loads(body["choices"][0]["text"])))

    def test_what_cannot_be_compiled_or_combined_is_a_400_naming_the_field(self):
        cases = [
            ({"response_format": {"type": "json_schema",
                                  "json_schema": {"schema": {"$ref": "#/$defs/missing"}}}},
             "response_format"),
            ({"grammar": "root ::= nothing_defined"}, "grammar"),
            ({"tools": [WEATHER], "tool_choice": {"type": "function",
                                                  "function": {"name": "no_such_tool"}}},
             "tool_choice"),
            ({"tools": [{"type": "function"}]}, "tools"),
            ({"response_format": {"type": "json_object"}, "tools": [WEATHER],
              "tool_choice": "required"}, "tool_choice"),
        ]
        for extra, field in cases:
            with self.assertRaises(openai.BadRequestError) as raised:
                self.chat(self.client, [{"role": "user", "content": "hi"}], max_tokens=4,
                          extra_body=extra)
            self.assertEqual(raised.exception.body["param"], field, extra)
        # The server is still fine.
        self.assertTrue(self.chat(self.client, [{"role": "user", "content": "hi"}],
                                  max_tokens=4).choices[0].message.content)


if __name__ == "__main__":
    unittest.main()
