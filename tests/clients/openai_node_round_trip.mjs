// openai-node's tool round trip against a Responses server, for tests/clients/test_frameworks.py.
// Usage: node openai_node_round_trip.mjs BASE_URL items|previous|stream
// Prints one JSON line: {"text", "reasoning"} (the reasoning items' text as the SDK got it), or {"error"}.
import OpenAI from "openai";

const [baseURL, mode] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const tools = [
  {
    type: "function",
    name: "get_weather",
    description: "Get the weather for a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    strict: false,
  },
];
const question = [{ role: "user", content: "What is the weather in Paris?" }];

async function create(body) {
  if (mode !== "stream") return client.responses.create(body);
  const stream = client.responses.stream(body);
  for await (const _event of stream) {
    // consumed for the accumulator
  }
  return stream.finalResponse();
}

function reasoningOf(response) {
  return response.output
    .filter((item) => item.type === "reasoning")
    .map((item) => (item.content ?? []).map((part) => part.text).join(""))
    .join("");
}

try {
  const first = await create({ model: "gpt-oss-20b", input: question, tools });
  const call = first.output.at(-1);
  if (call.type !== "function_call") throw new Error(`expected a function call, got ${call.type}`);
  const output = { type: "function_call_output", call_id: call.call_id, output: "sunny, 21 C" };
  const second =
    mode === "previous"
      ? await create({ model: "gpt-oss-20b", previous_response_id: first.id, input: [output], tools })
      : await create({ model: "gpt-oss-20b", input: [...question, ...first.output, output], tools });
  console.log(JSON.stringify({ text: second.output_text, reasoning: reasoningOf(first) }));
} catch (error) {
  console.log(JSON.stringify({ error: String(error?.message ?? error) }));
}
