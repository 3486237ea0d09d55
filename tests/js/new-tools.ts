// A client made with openapi-fetch over the types openapi-typescript generated from the
// schema before the server registered `tide_times` or configured the MCP server `notes`
// (tests/api/test_generated_clients.py compiles it with tsc and runs it in node): it makes
// a chat with both, then reads the chat list and the chat. Tools are strings in the
// schema, so a name unknown at generation types and reads as any other.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema";

declare const process: { argv: string[] };

type ChatRequest = components["schemas"]["ChatRequest"];

const [base, token] = process.argv.slice(2);
const client = createClient<paths>({
  baseUrl: base,
  headers: { Authorization: `Token ${token}` },
});
const body: ChatRequest = { title: "tides (typescript)", tools: ["tide_times", "mcp:notes"] };
const created = await client.POST("/api/chats/", { body });
if (!created.data) throw new Error(`POST chats/: ${created.response.status}`);
const id = created.data.id;
const list = await client.GET("/api/chats/", { params: { query: { page_size: 100 } } });
if (!list.data) throw new Error(`GET chats/: ${list.response.status}`);
const one = await client.GET("/api/chats/{id}/", { params: { path: { id } } });
if (!one.data) throw new Error(`GET chats/${id}/: ${one.response.status}`);
const listed: Record<string, string[]> = {};
for (const chat of list.data.results) listed[String(chat.id)] = chat.tools ?? [];
console.log(JSON.stringify({ created: id, listed, one: one.data.tools ?? [] }));
