// The tutorial's harness in Node.js (docs/tutorial.md), speaking the wire protocol
// (docs/protocol.md) directly: each packet is an 8-byte big-endian length, then that
// many bytes of one UTF-8 JSON object. stdout carries packets only: log to stderr.
import fs from "node:fs";

function readExact(n) {
  const buf = Buffer.alloc(n);
  let got = 0;
  while (got < n) {
    let k;
    try {
      k = fs.readSync(0, buf, got, n - got, null);
    } catch (e) {
      if (e.code === "EAGAIN") continue;
      if (e.code === "EOF") return null;
      throw e;
    }
    if (k === 0) return null; // end of stdin: the host is gone, exit
    got += k;
  }
  return buf;
}

function receive() {
  const header = readExact(8);
  if (header === null) return null;
  const body = readExact(Number(header.readBigUInt64BE(0)));
  return body === null ? null : JSON.parse(body.toString("utf8"));
}

function send(packet) {
  const body = Buffer.from(JSON.stringify(packet), "utf8");
  const header = Buffer.alloc(8);
  header.writeBigUInt64BE(BigInt(body.length));
  const whole = Buffer.concat([header, body]);
  for (let sent = 0; sent < whole.length; ) sent += fs.writeSync(1, whole, sent);
}

let total = 0; // the harness's memory: the process lives for the whole episode
send({ type: "ready" });
for (let p = receive(); p !== null && p.type !== "shutdown"; p = receive()) {
  if (p.type !== "turn") {
    console.error(`ignoring a ${p.type} packet`);
    continue;
  }
  const question = `What is ${total} + ${p.message.add}?`;
  send({ type: "event", turn: p.turn, event: { thinking: question } });
  total += p.message.add;
  send({ type: "reply", turn: p.turn, message: { total } });
}
