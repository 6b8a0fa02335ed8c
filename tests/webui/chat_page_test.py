"""specd serve's chat page in a real browser: headless Chromium (Debian's) driven by Selenium.

Usage: chat_page_test.py SPECD_BINARY [unittest args]. Most cases run the shipped 16.5M pair
(models/, always there; its file has no chat template, so the server gets --chat-template chatml).
Stopping a long answer and the README's screenshot need an answer that takes seconds: they run
the default pair (Qwen2.5-Coder-1.5B drafted by the 0.5B, fetched by scripts/get-models.sh) and
are skipped, saying so, without it. The screenshot goes to the build folder (webui-chat.png), and
to $SPECD_SCREENSHOT_TO when set (docs/images/chat-page.png for the README).
"""
import json
import os
import shutil
import sys
import time
import unittest

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from specd_server import Server  # noqa: E402

SPECD = sys.argv.pop(1)
ROOT = os.path.join(HERE, "..", "..")
# A fixed draft length: the cost-aware policy may find that drafting does not pay for a while
# on a model this small, and the colours need drafted tokens in every answer.
TINY = ["-m", os.path.join(ROOT, "models", "specd-target-q8_0.gguf"),
        "-md", os.path.join(ROOT, "models", "specd-draft-q8_0.gguf"), "--chat-template", "chatml",
        "--draft-fixed", "4"]
