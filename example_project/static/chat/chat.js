// The example chat page: plain JavaScript over the REST API, with the session cookie and
// the CSRF token. Replies stream in as Server-Sent Events read from a fetch() body.
(() => {
  "use strict";

  const config = JSON.parse(document.getElementById("page-config").textContent);
  const API = config.apiRoot;
  const $ = (id) => document.getElementById(id);
  const els = {
    banner: $("demo-banner"),
    provider: $("provider"),
    model: $("model"),
    models: $("models"),
    newChat: $("new-chat"),
    list: $("chat-list"),
    title: $("chat-title"),
    meta: $("chat-meta"),
    totals: $("chat-totals"),
    transcript: $("transcript"),
    status: $("status"),
    composer: $("composer"),
    prompt: $("prompt"),
    send: $("send"),
    stop: $("stop"),
  };
  const state = {
    chat: null,
    runs: [],
    running: false,
    controller: null,
    stopTimer: null,
    opening: 0,
    rated: new Map(), // reply message id -> the user's rating (1 or -1)
    rateable: new Set(), // the message ids that end a reply (the ones thumbs rate)
  };

  // -- markdown -----------------------------------------------------------------------------
  // Replies are markdown: rendered by the vendored markdown-it (raw HTML off), then cleaned
  // by the vendored DOMPurify (a short list of tags, no images, safe links only), so
  // nothing in a reply runs in the page. Without the libraries, replies show as text.
  const MARKDOWN_TAGS = [
    "p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote", "ul", "ol",
    "li", "a", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td",
  ];
  const markdown = typeof window.markdownit === "function"
    ? window.markdownit("commonmark", { html: false, linkify: false }).enable(["table", "strikethrough"])
    : null;
  const purify = window.DOMPurify && window.DOMPurify.isSupported ? window.DOMPurify : null;
  if (purify) {
    purify.addHook("afterSanitizeAttributes", (node) => {
      if (node.tagName === "A" && node.hasAttribute("href")) {
        node.setAttribute("rel", "noopener noreferrer nofollow");
        node.setAttribute("target", "_blank");
      }
    });
  }

  // `text` as sanitized HTML, or null when the libraries are missing
  function markdownHtml(text) {
    if (!markdown || !purify) return null;
    return purify.sanitize(markdown.render(text || ""), {
      ALLOWED_TAGS: MARKDOWN_TAGS,
      ALLOWED_ATTR: ["href", "title", "class", "start", "target", "rel"],
      ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
    });
  }

  // fill a message body with its rendered markdown (or the text as it is)
  function renderMarkdownInto(body, text) {
    const html = markdownHtml(text);
    if (html === null) {
      body.textContent = text || "";
      return;
    }
    body.innerHTML = html; // sanitized just above
    body.classList.add("markdown");
  }

  // -- small helpers ------------------------------------------------------------------------
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  function csrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  async function call(method, path, body, accept = "application/json", signal = undefined) {
    const headers = { Accept: accept, "X-CSRFToken": csrfToken() };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      signal,
    });
    if (response.status === 401 || response.status === 403) {
      const data = await response.clone().json().catch(() => ({}));
      if (/credentials|authenticat/i.test(data.detail || "")) window.location.reload();
    }
    return response;
  }

  async function json(method, path, body) {
    const response = await call(method, path, body);
    const data = await response.json().catch(() => null);
    if (!response.ok) throw new Error(errorText(data, response.status));
    return data;
  }

  function errorText(data, status) {
    if (!data) return `HTTP ${status}`;
    if (typeof data.detail === "string") return data.detail;
    return Object.entries(data)
      .map(([key, value]) => `${key}: ${[].concat(value).join(" ")}`)
      .join("; ");
  }

  const number = new Intl.NumberFormat("en");

  function tokensText(tokens) {
    if (!tokens || !Object.keys(tokens).length) return "tokens not reported";
    const parts = [
      `${number.format(tokens.input_tokens || 0)} in`,
      `${number.format(tokens.output_tokens || 0)} out`,
    ];
    if (tokens.cache_read_tokens) parts.push(`${number.format(tokens.cache_read_tokens)} cached`);
    if (tokens.thinking_tokens) parts.push(`${number.format(tokens.thinking_tokens)} thinking`);
    return `${parts.join(" · ")} tokens`;
  }

  // `estimated`: the counts are the app's estimate (a reply stopped before the vendor
  // reported its usage is billed for its estimated input and what streamed)
  function costText(cost, estimated) {
    if (cost === null || cost === undefined) return "cost unknown";
    const total = typeof cost === "object" ? cost.total : cost;
    if (total === undefined || total === null) return "cost unknown";
    const value = Number(total);
    const text = `$${value < 0.01 && value > 0 ? value.toPrecision(3) : value.toFixed(4)}`;
    return estimated ? `≈ ${text} (estimated)` : text;
  }

  function argumentsText(value) {
    if (typeof value === "string") {
      try {
        return JSON.stringify(JSON.parse(value));
      } catch (_) {
        return value;
      }
    }
    return JSON.stringify(value);
  }

  function setStatus(text) {
    els.status.textContent = text;
  }

  // -- rendering stored messages ------------------------------------------------------------
  function messageItem(role, label) {
    return el(
      "li",
      { class: `msg ${role}` },
      el("span", { class: "who", text: label }),
    );
  }

  function thinkingBlock(text) {
    const p = el("p", { text });
    const details = el("details", { class: "thinking" }, el("summary", { text: "Thinking" }), p);
    return { details, p };
  }

  function toolCallBlock(call) {
    const block = el(
      "div",
      { class: "tool-call", "data-call-id": call.id || "" },
      el(
        "div",
        { class: "call" },
        "Tool call ",
        el("code", { text: call.name || "…" }),
        " ",
        el("code", { class: "args", text: argumentsText(call.arguments || {}) }),
      ),
    );
    if (call.result) {
      block.append(el("p", { class: "result", text: call.result.content }));
    } else if (call.approval === "denied") {
      block.append(el("p", { class: "pending", text: "Denied." }));
    } else if (call.pending) {
      block.append(el("p", { class: "pending", text: call.pending }));
    } else {
      block.append(el("p", { class: "pending", text: "Waiting for your approval." }));
      block.append(
        el(
          "div",
          { class: "decide" },
          el("button", {
            type: "button",
            class: "approve",
            text: "Approve",
            "aria-label": `Approve ${call.name}`,
            onclick: () => decide(call.id, "approve"),
          }),
          el("button", {
            type: "button",
            class: "deny",
            text: "Deny",
            "aria-label": `Deny ${call.name}`,
            onclick: () => decide(call.id, "deny"),
          }),
        ),
      );
    }
    return block;
  }

  // `cost` undefined: not known yet (a streamed step; the reloaded transcript has it)
  function usageLine(tokens, cost, estimated) {
    const price = cost === undefined ? "cost when done" : costText(cost, estimated);
    const counted = estimated ? `≈ ${tokensText(tokens)}` : tokensText(tokens);
    return el("div", { class: "usage", text: `${counted} · ${price}` });
  }

  // -- branches and feedback ----------------------------------------------------------------
  // "‹ 2/3 ›" on a message with alternatives (the other replies to its prompt, the other
  // versions of an edited prompt): the chat's active branch moves there, then reloads.
  function alternatives(m) {
    const ids = m.siblings || [];
    if (ids.length < 2) return null;
    const at = ids.indexOf(m.id);
    const step = (delta, label, symbol) =>
      el("button", {
        type: "button",
        class: "link alt",
        text: symbol,
        "aria-label": label,
        disabled: at + delta < 0 || at + delta >= ids.length,
        onclick: () => switchTo(ids[at + delta]),
      });
    return el(
      "span",
      { class: "alternatives", role: "group", "aria-label": "Alternatives" },
      step(-1, "Previous alternative", "‹"),
      el("span", { class: "alt-count", text: `${at + 1}/${ids.length}` }),
      step(1, "Next alternative", "›"),
    );
  }

  // a thumb drawn here (no icon font: it shows the same everywhere); down is up turned
  const THUMB =
    '<svg viewBox="0 0 24 24" width="16" height="16" aria-hidden="true" focusable="false">' +
    '<path d="M2.5 10.5h3.5v10h-3.5z M7.5 10.5 11 3.5c1.6 0 2.6 1.2 2.2 2.9l-.8 4.1h6.3' +
    'c1.5 0 2.5 1.4 2 2.8l-2 6.3c-.3.9-1.1 1.4-2 1.4H7.5z" ' +
    'stroke="currentColor" stroke-width="1.5" stroke-linejoin="round"/></svg>';

  function thumbs(m) {
    if (!state.rateable.has(m.id)) return null;
    const rating = state.rated.get(m.id) || 0;
    const thumb = (value, label) => {
      const button = el("button", {
        type: "button",
        class: `link thumb${value < 0 ? " down" : ""}${rating === value ? " chosen" : ""}`,
        title: label,
        "aria-label": label,
        "aria-pressed": rating === value ? "true" : "false",
        onclick: () => rate(m.id, rating === value ? 0 : value),
      });
      button.innerHTML = THUMB; // a constant of this file, no data in it
      return button;
    };
    return el(
      "span",
      { class: "thumbs", role: "group", "aria-label": "Feedback" },
      thumb(1, "Good reply"),
      thumb(-1, "Bad reply"),
    );
  }

  function messageActions(m) {
    const edit = m.role === "user"
      ? el("button", {
          type: "button",
          class: "link edit",
          text: "Edit",
          "aria-label": "Edit prompt",
          onclick: (event) => editMessage(m, event.target.closest("li")),
        })
      : null;
    const parts = [alternatives(m), edit, thumbs(m)].filter(Boolean);
    return parts.length ? el("div", { class: "msg-actions" }, ...parts) : null;
  }

  async function switchTo(messageId) {
    if (state.running) return;
    try {
      await json("POST", `${API}chats/${state.chat.id}/switch/`, { message: messageId });
      await refresh();
    } catch (error) {
      setStatus(`Could not switch: ${error.message}`);
    }
  }

  // `rating` 1 or -1 gives (or changes) the rating; 0 withdraws it
  async function rate(messageId, rating) {
    const path = `${API}chats/${state.chat.id}/messages/${messageId}/feedback/`;
    try {
      if (rating) await json("POST", path, { rating });
      else {
        const response = await call("DELETE", path);
        if (!response.ok && response.status !== 404) throw new Error(`HTTP ${response.status}`);
      }
      if (rating) state.rated.set(messageId, rating);
      else state.rated.delete(messageId);
      const item = els.transcript.querySelector(`li.msg[data-id="${messageId}"]`);
      const old = item && item.querySelector(".thumbs");
      if (old) old.replaceWith(thumbs({ id: messageId }));
    } catch (error) {
      setStatus(`Could not save the feedback: ${error.message}`);
    }
  }

  // Edit a prompt and send it again: it follows the same message the old one did, so the
  // chat branches there (the old prompt and its replies stay, one click away).
  function editMessage(m, item) {
    if (state.running || item.querySelector("form.edit")) return;
    const body = item.querySelector(".body");
    const box = el("textarea", { rows: 3, "aria-label": "Edited prompt" });
    box.value = m.content;
    const form = el(
      "form",
      { class: "edit" },
      box,
      el(
        "div",
        { class: "actions" },
        el("button", { type: "submit", class: "primary", text: "Send edited" }),
        el("button", {
          type: "button",
          text: "Cancel",
          onclick: () => {
            form.remove();
            body.hidden = false;
          },
        }),
      ),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const text = box.value;
      if (!text.trim() || state.running) return;
      form.remove();
      body.hidden = false;
      body.textContent = text;
      // what came after the old prompt is another branch now
      while (item.nextElementSibling) item.nextElementSibling.remove();
      streamRun(`${API}chats/${state.chat.id}/messages/`, { content: text, parent: m.parent });
    });
    body.hidden = true;
    body.after(form);
    box.focus();
  }

  // The user's ratings, and which messages end a reply, from the chat as the AI SDK
  // routes give it (each reply's `storedMessageId` and `feedback`).
  async function loadFeedback(chatId) {
    const rated = new Map();
    const rateable = new Set();
    try {
      for (const m of await json("GET", `${API}ui/chat/${chatId}/messages`)) {
        const meta = m.metadata || {};
        if (m.role !== "assistant" || !meta.storedMessageId) continue;
        rateable.add(meta.storedMessageId);
        if (meta.feedback) rated.set(meta.storedMessageId, meta.feedback.rating);
      }
    } catch (_) {
      // the transcript still shows, without thumbs
    }
    return { rated, rateable };
  }

  function renderMessage(m) {
    if (m.role === "tool") {
      const item = messageItem("tool", `tool result${m.tool_call_id ? ` · ${m.tool_call_id}` : ""}`);
      item.append(el("div", { class: "body", text: m.content }));
      return item;
    }
    const label = m.role === "assistant" ? `assistant · ${m.model_id || ""}` : m.role;
    const item = messageItem(m.role, label);
    item.dataset.id = m.id;
    if (m.thinking) item.append(thinkingBlock(m.thinking).details);
    const body = el("div", { class: "body" });
    if (m.role === "assistant") renderMarkdownInto(body, m.content);
    else body.textContent = m.content;
    item.append(body);
    for (const c of m.tool_calls || []) item.append(toolCallBlock(c));
    if (m.role === "assistant") item.append(usageLine(m.tokens, m.cost, m.estimated));
    const actions = messageActions(m);
    if (actions) item.append(actions);
    return item;
  }

  // -- how a run went, as a notice in the transcript ---------------------------------------
  // Runs that ended badly, or that are still to answer, say so where they happened. A run
  // awaiting approval needs none: its tool calls carry the Approve / Deny buttons.
  const ENDED_BADLY = ["failed", "cancelled", "interrupted"];

  function runNoticeText(run) {
    switch (run.status) {
      case "failed":
        return `Reply failed: ${run.error || run.error_type || "unknown error"}`;
      case "cancelled":
        return "Stopped";
      case "interrupted":
        return run.interrupt_reason ? `Interrupted (${run.interrupt_reason})` : "Interrupted";
      case "queued":
        return "Queued: the reply starts after the ones before it.";
      case "running":
        return "Answering…";
      default:
        return null;
    }
  }

  function runNotice(run, { live = false } = {}) {
    const text = runNoticeText(run);
    if (!text) return null;
    const failed = run.status === "failed";
    const item = el("li", {
      class: `notice run ${run.status}${failed ? " error" : ""}`,
      "data-run-id": run.id,
      text,
    });
    if (live && failed) item.setAttribute("role", "alert");
    return item;
  }

  // Where a run's notice goes: after its prompt and what the run stored (up to the next
  // user message); a continuation without a prompt, after what was stored before it ended.
  function runAnchor(run, shown, positions) {
    if (run.prompt !== null && run.prompt !== undefined) {
      if (!positions.has(run.prompt)) return null; // its prompt is not on the page
      let at = positions.get(run.prompt);
      while (at + 1 < shown.length && shown[at + 1].role !== "user") at += 1;
      return at;
    }
    const end = Date.parse(run.finished_at || run.started_at || run.created_at);
    let at = -1;
    shown.forEach((m, i) => {
      if (Date.parse(m.created_at) <= end) at = i;
    });
    return at;
  }

  function renderTranscript(messages, runs = []) {
    const answered = new Set();
    for (const m of messages) {
      for (const c of m.tool_calls || []) if (c.result) answered.add(c.result.message_id);
    }
    const shown = messages.filter((m) => !answered.has(m.id));
    const positions = new Map(shown.map((m, i) => [m.id, i]));
    const notices = new Map(); // position -> notices after it, oldest run first
    for (const run of [...runs].reverse()) {
      const item = runNotice(run);
      if (!item) continue;
      const at = runAnchor(run, shown, positions);
      if (at === null) continue;
      if (!notices.has(at)) notices.set(at, []);
      notices.get(at).push(item);
    }
    const items = [...(notices.get(-1) || [])];
    shown.forEach((m, i) => items.push(renderMessage(m), ...(notices.get(i) || [])));
    els.transcript.replaceChildren(...items);
    const last = shown[shown.length - 1];
    if (last && last.role === "assistant" && !(last.tool_calls || []).some((c) => !c.result)) {
      const item = items.find((node) => node.dataset && node.dataset.id === String(last.id));
      let actions = item && item.querySelector(".msg-actions");
      if (item && !actions) item.append((actions = el("div", { class: "msg-actions" })));
      if (actions) {
        actions.append(
          el("button", {
            type: "button",
            class: "link regenerate",
            text: "Regenerate",
            "aria-label": "Regenerate this reply",
            onclick: regenerate,
          }),
        );
      }
    }
    if (!messages.length) {
      els.transcript.append(
        el("li", {
          class: "notice",
          "data-empty": true,
          text: "No messages yet: write the first one below.",
        }),
      );
    }
    scrollDown();
  }

  function scrollDown() {
    els.transcript.scrollTop = els.transcript.scrollHeight;
  }

  function notice(text, isError = false) {
    const item = el("li", { class: isError ? "notice error" : "notice", text });
    if (isError) item.setAttribute("role", "alert");
    els.transcript.append(item);
    scrollDown();
    return item;
  }

  // -- loading ------------------------------------------------------------------------------
  async function allMessages(chatId) {
    let url = `${API}chats/${chatId}/messages/?page_size=200`;
    const out = [];
    while (url) {
      const page = await json("GET", url);
      out.push(...page.results);
      url = page.next;
    }
    return out;
  }

  // The newest page of runs is enough: older ones are seldom scrolled back to.
  async function latestRuns(chatId) {
    try {
      const page = await json("GET", `${API}chats/${chatId}/runs/?page_size=50`);
      return page.results;
    } catch (_) {
      return []; // the transcript still shows, without the notices of its runs
    }
  }

  async function loadChat(chatId) {
    const [chat, messages, runs, feedback] = await Promise.all([
      json("GET", `${API}chats/${chatId}/`),
      allMessages(chatId),
      latestRuns(chatId),
      loadFeedback(chatId),
    ]);
    return [chat, messages, runs, feedback];
  }

  async function loadChats() {
    const page = await json("GET", `${API}chats/?page_size=100`);
    els.list.replaceChildren();
    if (!page.results.length) {
      els.list.append(el("li", { class: "empty", text: "No chats yet." }));
    }
    for (const chat of page.results) {
      const link = el(
        "a",
        {
          href: `?chat=${chat.id}`,
          "aria-current": state.chat && state.chat.id === chat.id ? "page" : null,
          onclick: (event) => {
            event.preventDefault();
            openChat(chat.id);
          },
        },
        chat.pinned ? el("span", { class: "pin", title: "Pinned", text: "📌 " }) : null,
        chat.title || `Chat ${chat.id}`,
        el("small", {
          text: `${chat.provider}/${chat.model_id} · ${chat.message_count} messages · ${costText(
            chat.total_cost,
          )}`,
        }),
        chat.tags && chat.tags.length
          ? el("small", { class: "tags", text: chat.tags.map((t) => `#${t}`).join(" ") })
          : null,
      );
      // the list's order is the API's: pinned first; archived chats are not in it
      els.list.append(el("li", { class: chat.pinned ? "pinned" : null }, link));
    }
    return page.results;
  }

  async function loadTotals() {
    if (!state.chat) return;
    const usage = await json("GET", `${API}chats/${state.chat.id}/usage/`);
    const estimated = usage.estimated > 0;
    els.totals.textContent = `Chat total: ${tokensText(usage.tokens)} · ${costText(
      usage.cost,
      estimated,
    )}`;
  }

  function showChat(chat) {
    state.chat = chat;
    els.title.textContent = chat.title || `Chat ${chat.id}`;
    const admin = config.adminChangeUrl.replace("{id}", chat.id);
    els.meta.replaceChildren(
      `${chat.provider} / ${chat.model_id} · `,
      el("a", { href: admin, text: "open in the admin" }),
    );
    els.banner.hidden = chat.provider !== "demo";
    els.composer.hidden = false;
  }

  async function openChat(chatId, { push = true } = {}) {
    if (state.running) {
      setStatus("Wait for the reply to finish, or stop it, before switching chats.");
      return;
    }
    const ticket = ++state.opening; // a later click wins over a slower earlier one
    const [chat, messages, runs, feedback] = await loadChat(chatId);
    if (ticket !== state.opening) return;
    Object.assign(state, feedback);
    showChat(chat);
    state.runs = runs;
    if (push) history.pushState({ chat: chat.id }, "", `?chat=${chat.id}`);
    renderTranscript(messages, runs);
    await Promise.all([loadTotals(), loadChats()]);
    setStatus(chatStatusText(chat));
    els.prompt.focus();
    revealDecision();
  }

  // A tool call waiting for approval is brought on screen: on a phone the transcript is
  // part of the page, and its end (where the card is) may lie below the fold.
  function revealDecision() {
    const decide = els.transcript.querySelector(".decide");
    if (decide) decide.closest(".tool-call").scrollIntoView({ block: "nearest" });
  }

  function chatStatusText(chat) {
    if (chat.status === "running") return "A reply is being written elsewhere; reload to see it.";
    if (chat.status === "queued") return "A reply is queued; reload to see it.";
    if (els.transcript.querySelector(".decide")) return "Waiting for your approval.";
    return "";
  }

  async function refresh() {
    const ticket = ++state.opening;
    const [chat, messages, runs, feedback] = await loadChat(state.chat.id);
    if (ticket !== state.opening) return;
    Object.assign(state, feedback);
    showChat(chat);
    state.runs = runs;
    renderTranscript(messages, runs);
    await Promise.all([loadTotals(), loadChats()]);
  }

  // -- Server-Sent Events over fetch ------------------------------------------------------
  function parseFrame(raw) {
    let event = "message";
    let id = null;
    const data = [];
    for (const line of raw.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
      else if (field === "id") id = value;
    }
    if (!data.length) return null;
    let payload;
    try {
      payload = JSON.parse(data.join("\n"));
    } catch (_) {
      payload = data.join("\n");
    }
    return { event, id, data: payload };
  }

  async function readEvents(response, onEvent) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end = buffer.indexOf("\n\n");
      while (end >= 0) {
        const frame = parseFrame(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (frame) onEvent(frame);
        end = buffer.indexOf("\n\n");
      }
    }
  }

  // -- a run as it streams ------------------------------------------------------------------
  class LiveRun {
    constructor() {
      this.step = null;
      this.steps = [];
      this.notices = []; // shown again after the transcript is reloaded
      this.pendingCalls = [];
      this.finished = null;
      this.runId = null;
      this.error = null; // the safe message of an `error` event
      this.interruptReason = null;
    }

    newStep() {
      const item = messageItem("assistant", `assistant · ${state.chat.model_id}`);
      item.classList.add("streaming");
      const body = el("div", { class: "body" });
      item.append(body);
      els.transcript.append(item);
      this.step = { item, body, text: "", thinking: null, calls: {}, closed: false };
      this.steps.push(this.step);
      return this.step;
    }

    current() {
      if (!this.step || this.step.closed) {
        if (this.step) this.step.item.classList.remove("streaming");
        this.newStep();
        if (this.pendingCalls.length) this.fetchResults();
      }
      return this.step;
    }

    callBlock(key, call) {
      const step = this.current();
      let block = step.calls[key];
      if (!block) {
        block = toolCallBlock({ ...call, pending: "Calling…" });
        step.calls[key] = block;
        step.item.append(block);
      }
      return block;
    }

    note(text, isError = false) {
      this.notices.push([text, isError]);
      notice(text, isError);
    }

    // The run ended badly: say so at once. The reloaded transcript shows the same notice
    // from the run itself, so it is not kept among the notices shown again.
    outcome(data) {
      if (!ENDED_BADLY.includes(data.status)) return;
      const run = {
        id: data.run_id || this.runId || "",
        status: data.status,
        error: data.error || this.error,
        interrupt_reason: this.interruptReason,
      };
      const item = runNotice(run, { live: true });
      if (item) els.transcript.append(item);
    }

    // A retry starts over: its text replaces what the failed attempt had streamed.
    dropPartial() {
      for (const step of this.steps) step.item.remove();
      this.steps = [];
      this.step = null;
      this.error = null;
      this.interruptReason = null;
    }

    handle({ event, data }) {
      switch (event) {
        case "text_delta": {
          const step = this.current();
          step.text += data.content;
          step.body.append(data.content); // as text while it streams, markdown once done
          break;
        }
        case "reasoning_delta": {
          const step = this.current();
          if (!step.thinking) {
            step.thinking = thinkingBlock("");
            step.item.insertBefore(step.thinking.details, step.body);
          }
          step.thinking.p.append(data.content);
          break;
        }
        case "tool_call_delta": {
          if (data.name) this.callBlock(data.item_id, { name: data.name, arguments: "" });
          break;
        }
        case "tool_call_done": {
          const block = this.callBlock(data.item_id || data.call_id, data);
          block.dataset.callId = data.call_id;
          block.querySelector(".call code").textContent = data.name;
          block.querySelector(".args").textContent = argumentsText(data.arguments);
          block.querySelector(".pending").textContent = "Running…";
          this.pendingCalls.push(data.call_id);
          break;
        }
        case "token_usage_done": {
          const step = this.current();
          step.item.append(usageLine(data.token_usage, data.cost));
          break;
        }
        case "finish_reason_done": {
          if (this.step) {
            this.step.closed = true;
            if (this.step.text) renderMarkdownInto(this.step.body, this.step.text);
          }
          break;
        }
        case "run_started": {
          this.runId = data.run_id || null;
          break;
        }
        case "interrupt": {
          if (data.reason === "approval_required") setStatus("Waiting for your approval.");
          else this.interruptReason = data.reason || ""; // said when the run finishes
          break;
        }
        case "guardrail_tripwire": {
          this.note(`Blocked by ${data.guardrail_id}${data.reason ? `: ${data.reason}` : ""}.`, true);
          break;
        }
        case "error": {
          this.error = data.message || "unknown error"; // said when the run finishes
          break;
        }
        case "run_finished": {
          if (data.status === "retrying") {
            this.dropPartial();
            setStatus("Retrying…");
            break;
          }
          this.finished = data;
          this.outcome(data);
          break;
        }
        default:
          break;
      }
      scrollDown();
    }

    // Tool results are stored between two steps: show them as soon as the next one starts.
    async fetchResults() {
      const ids = this.pendingCalls.splice(0);
      try {
        const page = await json(
          "GET",
          `${API}chats/${state.chat.id}/messages/?from=end&page_size=50`,
        );
        for (const m of page.results) {
          for (const c of m.tool_calls || []) {
            if (!ids.includes(c.id) || !c.result) continue;
            const block = els.transcript.querySelector(`[data-call-id="${CSS.escape(c.id)}"]`);
            if (!block) continue;
            const pending = block.querySelector(".pending");
            const result = el("p", { class: "result", text: c.result.content });
            if (pending) pending.replaceWith(result);
          }
        }
      } catch (_) {
        // shown after the run anyway
      }
    }

    end() {
      if (this.step) this.step.item.classList.remove("streaming");
      if (this.finished || this.notices.length) return;
      // the stream ended without run_finished: say what it did say
      if (this.error) this.note(`Reply failed: ${this.error}`, true);
      else if (this.interruptReason === "cancelled") this.note("Stopped");
      else if (this.interruptReason !== null) {
        this.note(this.interruptReason ? `Interrupted (${this.interruptReason})` : "Interrupted");
      }
    }
  }

  function setRunning(running) {
    state.running = running;
    els.send.disabled = running;
    els.stop.hidden = !running;
    els.stop.disabled = false;
    els.prompt.setAttribute("aria-busy", running ? "true" : "false");
    setStatus(running ? "The assistant is replying…" : "");
  }

  // The AI SDK's UI message chunks (POST ui/chat) as the API's own events, for LiveRun:
  // what the page shows while a regenerated reply streams (the reload after shows it all)
  function uiChunkAsEvent({ data }) {
    if (!data || typeof data !== "object") return null;
    switch (data.type) {
      case "text-delta":
        return { event: "text_delta", data: { content: data.delta } };
      case "reasoning-delta":
        return { event: "reasoning_delta", data: { content: data.delta } };
      case "tool-input-available":
        return {
          event: "tool_call_done",
          data: { call_id: data.toolCallId, name: data.toolName, arguments: data.input },
        };
      case "finish-step":
        return { event: "finish_reason_done", data: {} };
      case "error":
        return { event: "error", data: { message: data.errorText } };
      case "finish":
        return { event: "run_finished", data: { status: (data.messageMetadata || {}).status } };
      default:
        return null;
    }
  }

  async function refusalText(response) {
    const body = await response.text().catch(() => "");
    try {
      return errorText(JSON.parse(body), response.status);
    } catch (_) {
      return body || `HTTP ${response.status}`;
    }
  }

  async function streamRun(path, body, { translate = (frame) => frame, accept = "text/event-stream" } = {}) {
    const live = new LiveRun();
    state.controller = new AbortController();
    els.transcript.setAttribute("aria-busy", "true");
    setRunning(true);
    try {
      const response = await call("POST", path, body, accept, state.controller.signal);
      const type = response.headers.get("Content-Type") || "";
      if (!response.ok) {
        live.note(await refusalText(response), true);
      } else if (type.startsWith("text/event-stream")) {
        await readEvents(response, (frame) => {
          const event = translate(frame);
          if (event) live.handle(event);
        });
      }
    } catch (error) {
      if (error.name === "AbortError") live.note("Stopped");
      else live.note(`Connection lost: ${error.message}`, true);
    } finally {
      clearTimeout(state.stopTimer);
      live.end();
      setRunning(false);
    }
    try {
      await refresh();
    } catch (error) {
      notice(`Could not reload the chat: ${error.message}`, true);
    }
    const latest = state.runs[0];
    for (const [text, isError] of live.notices) {
      // the reloaded run says it already
      if (text.startsWith("Stopped") && latest && latest.status === "cancelled") continue;
      notice(text, isError);
    }
    if (els.transcript.querySelector(".decide")) setStatus("Waiting for your approval.");
    revealDecision();
    els.transcript.setAttribute("aria-busy", "false");
  }

  // -- actions ------------------------------------------------------------------------------
  async function sendMessage(text) {
    const chat = state.chat;
    // an untitled chat is titled by the server after its first reply (LLMCHAT["TITLES"]);
    // the reload after the stream shows it, here and in the list
    const empty = els.transcript.querySelector("[data-empty]");
    if (empty) empty.remove();
    const item = messageItem("user", "user");
    item.append(el("div", { class: "body", text }));
    els.transcript.append(item);
    scrollDown();
    await streamRun(`${API}chats/${chat.id}/messages/`, { content: text });
  }

  // Answer the last prompt again; the old reply stays, as an alternative of the new one
  async function regenerate() {
    if (state.running) return;
    const old = els.transcript.querySelectorAll("li.msg.assistant, li.msg.tool, li.notice.run");
    const users = els.transcript.querySelectorAll("li.msg.user");
    const prompt = users[users.length - 1];
    for (const item of old) {
      // what followed the last prompt makes room for the new reply
      if (prompt && prompt.compareDocumentPosition(item) & Node.DOCUMENT_POSITION_FOLLOWING) {
        item.remove();
      }
    }
    const body = { id: String(state.chat.id), messages: [], trigger: "regenerate-message" };
    // the AI SDK's transport asks for any type: its stream, or a refusal as text
    await streamRun(`${API}ui/chat`, body, { translate: uiChunkAsEvent, accept: "*/*" });
  }

  async function decide(callId, decision) {
    if (state.running) return;
    for (const button of els.transcript.querySelectorAll(".decide button")) button.disabled = true;
    const path = `${API}chats/${state.chat.id}/tool-calls/${encodeURIComponent(callId)}/${decision}/`;
    await streamRun(path, undefined);
  }

  async function stop() {
    if (!state.running) return;
    els.stop.disabled = true;
    setStatus("Stopping…");
    const response = await call("POST", `${API}chats/${state.chat.id}/cancel/`).catch(() => null);
    // the stream ends with an interrupt; if it does not come soon, hang up
    const wait = response && response.ok ? 5000 : 0;
    state.stopTimer = setTimeout(() => state.controller && state.controller.abort(), wait);
  }

  function fillModels() {
    const provider = config.providers.find((p) => p.name === els.provider.value);
    els.model.value = provider ? provider.model : "";
    els.models.replaceChildren(...(provider ? provider.models : []).map((m) => el("option", { value: m })));
  }

  async function createChat(event) {
    event.preventDefault();
    if (state.running) {
      setStatus("Wait for the reply to finish, or stop it, before starting a chat.");
      return;
    }
    const body = { provider: els.provider.value, model_id: els.model.value.trim() };
    body.tools = config.demoTools;
    try {
      const chat = await json("POST", `${API}chats/`, body);
      await openChat(chat.id);
    } catch (error) {
      setStatus(`Could not start the chat: ${error.message}`);
    }
  }

  // -- wiring -------------------------------------------------------------------------------
  for (const p of config.providers) {
    els.provider.append(el("option", { value: p.name, text: p.name === "demo" ? "demo (offline)" : p.name }));
  }
  fillModels();
  els.provider.addEventListener("change", fillModels);
  els.newChat.addEventListener("submit", createChat);
  els.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = els.prompt.value;
    if (!text.trim() || state.running || !state.chat) return;
    els.prompt.value = "";
    sendMessage(text);
  });
  els.prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      els.composer.requestSubmit();
    }
  });
  els.stop.addEventListener("click", stop);
  window.addEventListener("popstate", () => {
    const id = new URLSearchParams(window.location.search).get("chat");
    if (id) openChat(id, { push: false });
  });

  (async () => {
    const opened = state.opening;
    try {
      const chats = await loadChats();
      // a chat the user opened or started meanwhile wins over the one shown by default
      if (state.opening !== opened) return;
      const wanted = new URLSearchParams(window.location.search).get("chat");
      if (wanted) await openChat(wanted, { push: false });
      else if (chats.length) await openChat(chats[0].id, { push: false });
      else {
        els.transcript.replaceChildren(
          el("li", { class: "notice", text: "Start a chat with the form on the left." }),
        );
      }
    } catch (error) {
      setStatus(`Could not load the chats: ${error.message}`);
    }
  })();
})();
