// Opens a trace page in headless Chromium (@sparticuz/chromium's binary, driven by playwright-core) and
// reports what a user sees and does there, as JSON on stdout: the token timeline, a click on a token (its
// events), a click on an event (its token), the recovery, the timing plot, and every URL the page requested.
// Usage: node trace_page.mjs URL SCREENSHOT   (run from the folder where both packages are installed)
import chromium from "@sparticuz/chromium";
import { chromium as playwright } from "playwright-core";

const [url, screenshot] = process.argv.slice(2);
const browser = await playwright.launch({
  executablePath: await chromium.executablePath(),
  args: chromium.args,
  headless: true,
});
try {
  const context = await browser.newContext({ viewport: { width: 1200, height: 1000 } });
  const requested = [];
  context.on("request", (request) => requested.push(request.url()));
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (error) => errors.push(error.message));
  page.on("console", (message) => message.type() === "error" && errors.push(message.text()));
  await page.goto(url);
  await page.waitForSelector("#tokens .tok");

  const timeline = await page.$$eval("#tokens .tok", (nodes) =>
    nodes.map((n) => ({ i: Number(n.dataset.i), text: n.textContent, classes: n.className.split(" ") })),
  );
  const token = page.locator("#tokens .tok.ch-final.caused:not(.special)").first();
  const clickedToken = Number(await token.getAttribute("data-i"));
  await token.click();
  const eventsOfToken = await page.$$eval("#events .ev.selected", (nodes) => nodes.map((n) => Number(n.dataset.seq)));
  const tokenDetail = await page.textContent("#detail");

  const event = page.locator("#events .ev", { hasText: "response.output_text.delta" }).last();
  const clickedEvent = Number(await event.getAttribute("data-seq"));
  await event.click();
  const tokensOfEvent = await page.$$eval("#tokens .tok.selected", (nodes) => nodes.map((n) => Number(n.dataset.i)));

  const recovered = page.locator("#tokens .tok.recovered").first();
  const recoveredStyle = await recovered.evaluate((n) => {
    const style = getComputedStyle(n);
    return { outline: style.outlineStyle, color: style.outlineColor, width: style.outlineWidth };
  });
  const recoveries = await page.$$eval("#recoveries .recovery", (nodes) => nodes.map((n) => n.textContent));
  await page.locator("#recoveries .recovery").first().click();
  const tokensOfRecovery = await page.$$eval("#tokens .tok.selected", (nodes) => nodes.map((n) => Number(n.dataset.i)));

  const plot = await page.$$eval("#timing svg path.arrival", (nodes) => nodes.length);
  const toolBands = await page.$$eval("#timing svg rect.toolband", (nodes) => nodes.length);
  const timing = await page.textContent("#timing-figures");
  const toolMarkers = await page.$$eval("#tokens .marker.tool", (nodes) => nodes.map((n) => n.textContent));
  await page.locator("#tokens .tok.ch-final.caused:not(.special)").first().click();
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: screenshot });  // the first screen: timing, tokens, the selection
  console.log(
    JSON.stringify({
      timeline, clickedToken, eventsOfToken, tokenDetail, clickedEvent, tokensOfEvent, recoveredStyle, recoveries,
      tokensOfRecovery, plot, toolBands, timing, toolMarkers, requested, errors,
    }),
  );
} finally {
  await browser.close();
}