QWEN_TARGET = os.path.join(ROOT, "pretrained", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
QWEN_DRAFT = os.path.join(ROOT, "pretrained", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
HAVE_QWEN = os.path.exists(QWEN_TARGET) and os.path.exists(QWEN_DRAFT)
SHOT_DIR = os.path.dirname(os.path.abspath(SPECD))

# Installed before the page's own scripts: records request bodies, the time the first chunk with
# answer text arrives from the server (a tee of the response stream, read beside the page's
# reader) and the time that text first shows in the page (a MutationObserver).
PROBE = r"""
window.__probe = {bodies: [], firstChunk: null, firstText: null};
const realFetch = window.fetch.bind(window);
window.fetch = async (url, options) => {
  if (options && options.body) window.__probe.bodies.push(JSON.parse(options.body));
  const res = await realFetch(url, options);
  if (!String(url).includes("/chat/completions") || !res.ok || !res.body) return res;
  const [mine, theirs] = res.body.tee();
  (async () => {
    const reader = mine.getReader(), decoder = new TextDecoder();
    let seen = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      seen += decoder.decode(value, {stream: true});
      if (window.__probe.firstChunk === null && /"content":"[^"]/.test(seen)) {
        window.__probe.firstChunk = performance.now();
      }
    }
  })().catch(() => {});
  return new Response(theirs, {status: res.status, statusText: res.statusText, headers: res.headers});
};
new MutationObserver(() => {
  if (window.__probe.firstText !== null) return;
  const bodies = document.querySelectorAll(".message.assistant .body");
  const last = bodies[bodies.length - 1];
  if (last && last.textContent.length > 0) window.__probe.firstText = performance.now();
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def new_browser():
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1200,760", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE})
    return driver


def wait_for(condition, timeout_s=30, what="a condition"):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class PageCase(unittest.TestCase):
    """A browser on one server's page, local storage cleared before each case."""
    server_args = TINY

    @classmethod
    def setUpClass(cls):
        cls.server = Server(SPECD, *cls.server_args)
        cls.url = f"http://127.0.0.1:{cls.server.port}/"
        cls.browser = new_browser()

    @classmethod
    def tearDownClass(cls):
        cls.browser.quit()
        cls.assert_stopped(cls.server)

    @staticmethod
    def assert_stopped(server):
        code = server.stop()
        if code != 0:
            raise AssertionError(f"the server exited with {code}")

    def setUp(self):
        self.browser.get(self.url)
        self.browser.execute_script("localStorage.clear()")
        self.open_page()

    def open_page(self):
        self.browser.get(self.url)
        wait_for(lambda: self.js("return document.getElementById('server-state').textContent")
                 .startswith("speculative"), what="the page to reach the server")

    def js(self, script, *args):
        return self.browser.execute_script(script, *args)

    def el(self, css):
        return self.browser.find_element(By.CSS_SELECTOR, css)

    def stored(self):
        return json.loads(self.js("return localStorage.getItem('specd.chat.v1')"))

    def current_messages(self):
        s = self.stored()
        return next(c for c in s["conversations"] if c["id"] == s["current"])["messages"]

    def set_field(self, element_id, value):
        if not self.js("return document.getElementById('settings').open"):
            self.el("#settings summary").click()
        field = self.el("#" + element_id)
        field.clear()
        field.send_keys(str(value))

    def send(self, text):
        box = self.el("#input")
        box.clear()
        box.send_keys(text, Keys.ENTER)

    def wait_answer(self, timeout_s=120):
        wait_for(lambda: self.js(
            "return document.querySelectorAll('.message.assistant').length > 0 && "
            "!document.querySelector('.message.streaming')"), timeout_s, "the answer to end")
        return self.browser.find_elements(By.CSS_SELECTOR, ".message.assistant")[-1]

    def record_first_token_gap(self, what):
        """ms from the first chunk with answer text reaching the browser to that text showing
        in the page (its first answer since it loaded): printed and added to webui-timings.json
        in the build folder. A measurement, not an assertion (the suite asserts no timings)."""
        probe = self.js("return window.__probe")
        self.assertIsNotNone(probe["firstChunk"])
        self.assertIsNotNone(probe["firstText"])
        gap_ms = probe["firstText"] - probe["firstChunk"]
        print(f"\n{what}: first token shown {gap_ms:.1f} ms after its chunk arrived",
              file=sys.stderr)
        path = os.path.join(SHOT_DIR, "webui-timings.json")
        timings = json.load(open(path)) if os.path.exists(path) else {}
        timings[what] = {"first_token_shown_after_chunk_ms": round(gap_ms, 2),
                         "date": time.strftime("%Y-%m-%d")}
        with open(path, "w") as f:
            json.dump(timings, f, indent=1)

    def copy_and_read(self, button):
        """Clicks a copy button, waits for it to say so, and returns the clipboard's text."""
        self.browser.execute_cdp_cmd("Browser.grantPermissions", {
            "origin": self.url.rstrip("/"),
            "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
        button.click()
        wait_for(lambda: button.text == "Copied", 5, "the copy button to say so")
        return self.browser.execute_async_script(
            "navigator.clipboard.readText().then(arguments[0], e => arguments[0]('error ' + e))")

    def slots_in_use(self, server):
        return server.metrics()["specd:kv_slots_in_use"]


class TinyPairTest(PageCase):
    """The page on the shipped 16.5M pair."""

    def test_page_and_its_files_are_served_with_a_strict_policy(self):
        status, headers, body = self.server.raw("GET", "/")
        self.assertEqual(status, 200)
        self.assertIn("text/html", headers["Content-Type"])
        self.assertIn("default-src 'self'", headers["Content-Security-Policy"])
        self.assertIn(b"/webui/app.js", body)
        for path in ("/webui/app.js", "/webui/markdown.js", "/webui/style.css"):
            self.assertEqual(self.server.raw("GET", path)[0], 200, path)
        self.assertEqual(self.server.raw("GET", "/webui/nothing.js")[0], 404)
        self.assertEqual(self.js("return document.title"), "specd-target-q8_0 · specd chat")

    def test_streamed_answer_equals_the_api_answer_with_figures(self):
        self.set_field("temperature", 0)
        self.set_field("max-tokens", 60)
        self.send("def fibonacci(n):")
        answer = self.wait_answer()
        probe = self.js("return window.__probe")
        self.record_first_token_gap("16.5M pair")
        # The text the page assembled from the stream is the server's greedy answer.
        body = probe["bodies"][-1]
        self.assertTrue(body["stream"] and body["return_token_sources"])
        self.assertEqual(body["temperature"], 0)
        self.assertEqual(body["max_tokens"], 60)
        plain = dict(body, stream=False)
        plain.pop("stream_options")
        status, _, data = self.server.raw("POST", "/v1/chat/completions", json.dumps(plain),
                                          {"Content-Type": "application/json"})
        self.assertEqual(status, 200)
        expected = json.loads(data)
        messages = self.current_messages()
        self.assertEqual(messages[1]["content"], expected["choices"][0]["message"]["content"])
        self.assertEqual(sum(run["n_tokens"] for run in messages[1]["sources"]),
                         expected["usage"]["completion_tokens"])
        self.assertEqual("".join(run["text"] for run in messages[1]["sources"]),
                         messages[1]["content"])
        stats = answer.find_element(By.CSS_SELECTOR, ".stats").text
        self.assertRegex(stats, r"[\d.]+ tok/s")
        spec = messages[1]["specd"]
        self.assertGreater(spec["n_drafted"], 0)
        self.assertIn(f"drafted {spec['n_drafted']} · accepted {spec['n_accepted']}", stats)
        self.assertRegex(stats, r"accepted \d+ \(\d+%\)")

    def test_token_sources_colour_the_answer(self):
        self.set_field("temperature", 0)
        self.send("import os")
        answer = self.wait_answer()
        self.assertFalse(self.el("#legend").is_displayed())
        draft = answer.find_elements(By.CSS_SELECTOR, ".body .s-d")
        target = answer.find_elements(By.CSS_SELECTOR, ".body .s-t")
        self.assertTrue(draft and target, "an answer has accepted drafts and target tokens")
        transparent = "rgba(0, 0, 0, 0)"
        self.assertEqual(draft[0].value_of_css_property("background-color"), transparent)
        self.el("#show-sources").click()
        self.assertTrue(self.el("#legend").is_displayed())
        colours = {draft[0].value_of_css_property("background-color"),
                   target[0].value_of_css_property("background-color")}
        self.assertEqual(len(colours), 2)
        self.assertNotIn(transparent, colours)
        by_source = answer.find_element(By.CSS_SELECTOR, ".stats .by-source").text
        self.assertRegex(by_source, r"draft \d+ · lookup 0 · target \d+")
        # The toggle is a setting: kept across a reload.
        self.open_page()
        self.assertTrue(self.el("#show-sources").is_selected())
        self.assertTrue(self.el("#legend").is_displayed())

    def test_reload_keeps_conversations_and_unsent_text(self):
        self.send("class Stack:")
        self.wait_answer()
        self.el("#new-chat").click()
        self.el("#input").send_keys("half-written question")
        self.open_page()
        self.assertEqual(self.el("#input").get_attribute("value"), "half-written question")
        items = self.browser.find_elements(By.CSS_SELECTOR, "#conversations li")
        self.assertEqual(len(items), 2)
        items[1].click()
        messages = self.browser.find_elements(By.CSS_SELECTOR, ".message")
        self.assertEqual(messages[0].find_element(By.CSS_SELECTOR, ".body").text, "class Stack:")
        self.assertTrue(messages[1].find_element(By.CSS_SELECTOR, ".body").text)
        # Back in the new conversation, its unsent text is still there.
        self.browser.find_elements(By.CSS_SELECTOR, "#conversations li")[0].click()
        self.assertEqual(self.el("#input").get_attribute("value"), "half-written question")

    def test_keyboard_enter_sends_and_shift_enter_breaks_the_line(self):
        box = self.el("#input")
        box.send_keys("first line", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "second line")
        self.assertEqual(box.get_attribute("value"), "first line\nsecond line")
        self.assertEqual(self.browser.find_elements(By.CSS_SELECTOR, ".message"), [])
        box.send_keys(Keys.ENTER)
        self.wait_answer()
        self.assertEqual(self.current_messages()[0]["content"], "first line\nsecond line")
        self.assertEqual(box.get_attribute("value"), "")

    def test_settings_and_system_prompt_go_into_the_request(self):
        self.set_field("system-prompt", "You write Python.")
        self.set_field("temperature", 0.3)
        self.set_field("top-p", 0.5)
        self.set_field("max-tokens", 12)
        self.send("def main():")
        self.wait_answer()
        body = self.js("return window.__probe.bodies")[-1]
        self.assertEqual(body["messages"][0], {"role": "system", "content": "You write Python."})
        self.assertEqual(body["messages"][1], {"role": "user", "content": "def main():"})
        self.assertEqual((body["temperature"], body["top_p"], body["max_tokens"]), (0.3, 0.5, 12))
        self.assertLessEqual(self.current_messages()[1]["usage"]["completion_tokens"], 12)
        # A second turn sends the first answer back.
        self.send("def other():")
        self.wait_answer()
        body = self.js("return window.__probe.bodies")[-1]
        self.assertEqual([m["role"] for m in body["messages"]],
                         ["system", "user", "assistant", "user"])
        self.open_page()
        self.assertEqual(self.el("#system-prompt").get_attribute("value"), "You write Python.")

    def test_refused_message_stays_editable_with_the_error_shown(self):
        long_text = "word " * 400  # more tokens than the 256 positions
        self.el("#input").send_keys(long_text.strip())
        self.el("#send").click()
        error = wait_for(lambda: self.el("#error").is_displayed() and self.el("#error"), 30,
                         "the error")
        self.assertIn("maximum context length", error.text)
        self.assertEqual(self.el("#input").get_attribute("value"), long_text.strip())
        self.assertEqual(self.current_messages(), [])
        self.open_page()  # and it survives a reload
        self.assertEqual(self.el("#input").get_attribute("value"), long_text.strip())

    def test_markdown_is_rendered_escaped_and_code_can_be_copied(self):
        content = ("# Title\n\nSome **bold**, *em* and `code`. <img src=x onerror=alert(1)>\n\n"
                   "- one\n- two\n\n```python\ndef f(x):\n    return x + 1  # add\n```\n")
        state = {"conversations": [{"id": "c1", "title": "Injected", "messages": [
            {"role": "user", "content": "show me"},
            {"role": "assistant", "content": content, "sources": []}]}], "current": "c1"}
        self.js("localStorage.setItem('specd.chat.v1', arguments[0])", json.dumps(state))
        self.open_page()
        body = self.el(".message.assistant .body")
        self.assertEqual(body.find_element(By.CSS_SELECTOR, "h1").text, "Title")
        self.assertEqual(body.find_element(By.CSS_SELECTOR, "strong").text, "bold")
        self.assertEqual(len(body.find_elements(By.CSS_SELECTOR, "li")), 2)
        self.assertEqual(body.find_elements(By.CSS_SELECTOR, "img"), [])
        self.assertIn("<img src=x onerror=alert(1)>", body.text)
        self.assertEqual(body.find_element(By.CSS_SELECTOR, ".hl-k").text, "def")
        self.assertEqual(body.find_element(By.CSS_SELECTOR, ".hl-c").text, "# add")
        self.assertEqual(self.copy_and_read(body.find_element(By.CSS_SELECTOR, "button.copy")),
                         "def f(x):\n    return x + 1  # add")


    def test_regenerate_replaces_the_last_answer_and_copy_takes_it_whole(self):
        self.set_field("max-tokens", 24)
        self.send("def parse(text):")
        self.wait_answer()
        self.send("def render(tree):")
        self.wait_answer()
        # Only the last answer offers Regenerate.
        first, second = self.browser.find_elements(By.CSS_SELECTOR, ".message.assistant")
        self.assertFalse(first.find_element(By.CSS_SELECTOR, ".regenerate").is_displayed())
        before = self.current_messages()
        second.find_element(By.CSS_SELECTOR, ".regenerate").click()
        wait_for(lambda: len(self.js("return window.__probe.bodies")) == 3, 10, "a third request")
        last = self.wait_answer()
        after = self.current_messages()
        self.assertEqual(len(after), 4)
        self.assertEqual(after[:3], before[:3])
        self.assertEqual([m["content"] for m in self.js("return window.__probe.bodies")[2]["messages"]],
                         ["def parse(text):", before[1]["content"], "def render(tree):"])
        self.assertEqual(self.copy_and_read(last.find_element(By.CSS_SELECTOR, ".copy-answer")),
                         after[3]["content"])

    def test_renderer_emits_only_its_own_markup_and_keeps_every_source(self):
        # 3000 random texts of Markdown's and HTML's characters: the rendered HTML holds only the
        # renderer's tags and attributes, links only to http(s), and with one source per random
        # run of plain text, the spans give back each character's source.
        report = self.js(r'''
          let seed = 12345;
          const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
          const alphabet = ["<", ">", "&", '"', "'", "*", "_", "`", "```", "#", "- ", "1. ", "> ",
                            "[a](http://x)", "[b](javascript:alert(1))", "\n", "\n\n", " ", "a",
                            "onerror=", "<script>", "</", "~~~", "\u00e9", "\ud83d\ude00"];
          const tags = new Set(["P", "BR", "H1", "H2", "H3", "H4", "H5", "H6", "HR", "UL", "OL",
                                "LI", "BLOCKQUOTE", "STRONG", "EM", "CODE", "PRE", "A", "SPAN",
                                "DIV", "BUTTON"]);
          const attrs = new Set(["class", "href", "target", "rel", "type", "data-code"]);
          const problems = [];
          for (let n = 0; n < 3000; n++) {
            let text = "";
            const length = rand(40);
            for (let i = 0; i < length; i++) text += alphabet[rand(alphabet.length)];
            const html = SpecdMarkdown.render(text, null).html;
            const doc = new DOMParser().parseFromString("<body>" + html + "</body>", "text/html");
            for (const el of doc.body.querySelectorAll("*")) {
              if (!tags.has(el.tagName)) problems.push("tag " + el.tagName + " from " + JSON.stringify(text));
              for (const a of el.attributes) {
                if (!attrs.has(a.name)) problems.push("attribute " + a.name + " from " + JSON.stringify(text));
              }
              if (el.tagName === "A" && !/^https?:/.test(el.getAttribute("href"))) problems.push("href " + el.getAttribute("href"));
            }
          }
          const sources = ["target", "draft", "lookup"];
          for (let n = 0; n < 300; n++) {
            const runs = [];
            let text = "";
            for (let r = rand(6) + 1; r > 0; r--) {
              let piece = "";
              for (let i = rand(5) + 1; i > 0; i--) piece += "abc xyz.,;"[rand(10)];
              runs.push({text: piece, source: sources[rand(3)], n_tokens: 1});
              text += piece;
            }
            const doc = new DOMParser().parseFromString(SpecdMarkdown.render("x" + text, [{text: "x", source: "target"}].concat(runs)).html, "text/html");
            let got = "";
            for (const span of doc.querySelectorAll("span")) {
              const source = {"s-t": "target", "s-d": "draft", "s-l": "lookup"}[span.className];
              got += [...span.textContent].map((c) => source[0]).join("");
            }
            let want = "t";
            for (const run of runs) want += run.source[0].repeat(run.text.length);
            if (got !== want) problems.push("sources " + JSON.stringify(runs) + ": " + got);
          }
          return problems.slice(0, 5);
        ''')
        self.assertEqual(report, [])

    def test_no_webui_turns_the_page_off(self):
        server = Server(SPECD, *TINY, "--no-webui")
        try:
            self.assertEqual(server.raw("GET", "/")[0], 404)
            self.assertEqual(server.raw("GET", "/webui/app.js")[0], 404)
            self.assertEqual(server.raw("GET", "/health")[0], 200)
        finally:
            self.assert_stopped(server)


class ApiKeyTest(PageCase):
    server_args = TINY + ["--api-key", "sesame"]

    def setUp(self):
        self.browser.get(self.url)
        self.js("localStorage.clear()")
        self.browser.get(self.url)

    def enter_key(self, key):
        wait_for(lambda: self.js("return document.getElementById('key-dialog').open"), 30,
                 "the key dialog")
        self.el("#key-input").send_keys(key, Keys.ENTER)

    def test_asks_for_the_key_once(self):
        self.enter_key("wrong")
        wait_for(lambda: "refused" in self.el("#key-error").text, 10, "the refusal")
        self.enter_key("sesame")
        wait_for(lambda: self.el("#model-name").text == "specd-target-q8_0", 10, "the model id")
        self.send("import sys")
        self.assertTrue(self.wait_answer().find_element(By.CSS_SELECTOR, ".body").text)
        self.browser.get(self.url)  # the key is remembered
        wait_for(lambda: self.el("#model-name").text == "specd-target-q8_0", 10, "the model id")
        self.assertFalse(self.js("return document.getElementById('key-dialog').open"))


class ServerGoneTest(PageCase):
    def setUp(self):
        self.browser.get(self.url)
        self.js("localStorage.clear()")
        self.open_page()

    def test_message_stays_when_the_server_is_gone(self):
        self.assert_stopped(self.server)
        self.send("is anyone there?")
        error = wait_for(lambda: self.el("#error").is_displayed() and self.el("#error"), 30,
                         "the error")
        self.assertIn("No answer", error.text)
        self.assertEqual(self.el("#input").get_attribute("value"), "is anyone there?")
        self.assertEqual(self.current_messages(), [])


@unittest.skipUnless(HAVE_QWEN, "needs the default pair in pretrained/ (scripts/get-models.sh)")
class DefaultPairTest(PageCase):
    """Answers that take seconds: stopping them, and the screenshot (prompt lookup first, the
    draft model where it finds nothing, so that all three colours show)."""
    server_args = ["-m", QWEN_TARGET, "-md", QWEN_DRAFT, "--parallel", "1",
                   "--spec-type", "draft+ngram"]

    def stop_mid_way(self, stop):
        self.set_field("max-tokens", 1500)
        self.send("Write a long, detailed history of programming languages, decade by decade.")
        wait_for(lambda: len(self.el(".message.assistant .body").text) > 40, 120, "some text")
        self.assertEqual(self.slots_in_use(self.server), 1)
        stop()
        answer = self.wait_answer(10)
        wait_for(lambda: self.slots_in_use(self.server) == 0, 5, "the server's slot to free")
        self.assertIn("stopped", answer.find_element(By.CSS_SELECTOR, ".stats").text)
        kept = self.current_messages()[1]["content"]
        self.assertTrue(kept)
        self.assertLess(len(kept), 3000)  # 1500 tokens would be far longer
        self.assertFalse(self.el("#stop").is_displayed())

    def test_stop_button_cancels_on_the_server(self):
        self.stop_mid_way(lambda: self.el("#stop").click())

    def test_escape_stops(self):
        self.stop_mid_way(lambda: self.el("#input").send_keys(Keys.ESCAPE))

    def test_screenshot(self):
        self.browser.set_window_size(1200, 900)
        self.set_field("temperature", 0)
        self.el("#settings summary").click()  # closed again, for the picture
        self.el("#show-sources").click()
        self.send("Write a Python function that checks whether a number is prime. Be brief.")
        self.wait_answer()
        self.record_first_token_gap("default pair")
        self.send("Add type hints to it.")
        answer = self.wait_answer()
        # The second answer copies the first one's code: prompt lookup drafts it.
        self.assertTrue(answer.find_elements(By.CSS_SELECTOR, ".body .s-l"))
        self.assertTrue(answer.find_elements(By.CSS_SELECTOR, ".body .s-d"))
        path = os.path.join(SHOT_DIR, "webui-chat.png")
        self.assertTrue(self.browser.save_screenshot(path))
        print(f"\nscreenshot: {path}", file=sys.stderr)
        if os.environ.get("SPECD_SCREENSHOT_TO"):
            shutil.copyfile(path, os.environ["SPECD_SCREENSHOT_TO"])

if __name__ == "__main__":
    unittest.main()
