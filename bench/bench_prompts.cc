#include "bench/bench_prompts.h"

#include "base/error.h"
#include "tokenizer/chat_template.h"

namespace specd::bench {
namespace {

// Python prompts of the kind the shipped pair was trained on (not copied from its corpus).
const char* const kPrompts[] = {
    "def quicksort(items):\n    \"\"\"Return a sorted copy of items.\"\"\"\n",
    "class Stack:\n    def __init__(self):\n        self._items = []\n\n    def push(self, "
    "item):\n",
    "import os\n\ndef list_python_files(root):\n",
    "def parse_args(argv=None):\n    parser = argparse.ArgumentParser(",
    "class Point:\n    \"\"\"A point in the plane.\"\"\"\n\n    def __init__(self, x, y):\n",
    "def read_config(path):\n    with open(path) as f:\n",
    "    def __repr__(self):\n        return ",
    "def fibonacci(n):\n    if n < 2:\n",
    "try:\n    import json\nexcept ImportError:\n",
    "def merge(left, right):\n    result = []\n    i = j = 0\n",
    "class Error(Exception):\n    \"\"\"Base class for exceptions in this module.\"\"\"\n",
    "def is_prime(n):\n    \"\"\"Return True if n is prime.\"\"\"\n",
    "for name, value in sorted(kwargs.items()):\n",
    "def _check_type(value, expected):\n    if not isinstance(value, expected):\n",
    "    @property\n    def name(self):\n",
    "def main():\n    args = parse_args()\n",
};

// User turns for chat prompts, in the target's own chat template (not from any training set).
const char* const kChatPrompts[] = {
    "How do I reverse a list in Python?",
    "Write a Python function that checks whether a string is a palindrome.",
    "What is the difference between a list and a tuple?",
    "Explain what a hash table is.",
    "Write a shell command that counts the lines of every .txt file in a folder.",
    "What does the `grep` command do?",
    "Give me three tips for writing readable code.",
    "How can I read a CSV file in Python?",
    "What is recursion? Give an example.",
    "Write a function that returns the n-th Fibonacci number.",
    "Summarize what an operating system does.",
    "How do I find the largest file in a directory on Linux?",
    "What is the purpose of a virtual environment in Python?",
    "Explain the difference between `==` and `is` in Python.",
    "Write a Python class for a simple bank account.",
    "What is a race condition?",
};

}  // namespace

std::vector<std::vector<int32_t>> BenchPrompts(const Model& target, const Tokenizer& tokenizer,
                                               const std::string& set) {
  SPECD_CHECK(set == "code" || set == "chat", "unknown prompt set '", set, "' (code or chat)");
  std::vector<std::vector<int32_t>> prompts;
  if (set == "chat") {
    const ChatTemplate chat = ChatTemplate::FromGguf(target.gguf(), tokenizer);
    for (const char* p : kChatPrompts) {
      prompts.push_back(EncodeChat(tokenizer, chat, {{"user", p}}, false));
    }
  } else {
    for (const char* p : kPrompts) prompts.push_back(tokenizer.Encode(p, true, false));
  }
  return prompts;
}

}  // namespace specd::bench
