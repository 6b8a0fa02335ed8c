// specd's chat page: conversations kept in the browser's local storage, answers streamed from
// /v1/chat/completions (server-sent events) with specd's token sources, and the speculation
// figures of each answer. No framework: the page is small, and it is served from the binary.
"use strict";

(() => {
  const STORE_KEY = "specd.chat.v1";
  const API_KEY_KEY = "specd.apiKey";
  const NEW_TITLE = "New conversation";
  const $ = (id) => document.getElementById(id);

  let state = loadState();
  let apiKey = localStorage.getItem(API_KEY_KEY) || "";
  let modelId = "";
  let running = null;                  // {controller, answer} while an answer streams
  const elementOf = new WeakMap();     // message -> its element
  const codeBlocksOf = new WeakMap();  // element -> its code blocks' text
  let saveTimer = 0;

  // ---- state and local storage ----------------------------------------------------------------

  function newConversation(s) {
    const conversation = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6),
                           title: NEW_TITLE, messages: [] };
    s.conversations.unshift(conversation);
    s.current = conversation.id;
    return conversation;
  }

  function loadState() {
    let s = null;
    try { s = JSON.parse(localStorage.getItem(STORE_KEY) || "null"); } catch (e) { s = null; }
    if (!s || !Array.isArray(s.conversations)) s = { conversations: [] };
    s.settings = Object.assign({ system: "", temperature: 0.7, top_p: 0.95, max_tokens: "",
                                 show_sources: false }, s.settings || {});
    s.drafts = s.drafts || {};
    // An answer that was streaming when the page went away ends as it was.
    for (const c of s.conversations) for (const m of c.messages) if (m.pending) { m.pending = false; m.stopped = true; }
    if (!s.conversations.length) newConversation(s);
    if (!s.conversations.some((c) => c.id === s.current)) s.current = s.conversations[0].id;
    return s;
  }

  function save() {
    clearTimeout(saveTimer);
    saveTimer = 0;
    try {
      localStorage.setItem(STORE_KEY, JSON.stringify(state));
    } catch (e) {
      showError("Could not save the conversation in the browser: " + e.message);
    }
  }

  // While an answer streams: saved at most every 300 ms.
  function saveSoon() {
    if (!saveTimer) saveTimer = setTimeout(save, 300);
  }

  const current = () => state.conversations.find((c) => c.id === state.current);

  // ---- rendering -------------------------------------------------------------------------------

  function renderConversations() {
    const list = $("conversations");
    list.textContent = "";
    for (const c of state.conversations) {
      const li = document.createElement("li");
      li.className = c.id === state.current ? "current" : "";
      li.dataset.id = c.id;
      const title = document.createElement("span");
      title.className = "title";
      title.textContent = c.title;
      const remove = document.createElement("button");
      remove.type = "button";
      remove.className = "delete";
      remove.title = "Delete this conversation";
      remove.textContent = "\u00d7";
      li.append(title, remove);
      list.append(li);
    }
  }

  function renderMessages() {
    const box = $("messages");
    box.textContent = "";
    for (const m of current().messages) box.append(messageElement(m));
    renderActions();
    box.scrollTop = box.scrollHeight;
  }

  // Regenerate is offered on the last answer only, and not while one streams.
  function renderActions() {
    const answers = document.querySelectorAll("#messages .message.assistant");
    answers.forEach((el, i) => {
      el.querySelector(".regenerate").hidden = i !== answers.length - 1 || !!running;
    });
  }

  function messageElement(m) {
    const el = document.createElement("div");
    el.className = "message " + m.role;
    const role = document.createElement("div");
    role.className = "role";
    role.textContent = m.role === "user" ? "You" : "Assistant";
    const body = document.createElement("div");
    body.className = "body";
    el.append(role, body);
    if (m.role === "assistant") {
      const stats = document.createElement("div");
      stats.className = "stats";
      const actions = document.createElement("div");
      actions.className = "actions";
      actions.innerHTML = '<button type="button" class="copy-answer">Copy answer</button>' +
                          '<button type="button" class="regenerate">Regenerate</button>';
      el.append(stats, actions);
    }
    elementOf.set(m, el);
    updateMessage(m);
    return el;
  }

  function updateMessage(m) {
    const el = elementOf.get(m);
    if (!el) return;
    const body = el.querySelector(".body");
    if (m.role === "user") {
      body.textContent = m.content;
      return;
    }
    el.classList.toggle("streaming", !!m.pending);
    const rendered = SpecdMarkdown.render(m.content, m.sources);
    body.innerHTML = rendered.html;
    codeBlocksOf.set(el, rendered.codeBlocks);
    el.querySelector(".stats").innerHTML = statsHtml(m);
  }

  // Under an answer: tokens per second, tokens by source, drafted / accepted and acceptance.
  function statsHtml(m) {
    const parts = [];
    const bySource = { draft: 0, lookup: 0, target: 0 };
    let tokens = 0;
    for (const run of m.sources || []) {
      bySource[run.source] = (bySource[run.source] || 0) + (run.n_tokens || 0);
      tokens += run.n_tokens || 0;
    }
    const usage = m.usage, spec = m.specd;
    if (usage) tokens = usage.completion_tokens;
    let seconds = 0;
    if (spec && spec.t_last_token_ms > spec.t_first_token_ms) {
      seconds = (spec.t_last_token_ms - spec.t_first_token_ms) / 1000;
    } else if (m.t_last_ms > m.t_first_ms) {
      seconds = (m.t_last_ms - m.t_first_ms) / 1000;
    }
    if (tokens > 1 && seconds > 0) parts.push(`<span class="tps">${((tokens - 1) / seconds).toFixed(1)} tok/s</span>`);
    if (tokens > 0) parts.push(`${tokens} tokens`);
    if (spec) {
      const pct = spec.n_drafted > 0 ? ` (${(100 * spec.acceptance_rate).toFixed(0)}%)` : "";
      parts.push(`<span class="acceptance">drafted ${spec.n_drafted} · accepted ${spec.n_accepted}${pct}</span>`);
    } else if (tokens > 0 && m.sources && m.sources.length) {
      parts.push(`accepted ${bySource.draft + bySource.lookup}`);
    }
    if (m.sources && m.sources.length) {
      parts.push(`<span class="by-source">draft ${bySource.draft} · lookup ${bySource.lookup} · target ${bySource.target}</span>`);
    }
    if (m.stopped) parts.push("stopped");
    else if (m.finish_reason === "length") parts.push("cut at max tokens");
    if (m.error) parts.push(`<span class="bad">${SpecdMarkdown.escapeHtml(m.error)}</span>`);
    return parts.join(" · ");
  }

  function showError(text) {
    const box = $("error");
    box.textContent = text;
    box.hidden = !text;
  }

  function setRunning(on) {
    $("send").hidden = on;
    $("stop").hidden = !on;
  }

  function scrollToEnd() {
    const box = $("messages");
    if (box.scrollHeight - box.scrollTop - box.clientHeight < 120) box.scrollTop = box.scrollHeight;
  }

  // ---- the server ------------------------------------------------------------------------------

  function headers() {
    const h = { "Content-Type": "application/json" };
    if (apiKey) h.Authorization = "Bearer " + apiKey;
    return h;
  }

  async function errorText(res) {
    try {
      const j = await res.json();
      if (j.error && j.error.message) return `${res.status}: ${j.error.message}`;
    } catch (e) { /* not JSON */ }
    return `${res.status} ${res.statusText}`;
  }

  // Asks for the API key (once: it is kept in local storage); resolves when one is given.
  function askKey(message) {
    const dialog = $("key-dialog");
    $("key-error").textContent = message || "";
    $("key-input").value = "";
    if (!dialog.open) dialog.showModal();
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => {
        apiKey = $("key-input").value.trim();
        localStorage.setItem(API_KEY_KEY, apiKey);
        resolve();
      }, { once: true });
    });
  }

  // fetch with the key; a 401 asks for the key and tries again.
  async function authorizedFetch(url, options) {
    for (let attempt = 0; ; attempt++) {
      const res = await fetch(url, Object.assign({}, options, { headers: headers() }));
      if (res.status !== 401) return res;
      await askKey(attempt === 0 && !apiKey ? "" : "That key was refused; try again.");
    }
  }

  async function watchServer() {
    const stateEl = $("server-state");
    for (;;) {
      try {
        const res = await fetch("/health");
        if (res.ok) break;
        stateEl.textContent = res.status === 503 ? "loading the model…" : `health: ${res.status}`;
      } catch (e) {
        stateEl.textContent = "server unreachable, retrying…";
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
    stateEl.textContent = "";
    try {
      await describeServer(stateEl);
    } catch (e) {
      stateEl.textContent = "could not read the server's model: " + e.message;
    }
  }

  // The model's id and whether the server speculates, in the header.
  async function describeServer(stateEl) {
    const models = await authorizedFetch("/v1/models", {});
    if (models.ok) {
      modelId = (await models.json()).data[0].id;
      $("model-name").textContent = modelId;
      document.title = modelId + " · specd chat";
    }
    const props = await authorizedFetch("/props", {});
    if (props.ok) {
      const p = await props.json();
      const params = (p.default_generation_settings || {}).params || {};
      stateEl.textContent = params.speculative ? "speculative decoding on" : "speculative decoding off";
    }
  }

  function requestBody(conversation) {
    const s = state.settings;
    const messages = [];
    if (s.system.trim()) messages.push({ role: "system", content: s.system });
    for (const m of conversation.messages) {
      if (m.pending || (m.role === "assistant" && !m.content)) continue;
      messages.push({ role: m.role, content: m.content });
    }
    const body = { messages, stream: true, stream_options: { include_usage: true },
                   return_token_sources: true };
    if (modelId) body.model = modelId;
    const temperature = parseFloat(s.temperature), topP = parseFloat(s.top_p), maxTokens = parseInt(s.max_tokens, 10);
    if (!isNaN(temperature)) body.temperature = temperature;
    if (!isNaN(topP)) body.top_p = topP;
    if (maxTokens > 0) body.max_tokens = maxTokens;
    return body;
  }

  // One server-sent event's data into the answer.
  function takeEvent(answer, data) {
    if (data === "[DONE]") return;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(chunk.error.message || "the server reported an error");
    const now = performance.now();
    for (const choice of chunk.choices || []) {
      const text = (choice.delta && choice.delta.content) || "";
      if (text) {
        if (answer.t_first_ms === undefined) answer.t_first_ms = now;
        answer.t_last_ms = now;
        answer.content += text;
        // A server that does not say (an older one, or an answer with tools): uncoloured.
        answer.sources.push(...(choice.token_sources || [{ text, source: "unknown", n_tokens: 0 }]));
      }
      if (choice.finish_reason) answer.finish_reason = choice.finish_reason;
    }
    if (chunk.usage) answer.usage = chunk.usage;
    if (chunk.specd) answer.specd = chunk.specd;
  }

  async function readStream(res, answer) {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        for (const line of event.split("\n")) {
          if (line.startsWith("data: ")) takeEvent(answer, line.slice(6));
        }
        updateMessage(answer);  // at once: the first token shows as its chunk arrives
        scrollToEnd();
        saveSoon();
      }
    }
  }

  // A failed request before any answer: the question goes back into the box, editable.
  function giveBack(conversation, question, answer, message) {
    conversation.messages.splice(conversation.messages.indexOf(answer) - 1, 2);
    // Before whatever was typed meanwhile, in the conversation it was asked in.
    const typed = state.drafts[conversation.id] || "";
    state.drafts[conversation.id] = typed ? question + "\n" + typed : question;
    if (conversation.id === state.current) $("input").value = state.drafts[conversation.id];
    showError(message);
    renderMessages();
  }

  async function send() {
    const input = $("input");
    const question = input.value;
    if (!question.trim() || running) return;
    const conversation = current();
    conversation.messages.push({ role: "user", content: question });
    if (conversation.title === NEW_TITLE) conversation.title = question.trim().slice(0, 48);
    input.value = "";
    state.drafts[conversation.id] = "";
    renderConversations();
    await answer(conversation, (answerMessage, message) =>
      giveBack(conversation, question, answerMessage, message));
  }

  // The last answer again: it is dropped and the conversation asked anew (a new seed).
  async function regenerate() {
    const conversation = current();
    const last = conversation.messages[conversation.messages.length - 1];
    if (running || !last || last.role !== "assistant") return;
    conversation.messages.pop();
    await answer(conversation, (answerMessage, message) => {
      conversation.messages.splice(conversation.messages.indexOf(answerMessage), 1);
      showError(message);
      renderMessages();
    });
  }

  // Streams a new answer to the conversation (its last message is the user's). `refused` takes
  // the answer back out when the server gives none.
  async function answer(conversation, refused) {
    showError("");
    const reply = { role: "assistant", content: "", sources: [], pending: true };
    conversation.messages.push(reply);
    save();
    renderMessages();
    const controller = new AbortController();
    running = { controller, answer: reply };
    setRunning(true);
    try {
      const res = await authorizedFetch("/v1/chat/completions", {
        method: "POST", body: JSON.stringify(requestBody(conversation)), signal: controller.signal });
      if (!res.ok) {
        refused(reply, "The server refused the message: " + await errorText(res));
        return;
      }
      await readStream(res, reply);
    } catch (e) {
      if (e.name === "AbortError") {
        reply.stopped = true;
      } else if (!reply.content) {
        refused(reply, "No answer: " + e.message);
        return;
      } else {
        reply.error = e.message;
      }
    } finally {
      reply.pending = false;
      running = null;
      setRunning(false);
      updateMessage(reply);
      renderActions();
      save();
    }
  }

  function stop() {
    if (running) running.controller.abort();
  }

  // ---- wiring ----------------------------------------------------------------------------------

  function switchTo(id) {
    state.current = id;
    $("input").value = state.drafts[id] || "";
    save();
    renderConversations();
    renderMessages();
  }

  function copyText(text, button, label = "Copy") {
    const done = () => { button.textContent = "Copied"; setTimeout(() => { button.textContent = label; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => fallbackCopy(text, done));
    } else {
      fallbackCopy(text, done);
    }
  }

  function fallbackCopy(text, done) {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
    done();
  }

  function bindSettings() {
    const s = state.settings;
    const fields = { "system-prompt": "system", temperature: "temperature", "top-p": "top_p", "max-tokens": "max_tokens" };
    for (const [id, key] of Object.entries(fields)) {
      $(id).value = s[key];
      $(id).addEventListener("input", () => { s[key] = $(id).value; save(); });
    }
    $("show-sources").checked = s.show_sources;
    document.body.classList.toggle("show-sources", s.show_sources);
    $("show-sources").addEventListener("change", () => {
      s.show_sources = $("show-sources").checked;
      document.body.classList.toggle("show-sources", s.show_sources);
      save();
    });
    $("forget-key").addEventListener("click", () => { apiKey = ""; localStorage.removeItem(API_KEY_KEY); });
  }

  function bindEvents() {
    const input = $("input");
    $("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
    $("stop").addEventListener("click", stop);
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
    });
    document.addEventListener("keydown", (e) => { if (e.key === "Escape" && running) { e.preventDefault(); stop(); } });
    input.addEventListener("input", () => { state.drafts[state.current] = input.value; save(); });
    $("new-chat").addEventListener("click", () => {
      const c = current();
      if (c.messages.length) newConversation(state);
      switchTo(state.current);
      input.focus();
    });
    $("conversations").addEventListener("click", (e) => {
      const li = e.target.closest("li");
      if (!li) return;
      if (e.target.classList.contains("delete")) {
        if (running || !confirm("Delete this conversation?")) return;
        state.conversations = state.conversations.filter((c) => c.id !== li.dataset.id);
        delete state.drafts[li.dataset.id];
        if (!state.conversations.length) newConversation(state);
        switchTo(state.conversations.some((c) => c.id === state.current) ? state.current : state.conversations[0].id);
      } else if (!running) {
        switchTo(li.dataset.id);
      }
    });
    $("messages").addEventListener("click", (e) => {
      if (e.target.closest("button.regenerate")) {
        regenerate();
        return;
      }
      const whole = e.target.closest("button.copy-answer");
      if (whole) {
        const index = [...$("messages").children].indexOf(whole.closest(".message"));
        copyText(current().messages[index].content, whole, "Copy answer");
        return;
      }
      const button = e.target.closest("button.copy");
      if (!button) return;
      const blocks = codeBlocksOf.get(button.closest(".message")) || [];
      copyText(blocks[Number(button.dataset.code)] || "", button);
    });
  }

  bindSettings();
  bindEvents();
  $("input").value = state.drafts[state.current] || "";
  renderConversations();
  renderMessages();
  watchServer();
})();
