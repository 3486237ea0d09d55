// Branches through the AI SDK's own Chat, unchanged, against a live server (started by
// tests/test_js_clients.py: LLMCHAT_URL, LLMCHAT_TOKEN, LLMCHAT_PROVIDER_LOG): regenerate
// keeps the old reply as an alternative, the SDK's edit flow branches and sends the
// provider only the edited path, and switching brings the other branch back.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { validateUIMessages } from "ai";

import { api, BASE, Chat, docsBlock, headers, newChat, stored, text, transport } from "./helpers.mjs";

// the requests the fake provider received, as the live server recorded them
function providerRequests() {
  try {
    return readFileSync(process.env.LLMCHAT_PROVIDER_LOG, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((line) => JSON.parse(line));
  } catch (error) {
    if (error.code === "ENOENT") return [];
    throw error;
  }
}

// a Chat Completions request's conversation: [role, text] without the system prompt
function conversation(request) {
  const textOf = (content) =>
    typeof content === "string"
      ? content
      : (content ?? []).map((part) => part.text ?? "").join("");
  return request.body.messages
    .filter((m) => m.role !== "system")
    .map((m) => [m.role, textOf(m.content)]);
}

async function uiMessages(chatId) {
  const messages = await api(`ui/chat/${chatId}/messages`);
  // the SDK's own schema of UIMessage[]
  assert.deepEqual(await validateUIMessages({ messages }), messages);
  return messages;
}

// the docs' recipes (docs/frontends.md), run as written, with the page's relative URLs
// sent to the live server
const relativeFetch = (url, init) => fetch(new URL(url, BASE), init);
const recipes = new Function(
  "fetch",
  `${docsBlock("async function editMessage")}\nreturn { editMessage, showAlternative };`,
)(relativeFetch);

// what useChat gives a component, over the framework-free Chat
const helpersOf = (chat) => ({
  get messages() {
    return chat.messages;
  },
  // as useChat's: the messages, or a function of the current ones
  setMessages: (messages) => {
    chat.messages = typeof messages === "function" ? messages(chat.messages) : messages;
  },
  sendMessage: (message) => chat.sendMessage(message),
});

function newSdkChat(id, errors) {
  return new Chat({ id: String(id), transport: transport(), onError: (e) => errors.push(e) });
}

test("regenerate keeps the old reply as an alternative; switching restores it", async () => {
  const { id } = await newChat([]);
  const errors = [];
  const chat = newSdkChat(id, errors);
  await chat.sendMessage({ text: "Hello there, tell me about branches" });
  const [question, first] = chat.messages;
  await chat.regenerate();
  assert.deepEqual(errors, []);
  const second = chat.messages.at(-1);
  assert.notEqual(second.id, first.id);
  assert.notEqual(second.metadata.storedMessageId, first.metadata.storedMessageId);

  // reloaded: the new reply, the old one its alternative
  let reloaded = await uiMessages(id);
  assert.deepEqual(reloaded.map((m) => m.id), [question.id, second.id]);
  assert.equal(text(reloaded[1]), text(second));
  assert.deepEqual(reloaded[1].metadata.branch, {
    index: 1,
    count: 2,
    siblings: [first.id, second.id],
    storedMessageIds: [first.metadata.storedMessageId, second.metadata.storedMessageId],
  });
  assert.equal(reloaded[0].metadata?.branch, undefined, "one question, no alternatives");
  // the streamed reply said so at its end already: no reload needed to draw "< 2/2 >"
  assert.deepEqual(second.metadata.branch, reloaded[1].metadata.branch);
  assert.equal(second.metadata.promptBranch, undefined, "its question has no alternatives");

  // thumbs down on the new reply: the reload carries the user's feedback
  await api(`chats/${id}/messages/${second.metadata.storedMessageId}/feedback/`, {
    method: "POST",
    body: JSON.stringify({ rating: -1, comment: "Not this one." }),
  });
  reloaded = await uiMessages(id);
  assert.deepEqual(reloaded[1].metadata.feedback, { rating: -1, comment: "Not this one." });
  // the REST transcript is the active path too
  let rows = await stored(id);
  assert.deepEqual(rows.map((m) => m.id), [rows[0].id, second.metadata.storedMessageId]);

  // switch back to the first reply (the docs' recipe: the REST route, then a reload)
  await recipes.showAlternative(String(id), reloaded[1], -1, { ...helpersOf(chat), headers });
  assert.deepEqual(chat.messages.map((m) => m.id), [question.id, first.id]);
  assert.equal(chat.messages[1].metadata.branch.index, 0);
  reloaded = await uiMessages(id);
  assert.deepEqual(reloaded.map((m) => m.id), [question.id, first.id]);
  rows = await stored(id);
  assert.equal(rows.at(-1).id, first.metadata.storedMessageId);

  // and the chat goes on from the restored branch
  const before = providerRequests().length;
  await chat.sendMessage({ text: "And one more thing" });
  assert.deepEqual(errors, []);
  const sent = providerRequests().slice(before);
  assert.equal(sent.length, 1);
  assert.deepEqual(conversation(sent[0]).map(([role]) => role), ["user", "assistant", "user"]);
  rows = await stored(id);
  assert.deepEqual(rows.slice(0, 2).map((m) => m.id), [rows[0].id, first.metadata.storedMessageId]);
  assert.equal(rows.length, 4);
});

test("the SDK's edit flow branches: the provider gets only the edited path", async () => {
  const { id } = await newChat([]);
  const errors = [];
  const chat = newSdkChat(id, errors);
  await chat.sendMessage({ text: "Tell me about apples" });
  await chat.sendMessage({ text: "Tell me about pears" });
  assert.deepEqual(errors, []);
  const old = [...chat.messages];

  // edit the second question as useChat does: setMessages(truncated), then sendMessage
  const before = providerRequests().length;
  await recipes.editMessage(helpersOf(chat), 2, "Tell me about plums");
  assert.deepEqual(errors, []);
  assert.equal(chat.status, "ready");
  const sent = providerRequests().slice(before);
  assert.equal(sent.length, 1, "one provider request for the edited question");
  const seen = conversation(sent[0]);
  assert.deepEqual(seen.map(([role]) => role), ["user", "assistant", "user"]);
  assert.equal(seen[0][1], "Tell me about apples");
  assert.equal(seen[1][1], text(old[1]));
  assert.equal(seen[2][1], "Tell me about plums");
  assert.ok(!JSON.stringify(sent[0].body).includes("pears"), "the old branch stays out");
  assert.match(text(chat.messages.at(-1)), /plums/);

  // the edited question shows its alternative before any reload: the reply's
  // promptBranch, moved onto it by the recipe
  const edited = chat.messages[2];
  const shown = edited.metadata.branch;
  assert.deepEqual(shown, {
    index: 1,
    count: 2,
    siblings: [old[2].id, edited.id],
    storedMessageIds: shown.storedMessageIds,
  });
  assert.equal(chat.messages[0].metadata?.branch, undefined, "the first question has none");

  // reloaded: the new path; the old question is the edited one's alternative
  let reloaded = await uiMessages(id);
  assert.deepEqual(reloaded[2].metadata.branch, shown, "as a reload gives it");
  assert.deepEqual(reloaded.map((m) => m.id), chat.messages.map((m) => m.id));
  assert.deepEqual(reloaded.map(text).slice(0, 3), ["Tell me about apples", text(old[1]), "Tell me about plums"]);
  const branch = reloaded[2].metadata.branch;
  assert.deepEqual(branch.siblings, [old[2].id, edited.id]);
  assert.equal(branch.index, 1);
  assert.equal(branch.count, 2);
  assert.equal(reloaded[3].metadata.branch, undefined, "the new reply has no alternative");
  let rows = await stored(id);
  assert.equal(rows.length, 4);
  assert.ok(!rows.some((m) => m.content.includes("pears")));

  // the old branch is reachable: switch to it, reload, the old path with its reply
  await recipes.showAlternative(String(id), reloaded[2], -1, { ...helpersOf(chat), headers });
  assert.deepEqual(chat.messages.map((m) => m.id), old.map((m) => m.id));
  reloaded = await uiMessages(id);
  assert.deepEqual(reloaded.map((m) => m.id), old.map((m) => m.id));
  assert.equal(text(reloaded[3]), text(old[3]));
  rows = await stored(id);
  assert.ok(rows.some((m) => m.content.includes("pears")));
  // and forward again to the edited one
  await recipes.showAlternative(String(id), reloaded[2], 1, { ...helpersOf(chat), headers });
  assert.deepEqual(chat.messages.map((m) => m.id), reloaded.slice(0, 2).map((m) => m.id)
    .concat([edited.id, chat.messages[3].id]));
  assert.match(text(chat.messages[3]), /plums/);
});

test("editing the first message branches at the root", async () => {
  const { id } = await newChat([]);
  const errors = [];
  const chat = newSdkChat(id, errors);
  await chat.sendMessage({ text: "Tell me about cherries" });
  const old = [...chat.messages];
  const before = providerRequests().length;
  await recipes.editMessage(helpersOf(chat), 0, "Tell me about grapes");
  assert.deepEqual(errors, []);
  const sent = providerRequests().slice(before);
  assert.deepEqual(conversation(sent[0]), [["user", "Tell me about grapes"]]);
  const reloaded = await uiMessages(id);
  assert.deepEqual(reloaded[0].metadata.branch.siblings, [old[0].id, chat.messages[0].id]);
  assert.deepEqual(chat.messages[0].metadata.branch, reloaded[0].metadata.branch);
  const rows = await stored(id);
  assert.deepEqual(rows.map((m) => m.role), ["user", "assistant"]);
  assert.equal(rows[0].content, "Tell me about grapes");
});

test("a message the server does not know before the last is a 400", async () => {
  const { id } = await newChat([]);
  const errors = [];
  const chat = newSdkChat(id, errors);
  await chat.sendMessage({ text: "Hello" });
  // a client that made up a turn: the transport's refusal is the SDK's error
  chat.messages = [
    ...chat.messages,
    { id: "made-up", role: "user", parts: [{ type: "text", text: "never sent" }] },
  ];
  await chat.sendMessage({ text: "Next" });
  assert.equal(chat.status, "error");
  assert.match(chat.error.message, /^messages: /);
  assert.match(chat.error.message, /made-up/);
  const rows = await stored(id);
  assert.equal(rows.length, 2, "nothing stored");
});
