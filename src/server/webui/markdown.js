// specd's chat page: Markdown to HTML for answers as they stream, with code highlighting and,
// per character, how the token that wrote it came (draft / lookup / target).
//
// Everything the model wrote is escaped; the renderer emits only the tags below, so no answer
// can inject markup or script (the server's Content-Security-Policy forbids inline script too).
// It works on offsets into the source text: markup characters are skipped, text is emitted
// through one function that wraps runs of one token source in a span, so colouring by source
// survives headings, lists, emphasis and highlighted code alike.
"use strict";

const SpecdMarkdown = (() => {
  const SOURCE_CLASS = { target: "s-t", draft: "s-d", lookup: "s-l" };

  function escapeHtml(s) {
    return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  // Keywords of the languages a coding model writes most (C, C++, JS/TS, Python, Rust, Go,
  // Java, shell): one set, since a wrong guess of language costs only a colour.
  const KEYWORDS = new Set(`alignas auto bool break case catch char class const constexpr continue
    default delete do double else enum explicit extern false final float for friend goto if inline
    int long namespace new noexcept nullptr operator override private protected public return short
    signed sizeof static struct switch template this throw true try typedef typename union unsigned
    using virtual void volatile while async await function let var yield import export from as of in
    instanceof typeof null undefined def elif except finally global is lambda nonlocal not or and
    pass raise with None True False self fn impl mut pub use mod crate trait where match loop move
    ref dyn go func chan defer map range select package type interface struct fallthrough
    extends implements super abstract boolean byte native synchronized transient then fi done esac
    echo local readonly print`.split(/\s+/));
  const HASH_COMMENT_LANGS = new Set(["python", "py", "sh", "bash", "shell", "zsh", "ruby", "rb",
    "yaml", "yml", "toml", "perl", "r", "makefile", "cmake", "dockerfile"]);

  // A renderer over one source text, with the token source of each UTF-16 unit (or null).
  class Renderer {
    constructor(src, sources) {
      this.src = src;
      this.sources = sources;  // Array of "target" | "draft" | "lookup", or null
      this.out = [];
      this.codeBlocks = [];    // the text of each fenced code block, for its copy button
    }

    // src[a, b) as escaped text, split into spans where the token source changes.
    text(a, b) {
      if (b <= a) return;
      if (!this.sources) {
        this.out.push(escapeHtml(this.src.slice(a, b)));
        return;
      }
      let start = a;
      for (let i = a + 1; i <= b; i++) {
        if (i === b || this.sources[i] !== this.sources[start]) {
          const cls = SOURCE_CLASS[this.sources[start]];  // none for text of unknown source
          const text = escapeHtml(this.src.slice(start, i));
          this.out.push(cls ? `<span class="${cls}">${text}</span>` : text);
          start = i;
        }
      }
    }

    // Inline Markdown of src[a, b): code spans, strong, emphasis, links.
    inline(a, b) {
      const s = this.src;
      let i = a, plain = a;
      const flush = (to) => { this.text(plain, to); };
      while (i < b) {
        const c = s[i];
        if (c === "`") {
          const j = s.indexOf("`", i + 1);
          if (j > 0 && j < b) {
            flush(i);
            this.out.push("<code>"); this.text(i + 1, j); this.out.push("</code>");
            i = plain = j + 1;
            continue;
          }
        } else if ((c === "*" || c === "_") && s[i + 1] === c) {
          const j = s.indexOf(c + c, i + 2);
          if (j > i + 2 && j < b && s[i + 2] !== " ") {
            flush(i);
            this.out.push("<strong>"); this.inline(i + 2, j); this.out.push("</strong>");
            i = plain = j + 2;
            continue;
          }
        } else if ((c === "*" || c === "_") && s[i + 1] && s[i + 1] !== " " && s[i + 1] !== c &&
                   (c === "*" || i === a || !/\w/.test(s[i - 1]))) {
          let j = s.indexOf(c, i + 1);
          while (j > 0 && j < b && c === "_" && /\w/.test(s[j + 1] || "")) j = s.indexOf(c, j + 1);
          if (j > i + 1 && j < b && s[j - 1] !== " ") {
            flush(i);
            this.out.push("<em>"); this.inline(i + 1, j); this.out.push("</em>");
            i = plain = j + 1;
            continue;
          }
        } else if (c === "[") {
          const m = /\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/y;
          m.lastIndex = i;
          const found = m.exec(s);
          if (found && i + found[0].length <= b) {
            flush(i);
            this.out.push(`<a href="${escapeHtml(found[2])}" target="_blank" rel="noopener noreferrer">`);
            this.inline(i + 1, i + 1 + found[1].length);
            this.out.push("</a>");
            i = plain = i + found[0].length;
            continue;
          }
        }
        i++;
      }
      flush(b);
    }

    // A fenced code block's body src[a, b), highlighted.
    code(a, b, lang) {
      const s = this.src.slice(a, b);
      const hash = HASH_COMMENT_LANGS.has(lang);
      const token = hash
        ? /(#[^\n]*)|("""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$)|"(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?)|(\b\d[\w.]*)|([A-Za-z_]\w*)/g
        : /(\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$))|("(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?|`(?:\\.|[^`\\])*`?)|(\b\d[\w.]*)|([A-Za-z_]\w*)/g;
      let last = 0, m;
      while ((m = token.exec(s)) !== null) {
        if (m[0].length === 0) { token.lastIndex++; continue; }
        let cls = m[1] ? "hl-c" : m[2] ? "hl-s" : m[3] ? "hl-n" : null;
        if (!cls && m[4]) {
          if (KEYWORDS.has(m[4])) cls = "hl-k";
          else if (s[token.lastIndex] === "(") cls = "hl-f";
        }
        if (!cls) continue;
        this.text(a + last, a + m.index);
        this.out.push(`<span class="${cls}">`);
        this.text(a + m.index, a + m.index + m[0].length);
        this.out.push("</span>");
        last = m.index + m[0].length;
      }
      this.text(a + last, b);
    }

    // The lines of the source as [start, end) offsets (end before the line break).
    lines() {
      const lines = [];
      let start = 0;
      for (;;) {
        const nl = this.src.indexOf("\n", start);
        if (nl < 0) { lines.push([start, this.src.length]); return lines; }
        lines.push([start, nl]);
        start = nl + 1;
      }
    }

    render() {
      const s = this.src, lines = this.lines();
      let i = 0;
      const lineText = (k) => s.slice(lines[k][0], lines[k][1]);
      const isBlank = (k) => /^\s*$/.test(lineText(k));
      const listItem = /^(\s*)([-*+]|\d{1,9}[.)])\s+/;
      while (i < lines.length) {
        const t = lineText(i), [a, b] = lines[i];
        let m;
        if ((m = /^\s*(```|~~~)\s*([\w+#.-]*)/.exec(t))) {
          const fence = m[1], lang = m[2].toLowerCase();
          let j = i + 1;
          while (j < lines.length && !lineText(j).trimStart().startsWith(fence)) j++;
          const from = i + 1 < lines.length ? lines[i + 1][0] : b;
          const to = j > i + 1 ? lines[j - 1][1] : from;
          const index = this.codeBlocks.length;
          this.codeBlocks.push(s.slice(from, to));
          this.out.push(`<div class="code"><div class="code-bar"><span>${escapeHtml(lang || "code")}</span>` +
                        `<button type="button" class="copy" data-code="${index}">Copy</button></div><pre><code>`);
          this.code(from, to, lang);
          this.out.push("</code></pre></div>");
          i = j + 1;
        } else if (isBlank(i)) {
          i++;
        } else if ((m = /^(#{1,6})\s+/.exec(t))) {
          const level = m[1].length;
          this.out.push(`<h${level}>`); this.inline(a + m[0].length, b); this.out.push(`</h${level}>`);
          i++;
        } else if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(t)) {
          this.out.push("<hr>");
          i++;
        } else if (/^\s*>/.test(t)) {
          this.out.push("<blockquote>");
          while (i < lines.length && /^\s*>/.test(lineText(i))) {
            const skip = /^\s*>\s?/.exec(lineText(i))[0].length;
            this.inline(lines[i][0] + skip, lines[i][1]);
            this.out.push("<br>");
            i++;
          }
          this.out.push("</blockquote>");
        } else if ((m = listItem.exec(t))) {
          const ordered = /\d/.test(m[2]);
          this.out.push(ordered ? "<ol>" : "<ul>");
          while (i < lines.length && (m = listItem.exec(lineText(i))) && /\d/.test(m[2]) === ordered) {
            this.out.push("<li>"); this.inline(lines[i][0] + m[0].length, lines[i][1]);
            i++;
            // Continuation lines: indented, not a new item.
            while (i < lines.length && !isBlank(i) && /^\s+\S/.test(lineText(i)) && !listItem.exec(lineText(i))) {
              this.out.push("<br>"); this.inline(lines[i][0], lines[i][1]);
              i++;
            }
            this.out.push("</li>");
          }
          this.out.push(ordered ? "</ol>" : "</ul>");
        } else {
          // A paragraph: lines up to a blank one or another block; line breaks kept, as chat
          // answers mean them.
          this.out.push("<p>");
          let first = true;
          while (i < lines.length && !isBlank(i) &&
                 (first || !/^\s*(```|~~~|#{1,6}\s|>|([-*+]|\d{1,9}[.)])\s)/.test(lineText(i)))) {
            if (!first) this.out.push("<br>");
            this.inline(lines[i][0], lines[i][1]);
            first = false;
            i++;
          }
          this.out.push("</p>");
        }
      }
      return { html: this.out.join(""), codeBlocks: this.codeBlocks };
    }
  }

  // runs: [{text, source}] (the server's token_sources) or null; returns {html, codeBlocks}.
  function render(text, runs) {
    let sources = null;
    if (runs && runs.length) {
      sources = new Array(text.length);
      let at = 0;
      for (const run of runs) {
        for (let k = 0; k < run.text.length && at < text.length; k++) sources[at++] = run.source;
      }
      while (at < text.length) sources[at++] = "unknown";
    }
    return new Renderer(text, sources).render();
  }

  return { render, escapeHtml };
})();

if (typeof module !== "undefined") module.exports = SpecdMarkdown;
