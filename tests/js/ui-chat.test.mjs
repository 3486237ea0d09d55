// The AI SDK's Chat and DefaultChatTransport, unchanged, against a live server
// (started by tests/test_js_clients.py: LLMCHAT_URL, LLMCHAT_TOKEN).
import assert from "node:assert/strict";
import { test } from "node:test";

import { lastAssistantMessageIsCompleteWithApprovalResponses, validateUIMessages } from "ai";

import {
  api,
  BASE,
  Chat,
  headers,
  newChat,
  recordingFetch,
  stored,
  text,
  transport,
  until,
} from "./helpers.mjs";

test("a made-up chat id: the chat is created, the reply streams, then regenerate", async () => {
  const log = [];
  const errors = [];
  const id = `spa-${Math.random().toString(36).slice(2)}`;
  const chat = new Chat({ id, transport: transport({ fetch: recordingFetch(log) }),
                          onError: (e) => errors.push(e) });
  await chat.sendMessage({ text: "Hello there, how are you?" });
  assert.deepEqual(errors, []);
  assert.equal(chat.status, "ready");
  const [user, reply] = chat.messages;
  assert.equal(user.role, "user");
  assert.equal(reply.role, "assistant");
  assert.match(text(reply), /offline demo model/);
  assert.ok(reply.parts.some((p) => p.type === "reasoning" && p.text.length > 0));
  // streamed: many deltas, the protocol's header, [DONE] last
  const response = log[0];
  assert.equal(response.headers.get("x-vercel-ai-ui-message-stream"), "v1");
  assert.equal(response.chunks.at(-1), "[DONE]");
  const deltas = response.chunks.filter((c) => c.includes('"text-delta"'));
  assert.ok(deltas.length > 3, `only ${deltas.length} text deltas`);
  // metadata: the chat, the run, tokens and USD cost
  const { chatId, runId, status, tokens, storedMessageId } = reply.metadata;
  assert.equal(status, "succeeded");
  assert.ok(tokens.input_tokens > 0 && tokens.output_tokens > 0);
  assert.equal(reply.id, `run-${runId}`);
  const chats = await api("chats/");
  const mine = chats.results.find((c) => c.id === chatId);
  assert.ok(mine, "the chat was created for the user");
  let messages = await stored(chatId);
  assert.deepEqual(messages.map((m) => m.role), ["user", "assistant"]);
  assert.equal(messages[1].id, storedMessageId);
  assert.equal(messages[1].content, text(reply));

  // the same made-up id again: the same chat
  await chat.sendMessage({ text: "Short one" });
  assert.equal(chat.status, "ready");
  messages = await stored(chatId);
  assert.equal(messages.length, 4);
  const before = await api(`chats/${chatId}/usage/`);

  await chat.regenerate();
  assert.deepEqual(errors, []);
  assert.equal(chat.messages.length, 4);
  const regenerated = chat.messages.at(-1);
  assert.notEqual(regenerated.metadata.runId, reply.metadata.runId);
  messages = await stored(chatId);
  assert.deepEqual(messages.map((m) => m.role), ["user", "assistant", "user", "assistant"]);
  assert.equal(messages[3].content, text(regenerated));
  assert.equal(messages[3].id, regenerated.metadata.storedMessageId);
  const after = await api(`chats/${chatId}/usage/`);
  // the replaced reply's usage stays: the totals grew by the new run
  assert.ok(after.tokens.input_tokens > before.tokens.input_tokens);
  const runs = await api(`chats/${chatId}/runs/`);
  assert.equal(runs.results.length, 3);
});

