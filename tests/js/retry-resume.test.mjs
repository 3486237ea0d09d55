// A network that fails, under each server (tests/test_js_clients.py runs this file against
// runserver and uvicorn): a cut streaming POST retried by fetch-event-source, a cut UI
// stream resumed by the AI SDK, with the recipes of docs/frontends.md as they are written;
// and a denied call reloaded as the SDK validates it.
import assert from "node:assert/strict";
import { test } from "node:test";

import { fetchEventSource } from "@microsoft/fetch-event-source";
import {
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  validateUIMessages,
} from "ai";

import {
  api,
  BASE,
  Chat,
  cuttingProxy,
  docsBlock,
  headers,
  newChat,
  recordingFetch,
  stored,
  text,
  transport,
  until,
} from "./helpers.mjs";

const LONG = "Tell me a long story about a connection cut half way through a reply, " +
  "with every detail you can think of, please, and then some more of it";

async function providerCalls(chatId) {
  const usage = await api(`chats/${chatId}/usage/`);
  return Object.values(usage.attempts).reduce((a, b) => a + b, 0);
}

// fetch-event-source reads `window` and `document` (a browser library): a page without tabs
globalThis.document ??= { hidden: false, addEventListener() {}, removeEventListener() {} };

test("fetch-event-source retries a cut streaming POST: one prompt, one run, the rest replayed", async () => {
  const proxy = await cuttingProxy(BASE);
  try {
    const { id } = await newChat([]);
    const sent = [];
    const answered = [];
    // the page's fetch, on the proxy's origin; it records what each attempt sent and got
    globalThis.window = {
      setTimeout,
      clearTimeout,
      fetch: async (url, init) => {
        sent.push({ ...init.headers });
        const response = await fetch(new URL(url, proxy.url), init);
        answered.push({ status: response.status, replayed: response.headers.get("idempotent-replayed") });
        return response;
      },
    };
    const ask = new Function("fetchEventSource", "headers",
      `${docsBlock("import { fetchEventSource }")}\nreturn ask;`)(fetchEventSource, headers);
    const cut = proxy.cut({ request: `POST /api/chats/${id}/messages/`, marker: "event: text_delta", count: 3 });
    const events = [];
    await ask(id, LONG, (event, data) => events.push({ event, data }));
    await cut;

    // two attempts: the second with the same key, after the last event the first got
    assert.equal(sent.length, 2, JSON.stringify(answered));
    assert.ok(sent[0]["Idempotency-Key"]);
    assert.equal(sent[1]["Idempotency-Key"], sent[0]["Idempotency-Key"]);
    assert.ok(sent[1]["last-event-id"], "the retry says where the first stream broke");
    assert.deepEqual(answered, [{ status: 200, replayed: null }, { status: 200, replayed: "true" }]);
    // one run's events, each once: the retry went on where the cut left off
    const kinds = events.map((e) => e.event);
    assert.equal(kinds.filter((k) => k === "run_started").length, 1);
    assert.equal(kinds.filter((k) => k === "run_finished").length, 1);
    assert.equal(kinds.at(-1), "run_finished");
    assert.equal(events.at(-1).data.status, "succeeded");
    const shown = events.filter((e) => e.event === "text_delta").map((e) => e.data.content).join("");

    const messages = await stored(id);
    assert.deepEqual(messages.map((m) => m.role), ["user", "assistant"]);
    assert.equal(messages[1].content, shown, "what the page showed is the stored reply");
    assert.equal((await api(`chats/${id}/runs/`)).results.length, 1);
    assert.equal(await providerCalls(id), 1);
  } finally {
    delete globalThis.window;
    await proxy.close();
  }
});

