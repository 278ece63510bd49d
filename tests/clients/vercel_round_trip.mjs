// The Vercel AI SDK's tool round trip against a Responses server, for tests/clients/test_frameworks.py.
// Usage: node vercel_round_trip.mjs BASE_URL generate|stream
// Prints one JSON line: {"text", "reasoning"} (the reasoning of every step, joined), or {"error"}.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";

globalThis.AI_SDK_LOG_WARNINGS = false;
const [baseURL, mode] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey: "unused" });
const tools = {
  get_weather: tool({
    description: "Get the weather for a city.",
    inputSchema: jsonSchema({ type: "object", properties: { city: { type: "string" } }, required: ["city"] }),
    execute: async () => "sunny, 21 C",
  }),
};
const options = {
  model: openai.responses("gpt-oss-20b"),
  prompt: "What is the weather in Paris?",
  tools,
  stopWhen: stepCountIs(3),
  maxRetries: 0,
  // The SDK knows reasoning models by name; gpt-oss is one, and only then does it ask for summaries.
  providerOptions: { openai: { reasoningSummary: "auto", forceReasoning: true } },
};
try {
  if (mode === "stream") {
    const result = streamText(options);
    let reasoning = "";
    for await (const part of result.fullStream) {
      if (part.type === "reasoning-delta") reasoning += part.text;
      if (part.type === "error") throw part.error;
    }
    console.log(JSON.stringify({ text: await result.text, reasoning }));
  } else {
    const result = await generateText(options);
    const reasoning = result.steps.map((step) => step.reasoningText ?? "").join("");
    console.log(JSON.stringify({ text: result.text, reasoning }));
  }
} catch (error) {
  console.log(JSON.stringify({ error: String(error?.message ?? error) }));
}