test("message ids a client numbers per chat (m1 in each) are answered in every chat", async () => {
  // the SDK's generateId, one counter per chat: its messages' ids repeat across chats
  const perChat = () => { let n = 0; return () => `m${++n}`; };
  const chats = [];
  for (const name of ["a", "b"]) {
    const errors = [];
    const id = `numbered-${name}-${Math.random().toString(36).slice(2)}`;
    const chat = new Chat({ id, generateId: perChat(), transport: transport(),
                            onError: (e) => errors.push(e) });
    await chat.sendMessage({ text: `Hello from chat ${name}` });
    assert.deepEqual(errors, []);
    assert.equal(chat.status, "ready");
    assert.equal(chat.messages[0].id, "m1");
    chats.push(chat);
  }
  for (const chat of chats) {
    const chatId = chat.messages.at(-1).metadata.chatId;
    const reloaded = await api(`ui/chat/${chatId}/messages`);
    assert.deepEqual(reloaded.map((m) => m.id), chat.messages.map((m) => m.id));
  }
});

test("a tool call streams with its output", async () => {
  const { id } = await newChat(["demo_weather"]);
  const errors = [];
  const chat = new Chat({ id: String(id), transport: transport(), onError: (e) => errors.push(e) });
  await chat.sendMessage({ text: "What is the weather in Paris?" });
  assert.deepEqual(errors, []);
  const reply = chat.messages.at(-1);
  const call = reply.parts.find((p) => p.type === "tool-demo_weather");
  assert.ok(call, JSON.stringify(reply.parts));
  assert.equal(call.state, "output-available");
  assert.deepEqual(call.input, { city: "Paris" });
  assert.equal(call.output.city, "Paris");
  assert.ok(text(reply).includes("Paris"));
  assert.equal(reply.parts.filter((p) => p.type === "step-start").length, 2);
  const messages = await stored(id);
  assert.deepEqual(messages.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
  assert.equal(messages[1].tool_calls[0].name, "demo_weather");
  assert.equal(reply.metadata.storedMessageId, messages[3].id);
});

test("an approval round: approve, the run resumes in the same message", async () => {
  const { id } = await newChat(["demo_book_table"]);
  const errors = [];
  const chat = new Chat({
    id: String(id),
    transport: transport(),
    onError: (e) => errors.push(e),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  await chat.sendMessage({ text: "Please book a table at Chez Demo for 4" });
  assert.deepEqual(errors, []);
  let reply = chat.messages.at(-1);
  let call = reply.parts.find((p) => p.type === "tool-demo_book_table");
  assert.equal(call.state, "approval-requested");
  assert.equal(reply.metadata.status, "awaiting_approval");
  const chatRow = await api(`chats/${id}/`);
  assert.equal(chatRow.status, "awaiting_approval");

  await chat.addToolApprovalResponse({ id: call.approval.id, approved: true });
  await until(() => {
    const part = chat.messages.at(-1).parts.find((p) => p.type === "tool-demo_book_table");
    return chat.status === "ready" && part.state === "output-available";
  }, "the approved call's output");
  assert.deepEqual(errors, []);
  assert.equal(chat.messages.length, 2, "the continuation fills the same message");
  reply = chat.messages.at(-1);
  call = reply.parts.find((p) => p.type === "tool-demo_book_table");
  assert.match(call.output, /Booked a table for 4 at Chez Demo/);
  assert.equal(reply.metadata.status, "succeeded");
  const messages = await stored(id);
  assert.deepEqual(messages.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
  assert.equal(messages[1].tool_calls[0].approval, "approved");

  // a second booking, denied
  await chat.sendMessage({ text: "Now book a table at Le Rouge for 2" });
  reply = chat.messages.at(-1);
  call = reply.parts.find((p) => p.type === "tool-demo_book_table" && p.state === "approval-requested");
  await chat.addToolApprovalResponse({ id: call.approval.id, approved: false });
  await until(() => chat.status === "ready" &&
    chat.messages.at(-1).parts.some((p) => p.state === "output-denied"), "the denial");
  assert.deepEqual(errors, []);
  assert.equal(chat.messages.length, 4);
});

test("a dropped connection resumes from the server's event stream", async () => {
  const { id } = await newChat([]);
  const errors = [];
  let drop = true;
  // the first response breaks after its first text delta, as a lost network would
  const flaky = async (url, init) => {
    const response = await fetch(url, init);
    if (!drop || (init?.method ?? "GET") !== "POST") return response;
    drop = false;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let seen = "";
    const body = new ReadableStream({
      async pull(controller) {
        const { value, done } = await reader.read();
        if (done) return controller.close();
        seen += decoder.decode(value, { stream: true });
        controller.enqueue(value);
        if (seen.includes('"text-delta"')) {
          await reader.cancel();
          controller.error(new TypeError("network error"));
        }
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  const chat = new Chat({ id: String(id), transport: transport({ fetch: flaky }),
                          onError: (e) => errors.push(e) });
  await chat.sendMessage({ text: "Tell me something long about resuming" });
  assert.equal(chat.status, "error");
  assert.equal(errors.length, 1);
  const partial = text(chat.messages.at(-1));

  await chat.resumeStream();
  assert.equal(chat.status, "ready");
  assert.equal(chat.messages.length, 2, "the resumed reply replaces the partial one");
  const reply = chat.messages.at(-1);
  assert.ok(text(reply).length > partial.length);
  const messages = await stored(id);
  assert.deepEqual(messages.map((m) => m.role), ["user", "assistant"]);
  assert.equal(text(reply), messages[1].content);
  assert.equal(reply.metadata.status, "succeeded");

  // nothing runs any more: the reconnect answers 204 and the chat stays as it is
  await chat.resumeStream();
  assert.equal(chat.status, "ready");
  assert.equal(text(chat.messages.at(-1)), messages[1].content);
});

test("bad input is a 400 naming the field; another user's chat is not reachable", async () => {
  const response = await fetch(`${BASE}/api/ui/chat`, {
    method: "POST",
    headers: { ...headers, "Content-Type": "application/json" },
    body: JSON.stringify({ id: "x", messages: [], trigger: "nope" }),
  });
  assert.equal(response.status, 400);
  // a refusal is its message as text: what the transport puts in chat.error.message
  assert.equal(response.headers.get("content-type"), "text/plain; charset=utf-8");
  assert.match(await response.text(), /^trigger: /);
  const asJson = await fetch(`${BASE}/api/ui/chat`, {
    method: "POST",
    headers: { ...headers, "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify({ id: "x", messages: [], trigger: "nope" }),
  });
  const body = await asJson.json();
  assert.ok("trigger" in body, JSON.stringify(body));
  const missing = await fetch(`${BASE}/api/ui/chat/never-made/stream`, { headers });
  assert.equal(missing.status, 404);
  assert.equal(await missing.text(), "No such chat.");
  // the SDK's own error: the refusal's message, not a JSON body
  const errors = [];
  const refused = new Chat({ id: "x", transport: transport(), onError: (e) => errors.push(e) });
  await refused.sendMessage({
    parts: [{ type: "file", url: "https://example.com/a.png", mediaType: "image/png" }],
  });
  assert.equal(refused.status, "error");
  assert.equal(
    refused.error.message,
    "messages: part 0: a file part's url must be a base64 data: URL",
  );
  const anonymous = await fetch(`${BASE}/api/ui/chat`, { method: "POST", body: "{}" });
  assert.equal(anonymous.status, 401);
});

// -- a reload: the chat from ui/chat/{id}/messages --------------------------------------------
async function uiMessages(chatId) {
  const messages = await api(`ui/chat/${chatId}/messages`);
  // the SDK's own schema of UIMessage[]
  assert.deepEqual(await validateUIMessages({ messages }), messages);
  return messages;
}

// a message as JSON holds it (undefined fields dropped), without what only streaming sets
// (a reasoning part's id is the stream's)
function plain(message) {
  const copy = JSON.parse(JSON.stringify(message));
  for (const part of copy.parts) if (part.type === "reasoning") delete part.id;
  return copy;
}

test("a reloaded chat waiting for an approval shows it; approving it finishes the run", async () => {
  const { id } = await newChat(["demo_book_table"]);
  const errors = [];
  const options = {
    id: String(id),
    transport: transport(),
    onError: (e) => errors.push(e),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  };
  const first = new Chat(options);
  await first.sendMessage({ text: "Please book a table at Chez Demo for 4" });
  assert.deepEqual(errors, []);
  assert.equal(first.messages.at(-1).metadata.status, "awaiting_approval");

  // the page reloads: a new Chat with the stored messages
  const log = [];
  const chat = new Chat({ ...options, transport: transport({ fetch: recordingFetch(log) }),
                          messages: await uiMessages(id) });
  assert.deepEqual(chat.messages.map(plain), first.messages.map(plain));
  let call = chat.messages.at(-1).parts.find((p) => p.type === "tool-demo_book_table");
  assert.equal(call.state, "approval-requested");
  // a reconnect (useChat's resume) replays the waiting run into the same message
  await chat.resumeStream();
  assert.deepEqual(errors, []);
  assert.equal(log[0].method, "GET");
  assert.equal(log[0].status, 200);
  await until(() => log[0].chunks.at(-1) === "[DONE]", "the replay's end");
  assert.ok(log[0].chunks.some((c) => c.includes('"tool-approval-request"')));
  assert.equal(chat.messages.length, 2);
  assert.deepEqual(chat.messages.map(plain), first.messages.map(plain));
  call = chat.messages.at(-1).parts.find((p) => p.type === "tool-demo_book_table");
  assert.equal(call.state, "approval-requested");

  await chat.addToolApprovalResponse({ id: call.approval.id, approved: true });
  await until(() => {
    const part = chat.messages.at(-1).parts.find((p) => p.type === "tool-demo_book_table");
    return chat.status === "ready" && part.state === "output-available";
  }, "the approved call's output");
  assert.deepEqual(errors, []);
  assert.equal(chat.messages.length, 2, "the continuation fills the reloaded message");
  const reply = chat.messages.at(-1);
  assert.equal(reply.metadata.status, "succeeded");
  assert.match(text(reply), /Chez Demo/);
  // and reloaded again, the same chat
  assert.deepEqual((await uiMessages(id)).map(plain), chat.messages.map(plain));
});

test("a reloaded chat equals the streamed one: ids, parts, metadata", async () => {
  const clientId = `spa-${Math.random().toString(36).slice(2)}`;
  const errors = [];
  const chat = new Chat({ id: clientId, transport: transport(), onError: (e) => errors.push(e) });
  await chat.sendMessage({ text: "Hello there, how are you?" });
  const { chatId } = chat.messages.at(-1).metadata;
  await api(`chats/${chatId}/`, { method: "PATCH", body: JSON.stringify({ tools: ["demo_weather"] }) });
  await chat.sendMessage({ text: "What is the weather in Paris?" });
  assert.deepEqual(errors, []);
  assert.ok(chat.messages.at(-1).parts.some((p) => p.type === "tool-demo_weather"));
  assert.ok(chat.messages[1].parts.some((p) => p.type === "reasoning"));
  for (const chatKey of [clientId, String(chatId)]) {
    const reloaded = await uiMessages(chatKey);
    assert.deepEqual(reloaded.map((m) => m.id), chat.messages.map((m) => m.id));
    assert.deepEqual(reloaded.map(plain), chat.messages.map(plain));
  }
  // a Chat made from them goes on as the streamed one would
  const again = new Chat({ id: clientId, transport: transport(), messages: await uiMessages(clientId) });
  await again.sendMessage({ text: "Short one" });
  assert.equal(again.status, "ready");
  assert.equal(again.messages.length, 6);
  const missing = await fetch(`${BASE}/api/ui/chat/never-made/messages`, { headers });
  assert.equal(missing.status, 404);
});

const stopUrl = (id) => `${BASE}/api/ui/chat/${id}/stop`;
const LONG = "Tell me a long story about stopping a reply half way through, " +
  "with every detail you can think of, please, and then some more of it";

test("stop: the route cancels the run, the stream ends with what was stored", async () => {
  const { id } = await newChat([]);
  const errors = [];
  const log = [];
  const chat = new Chat({ id: String(id), transport: transport({ fetch: recordingFetch(log) }),
                          onError: (e) => errors.push(e) });
  const sent = chat.sendMessage({ text: LONG });
  await until(() => chat.messages.length === 2 && text(chat.messages.at(-1)).length > 0,
    "some streamed text");
  // only the route: the stream is left to end by itself, so the client reads every
  // delta the server sent (and stored) and then the end
  const stopped = await fetch(stopUrl(id), { method: "POST", headers });
  assert.equal(stopped.status, 200, await stopped.clone().text());
  const run = await stopped.json();
  assert.equal(run.cancel_requested, true);
  await sent;
  assert.deepEqual(errors, []);
  assert.equal(chat.status, "ready");
  const reply = chat.messages.at(-1);
  assert.equal(reply.metadata.status, "cancelled");
  assert.equal(reply.metadata.runId, String(run.id));
  await until(() => log[0].chunks.at(-1) === "[DONE]", "the recorded stream's end");
  const chunks = log[0].chunks.map((c) => (c === "[DONE]" ? c : JSON.parse(c).type));
  assert.deepEqual(chunks.slice(-3), ["abort", "finish", "[DONE]"]);
  const messages = await stored(id);
  assert.deepEqual(messages.map((m) => m.role), ["user", "assistant"]);
  assert.equal(messages[1].finish_reason, "cancelled");
  assert.equal(messages[1].content, text(reply), "the stored reply is the one shown");
  assert.ok(text(reply).length > 0);
  const runs = await api(`chats/${id}/runs/`);
  assert.equal(runs.results.find((r) => r.id === run.id).status, "cancelled");
  // nothing left to stop: a 409
  const again = await fetch(stopUrl(id), { method: "POST", headers });
  assert.equal(again.status, 409);
});

test("stop as useChat should: the route and chat.stop(); the next message is answered", async () => {
  const { id } = await newChat([]);
  const errors = [];
  const chat = new Chat({ id: String(id), transport: transport(),
                          onError: (e) => errors.push(e) });
  const stop = () => {
    const done = fetch(stopUrl(id), { method: "POST", headers });
    chat.stop();
    return done;
  };
  const sent = chat.sendMessage({ text: LONG });
  await until(() => chat.messages.length === 2 && text(chat.messages.at(-1)).length > 0,
    "some streamed text");
  const shown = () => text(chat.messages[1]);
  const stopped = await stop();
  assert.equal(stopped.status, 200);
  const oldRun = (await stopped.json()).id;
  await sent;
  assert.equal(chat.status, "ready");
  const partial = shown();
  await chat.sendMessage({ text: "Short one" });
  assert.deepEqual(errors, []);
  assert.equal(chat.status, "ready");
  assert.equal(chat.messages.at(-1).metadata.status, "succeeded");
  const runs = (await api(`chats/${id}/runs/`)).results;
  const old = runs.find((r) => r.id === oldRun);
  const next = runs.find((r) => r.id !== oldRun);
  assert.equal(old.status, "cancelled");
  assert.ok(new Date(old.finished_at) <= new Date(next.started_at),
    `the old run ended (${old.finished_at}) before the new one started (${next.started_at})`);
  const messages = await stored(id);
  assert.deepEqual(messages.map((m) => m.role), ["user", "assistant", "user", "assistant"]);
  // the client stopped reading at once: it shows a prefix of what was stored
  assert.ok(messages[1].content.startsWith(partial), `${partial} / ${messages[1].content}`);
  assert.equal(messages[1].finish_reason, "cancelled");
});
