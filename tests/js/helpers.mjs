// What the JavaScript tests share: the live server (LLMCHAT_URL, LLMCHAT_TOKEN, given by
// tests/test_js_clients.py), a framework-free Chat and small API helpers.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import net from "node:net";

import { AbstractChat, DefaultChatTransport } from "ai";

export const BASE = process.env.LLMCHAT_URL;
export const headers = { Authorization: `Bearer ${process.env.LLMCHAT_TOKEN}` };

// The framework-free chat state (what @ai-sdk/react's useChat keeps in React state).
export class State {
  constructor(messages = []) {
    this.status = "ready";
    this.error = undefined;
    this.messages = messages;
  }
  pushMessage(message) {
    this.messages = [...this.messages, message];
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = [
      ...this.messages.slice(0, index),
      structuredClone(message),
      ...this.messages.slice(index + 1),
    ];
  }
  snapshot(value) {
    return structuredClone(value);
  }
}

export class Chat extends AbstractChat {
  constructor(options) {
    super({ ...options, state: new State(options.messages) });
  }
}

// fetch that keeps the chunks of every response, for the test to look at
export function recordingFetch(log) {
  return async (url, init) => {
    const response = await fetch(url, init);
    log.push({ url: String(url), method: init?.method ?? "GET", status: response.status,
               headers: response.headers, chunks: [] });
    const entry = log.at(-1);
    if (!response.body) return response;
    const [mine, theirs] = response.body.tee();
    (async () => {
      let text;
      try {
        text = await new Response(mine).text();
      } catch (error) { // a cut connection: the test looks at what the client saw
        entry.error = error;
        return;
      }
      for (const block of text.split("\n\n")) {
        if (block.startsWith("data: ")) entry.chunks.push(block.slice(6));
      }
    })();
    return new Response(theirs, { status: response.status, headers: response.headers });
  };
}

export function transport(extra = {}) {
  return new DefaultChatTransport({ api: `${BASE}/api/ui/chat`, headers, ...extra });
}

export async function api(path, init = {}) {
  const response = await fetch(`${BASE}/api/${path}`, {
    ...init,
    headers: { ...headers, "Content-Type": "application/json", ...(init.headers ?? {}) },
  });
  assert.ok(response.ok, `${path}: ${response.status} ${await response.clone().text()}`);
  return response.status === 204 ? null : response.json();
}

export async function newChat(tools) {
  return api("chats/", { method: "POST", body: JSON.stringify({ title: "js", tools }) });
}

export async function until(condition, what, seconds = 20) {
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) {
    if (condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.fail(`timed out waiting for ${what}`);
}

export const text = (message) =>
  message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");

export async function stored(chatId) {
  const page = await api(`chats/${chatId}/messages/`);
  return page.results;
}


// -- a network that fails -------------------------------------------------------------------
// A TCP proxy in front of the server that cuts a connection as a lost network would. A
// plan (`cut({ request, marker, count })`) arms the connection whose request starts with
// `request`: its response passes up to the `count`-th `marker`, then both sockets close.
// The client gets a FIN, no reset: under runserver, whose streams end when the connection
// does, the body ends as if whole; under uvicorn a chunked body ends short (an error).
export async function cuttingProxy(target) {
  const { hostname, port } = new URL(target);
  const plans = [];
  const sockets = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), hostname);
    sockets.add(client);
    sockets.add(upstream);
    let plan = null;
    let seen = 0;
    const drop = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("data", (data) => {
      if (plan === null) {
        const text = data.toString("latin1");
        const i = plans.findIndex((p) => text.startsWith(p.request));
        if (i >= 0) [plan] = plans.splice(i, 1);
      }
      upstream.write(data);
    });
    upstream.on("data", (data) => {
      if (plan === null || plan.done) {
        if (plan === null) client.write(data);
        return;
      }
      let from = 0;
      while (seen < plan.count) {
        const at = data.indexOf(plan.marker, from);
        if (at < 0) break;
        seen += 1;
        from = at + plan.marker.length;
      }
      if (seen < plan.count) {
        client.write(data);
        return;
      }
      plan.done = true;
      client.end(data.subarray(0, from)); // mid-frame: what a lost network leaves
      upstream.destroy();
      plan.resolve();
    });
    client.on("end", () => upstream.end());
    upstream.on("end", () => client.end());
    client.on("error", drop);
    upstream.on("error", drop);
    client.on("close", () => sockets.delete(client));
    upstream.on("close", () => sockets.delete(upstream));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    /** Arm the next connection sending `request`; resolves once it was cut. */
    cut({ request, marker, count = 1 }) {
      return new Promise((resolve) => plans.push({ request, marker, count, resolve }));
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

// -- the docs' recipes -----------------------------------------------------------------------
/** The one ```javascript block of docs/frontends.md containing `marker`, imports left out. */
export function docsBlock(marker) {
  const page = readFileSync(new URL("../../docs/frontends.md", import.meta.url), "utf8");
  const blocks = [...page.matchAll(/^```javascript\n([\s\S]*?)^```/gm)].map((m) => m[1]);
  const found = blocks.filter((block) => block.includes(marker));
  assert.equal(found.length, 1, `one block of docs/frontends.md with ${marker}`);
  return found[0].replace(/^import .*$/gm, "");
}
