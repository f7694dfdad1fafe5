// A turn.stopped receiver written the way a consumer writes one: Node's own http and crypto, the
// signature checked over the raw bytes (as the spec's snippet does) before any JSON parsing.
//
//   WEBHOOK_SECRET=whsec_... node verify.mjs
//
// Prints {"listening": <port>} once, then one line per request: {"ok", "delivery_id", "event"}.
// Answers 200 to a delivery whose X-Signature verifies, 401 to anything else.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";

const secret = process.env.WEBHOOK_SECRET;
if (!secret) {
  console.error("set WEBHOOK_SECRET to the project's webhook secret");
  process.exit(2);
}

function verified(rawBody, header) {
  const expected = "sha256=" + createHmac("sha256", secret).update(rawBody).digest("hex");
  const wanted = Buffer.from(expected);
  const given = Buffer.from(header ?? "");
  // timingSafeEqual throws on buffers of different lengths, so a wrong-length header is simply not ours.
  return given.length === wanted.length && timingSafeEqual(wanted, given);
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const rawBody = Buffer.concat(chunks);
    const ok = verified(rawBody, req.headers["x-signature"]);
    const event = ok ? JSON.parse(rawBody.toString("utf8")) : null;
    console.log(JSON.stringify({ ok, delivery_id: req.headers["x-delivery-id"] ?? null, event }));
    res.writeHead(ok ? 200 : 401, { "content-type": "application/json" });
    res.end(JSON.stringify({ ok }));
  });
});

server.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ listening: server.address().port })));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