test("without wholeStreams, the SDK does not take a cut UI stream for a disconnect", async () => {
  // what docs/frontends.md's wholeStreams is for: under runserver the half reply looks
  // finished; under uvicorn Node's fetch says "terminated", which the SDK takes for an
  // error, not a disconnect. Either way nothing resumes.
  const proxy = await cuttingProxy(BASE);
  try {
    const { id } = await newChat([]);
    const finished = [];
    const chat = new Chat({
      id: String(id),
      transport: new DefaultChatTransport({ api: `${proxy.url}/api/ui/chat`, headers }),
      onError: () => {},
      onFinish: (event) => finished.push(event),
    });
    const cut = proxy.cut({ request: "POST /api/ui/chat", marker: '"text-delta"', count: 3 });
    await chat.sendMessage({ text: LONG });
    await cut;
    assert.equal(finished.length, 1);
    assert.equal(finished[0].isDisconnect, false);
    assert.equal(finished[0].finishReason, undefined, "no finish chunk came");
    // the run went on in the server: its stored reply is longer than the one shown
    const ended = Date.now() + 30_000;
    while ((await api(`chats/${id}/runs/`)).results[0].status !== "succeeded") {
      assert.ok(Date.now() < ended, "the run did not end");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const messages = await stored(id);
    assert.ok(text(chat.messages.at(-1)).length < messages[1].content.length);
  } finally {
    await proxy.close();
  }
});

test("a cut UI stream resumes with the docs' recipe: the message is the stored reply", async () => {
  const proxy = await cuttingProxy(BASE);
  try {
    const { id } = await newChat([]);
    const log = [];
    const wholeStreams = new Function("fetch",
      `${docsBlock("async function wholeStreams")}\nreturn wholeStreams;`)(recordingFetch(log));
    const errors = [];
    let resumed = null;
    const chat = new Chat({
      id: String(id),
      transport: new DefaultChatTransport({ api: `${proxy.url}/api/ui/chat`, headers, fetch: wholeStreams }),
      onError: (e) => errors.push(e),
      // as docs/frontends.md's useChat does
      onFinish: ({ isDisconnect }) => {
        if (isDisconnect) resumed = chat.resumeStream();
      },
    });
    const cut = proxy.cut({ request: "POST /api/ui/chat", marker: '"text-delta"', count: 3 });
    await chat.sendMessage({ text: LONG });
    await cut;
    assert.ok(resumed, "onFinish saw a disconnect");
    assert.equal(errors.length, 1);
    assert.ok(errors[0] instanceof TypeError, String(errors[0]));
    await resumed;
    assert.equal(chat.status, "ready");
    assert.equal(chat.messages.length, 2, "the resumed reply replaces the cut one");
    assert.deepEqual(log.map((r) => [r.method, r.status]), [["POST", 200], ["GET", 200]]);
    assert.match(log[1].url, /\/api\/ui\/chat\/[^/]+\/stream$/);

    const reply = chat.messages.at(-1);
    const messages = await stored(id);
    assert.deepEqual(messages.map((m) => m.role), ["user", "assistant"]);
    assert.equal(text(reply), messages[1].content);
    assert.equal(reply.metadata.status, "succeeded");
    assert.equal(reply.metadata.storedMessageId, messages[1].id);
    assert.equal((await api(`chats/${id}/runs/`)).results.length, 1);
    assert.equal(await providerCalls(id), 1);
  } finally {
    await proxy.close();
  }
});

test("a reloaded denied call is output-denied with the approval the SDK's schema asks for", async () => {
  const { id } = await newChat(["demo_book_table"]);
  const errors = [];
  const chat = new Chat({
    id: String(id),
    transport: transport(),
    onError: (e) => errors.push(e),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  await chat.sendMessage({ text: "Please book a table at Chez Demo for 4" });
  const asked = chat.messages.at(-1).parts.find((p) => p.state === "approval-requested");
  await chat.addToolApprovalResponse({ id: asked.approval.id, approved: false });
  await until(() => chat.status === "ready" &&
    chat.messages.at(-1).parts.some((p) => p.state === "output-denied"), "the denial");
  assert.deepEqual(errors, []);
  const streamed = chat.messages.at(-1).parts.find((p) => p.state === "output-denied");

  const reloaded = await api(`ui/chat/${id}/messages`);
  assert.deepEqual(await validateUIMessages({ messages: reloaded }), reloaded);
  const part = reloaded.at(-1).parts.find((p) => p.type === "tool-demo_book_table");
  assert.equal(part.state, "output-denied");
  assert.equal(part.toolCallId, streamed.toolCallId);
  assert.deepEqual(part.approval, { id: asked.approval.id, approved: false });
  assert.deepEqual(JSON.parse(JSON.stringify(streamed.approval)), part.approval);
  // the schema insists: an output-denied part without its approval is refused
  const bare = structuredClone(reloaded);
  delete bare.at(-1).parts.find((p) => p.state === "output-denied").approval;
  await assert.rejects(validateUIMessages({ messages: bare }));

  // a Chat made from the reloaded messages goes on
  const again = new Chat({ id: String(id), transport: transport(), messages: reloaded });
  await again.sendMessage({ text: "Short one" });
  assert.equal(again.status, "ready");
  assert.equal(again.messages.at(-1).metadata.status, "succeeded");
});

test("stop() through wholeStreams stays an abort: nothing resumes, the next message is answered", async () => {
  const { id } = await newChat([]);
  const wholeStreams = new Function("fetch",
    `${docsBlock("async function wholeStreams")}\nreturn wholeStreams;`)(fetch);
  const errors = [];
  const finished = [];
  const chat = new Chat({
    id: String(id),
    transport: transport({ fetch: wholeStreams }),
    onError: (e) => errors.push(e),
    onFinish: (event) => {
      finished.push(event);
      if (event.isDisconnect) chat.resumeStream();
    },
  });
  const sent = chat.sendMessage({ text: LONG });
  await until(() => chat.messages.length === 2 && text(chat.messages.at(-1)).length > 0,
    "some streamed text");
  // as the docs' stop: the route, then the SDK's stop()
  const stopped = fetch(`${BASE}/api/ui/chat/${id}/stop`, { method: "POST", headers });
  chat.stop();
  assert.equal((await stopped).status, 200);
  await sent;
  assert.deepEqual(errors, []);
  assert.equal(finished.length, 1);
  assert.equal(finished[0].isAbort, true);
  assert.equal(finished[0].isDisconnect, false);
  assert.equal(chat.status, "ready");
  await chat.sendMessage({ text: "Short one" });
  assert.deepEqual(errors, []);
  assert.equal(chat.messages.at(-1).metadata.status, "succeeded");
});
