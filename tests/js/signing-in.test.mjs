// docs/frontends.md's "Another origin: a token" recipes, run as pasted against a live
// server (started by tests/test_js_clients.py: LLMCHAT_URL, user "js"): the token from the
// user's credentials, the chat list with it, and follow() reading a chat's events.
import assert from "node:assert/strict";
import { test } from "node:test";

import { BASE, api, docsBlock, newChat, until } from "./helpers.mjs";

// the docs' https://api.example.com is the live server; `signal` ends follow()'s stream
const following = new AbortController();
const toServer = (url, init = {}) =>
  fetch(String(url).replace("https://api.example.com", BASE), {
    signal: following.signal,
    ...init,
  });

// a block's statements in an async function of the names it leaves free
const run = (marker, names, result) =>
  new Function("fetch", ...names, `return (async () => {\n${docsBlock(marker)}\nreturn ${result};\n})();`);

test("a token from the credentials, the chats with it, a chat's events followed", async () => {
  const token = await run("api/auth/token/", ["username", "password"], "token")(
    toServer, "js", "js-password",
  );
  assert.match(token, /^[0-9a-f]{40}$/);
  const { id } = await newChat([]);
  const { headers, chats } = await run("const chats = await", ["token"],
    "{ headers, chats }")(toServer, token);
  assert.deepEqual(headers, { Authorization: `Bearer ${token}` });
  assert.ok(chats.results.some((chat) => chat.id === id), "the new chat is listed");

  const follow = run("async function follow", ["headers"], "follow")(toServer, headers);
  const events = [];
  const followed = (await follow)(id, (event, data, eventId) => events.push({ event, data, eventId }))
    .catch((error) => (following.signal.aborted ? null : Promise.reject(error)));
  await new Promise((resolve) => setTimeout(resolve, 300)); // the stream is open
  await api(`chats/${id}/messages/`, { method: "POST", body: JSON.stringify({ content: "Hello" }) });
  await until(() => events.some((e) => e.event === "run_finished"), "run_finished", 30);
  following.abort();
  await followed;
  const text = events.filter((e) => e.event === "text_delta").map((e) => e.data.content).join("");
  assert.match(text, /Hello/);
  assert.ok(events.every((e) => e.eventId), "each event has its id, for Last-Event-ID");
});
