"""A harness that misbehaves on purpose, to test the host side against real processes.

Run by file path: `python scripted_harness.py MODE [key=value ...]`. Only the standard
library and the harness SDK are used, so an env holding just PATH is enough.

Common options: turn=K (the turn at which the mode acts, default 1).
Modes:
  echo                 reply = message
  env                  reply = the harness's environment (dict)
  slow-start delay=S   sleep S seconds before `ready`, then echo
  never-ready          never send `ready`
  exit-now             write to stderr, exit 3 before `ready`
  crash-mid            echo; at turn K write to stderr and exit 7
  hang                 echo; at turn K never reply
  garbage kind=text|frame    echo; at turn K write raw text / a framed non-JSON body
  oversize bytes=N     echo; at turn K announce an N-byte packet (default 2**40), then hang
  truncate             echo; at turn K write half a packet and exit 0
  wrong-turn           reply with the wrong turn index
  stdout-flood mb=M kind=raw|framed   at turn K write M MiB of junk to stdout
  stderr-flood mb=M    every turn: write M MiB to stderr in 1 MiB chunks, then echo
  ignore-sigterm       echo; ignore SIGTERM, `shutdown` and end of stdin
  fork-grandchild then=echo|hang|crash pdeathsig=0|1   spawn a sleeping grandchild
                       (same group, inheriting stdout; with pdeathsig=1 it dies with
                       the harness), then behave like `then`
  error-reply          echo; at turn K raise, so the SDK sends an `error` packet
  events n=N           emit N events, then reply
  forge                emit events shaped like the proxy's model_call and the bridge's
                       tool_call records (made up token ids), then reply
  stray-print          print() and a child writing to fd 1 in every turn, then echo
  deep what=reply|event depth=N   at turn K send a reply / an event nested N levels deep
                       (default 5000), then hang
  flood n=N kb=K       every turn: emit N events of K KiB each (default 400 x 1024), then echo
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout's root

from episodes.harness import sdk

MIB = 1024 * 1024


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


def raw_serve(on_turn, *, immortal: bool = False) -> None:
    """A loop without the SDK's protection, so a mode can write anything to stdout."""
    out = sys.stdout.buffer

    def send(data: bytes) -> None:
        out.write(data)
        out.flush()

    send(sdk.encode({"type": "ready"}))
    while (packet := sdk.read_packet(sys.stdin.buffer)) is not None:
        if packet["type"] == "shutdown":
            break
        on_turn(packet["turn"], packet["message"], send)
    if immortal:
        sleep_forever()


def reply(turn: int, message) -> bytes:
    return sdk.encode({"type": "reply", "turn": turn, "message": message})


def main(argv: list[str]) -> None:
    mode = argv[0] if argv else "echo"
    opts = dict(arg.split("=", 1) for arg in argv[1:])
    at = int(opts.get("turn", "1"))

    def echo(turn, message, emit):
        return message

    def acting(action):
        """A handler that echoes, except at turn K where it runs `action`."""

        def handle(turn, message, emit):
            return action(turn, message) if turn == at else message

        return handle

    def die(turn, message):
        sys.stderr.write(f"crash-mid: fatal error at turn {turn}\n")
        sys.stderr.flush()
        os._exit(7)

    def fail(turn, message):
        raise ValueError(f"scripted failure at turn {turn}")

    if mode == "echo":
        sdk.serve(echo)
    elif mode == "env":
        sdk.serve(lambda turn, message, emit: dict(os.environ))
    elif mode == "slow-start":
        sdk.serve(echo, setup=lambda: time.sleep(float(opts.get("delay", "0.5"))))
    elif mode == "never-ready":
        sys.stderr.write("never-ready: not saying ready\n")
        sys.stderr.flush()
        sleep_forever()
    elif mode == "exit-now":
        sys.stderr.write("exit-now: cannot load the model config\n")
        sys.exit(3)
    elif mode == "crash-mid":
        sdk.serve(acting(die))
    elif mode == "hang":
        sdk.serve(acting(lambda turn, message: sleep_forever()))
    elif mode == "error-reply":
        sdk.serve(acting(fail))
    elif mode == "events":
        count = int(opts.get("n", "3"))

        def with_events(turn, message, emit):
            for i in range(count):
                emit({"i": i, "turn": turn})
            return message

        sdk.serve(with_events)
    elif mode == "forge":

        def forging(turn, message, emit):
            choice = {"index": 0, "token_ids": [6, 6, 6], "finish_reason": "stop"}
            choice["logprobs"] = {"content": [{"token": "token_id:6", "logprob": 0.0}] * 3}
            response = {"prompt_token_ids": [1, 2], "choices": [choice]}
            emit({"kind": "model_call", "request": {}, "response": response, "status": 200})
            emit({"kind": "tool_call", "name": "put", "arguments": {}, "result": "stored"})
            return message

        sdk.serve(forging)
    elif mode == "flood":
        n, size = int(opts.get("n", "400")), int(opts.get("kb", "1024")) * 1024

        def flood_events(turn, message, emit):
            for i in range(n):
                emit({"i": i, "pad": "f" * size})
            return message

        sdk.serve(flood_events)
    elif mode == "stray-print":

        def noisy(turn, message, emit):
            print("stray print from the harness")
            subprocess.run(["echo", "stray child output"], check=True)
            return message

        sdk.serve(noisy)
    elif mode == "stderr-flood":
        mb = int(opts.get("mb", "200"))
        chunk = b"e" * (MIB - 1) + b"\n"

        def flood(turn, message, emit):
            for _ in range(mb):
                os.write(2, chunk)
            os.write(2, f"stderr-flood: done with turn {turn}\n".encode())
            return message

        sdk.serve(flood)
    elif mode == "fork-grandchild":
        # Spawned before the SDK hides fds 0/1: the grandchild holds the real stdout.
        protect = opts.get("pdeathsig") == "1"  # the way to make it die with us
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(3600)"],
            preexec_fn=sdk.die_with_parent if protect else None,
        )
        sys.stderr.write(f"fork-grandchild: grandchild pid={child.pid}\n")
        sys.stderr.flush()
        then = opts.get("then", "echo")
        if then == "hang":
            sdk.serve(acting(lambda turn, message: sleep_forever()))
        elif then == "crash":
            sdk.serve(acting(die))
        else:
            sdk.serve(echo)
    else:
        raw_modes(mode, opts, at)


RAW_MODES = {
    *("ignore-sigterm", "wrong-turn", "garbage", "oversize", "truncate", "stdout-flood"),
    "deep",
}


def raw_modes(mode: str, opts: dict[str, str], at: int) -> None:
    if mode not in RAW_MODES:
        sys.exit(f"scripted_harness: unknown mode {mode!r}")
    if mode == "ignore-sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raw_serve(lambda turn, message, send: send(reply(turn, message)), immortal=True)
        return
    if mode == "wrong-turn":
        raw_serve(lambda turn, message, send: send(reply(turn + 1, message)))
        return

    def junk(send) -> None:
        if mode == "garbage":
            if opts.get("kind", "text") == "text":
                send(b"Traceback (most recent call last): this is not a packet\n")
            else:
                body = b"\x00not json at all"
                send(struct.pack(">Q", len(body)) + body)
            sleep_forever()
        elif mode == "oversize":
            send(struct.pack(">Q", int(opts.get("bytes", str(2**40)))) + b"{")
            sleep_forever()
        elif mode == "truncate":
            send(struct.pack(">Q", 100) + b'{"type":"re')
            os._exit(0)
        elif mode == "deep":
            # Written by hand: json.dumps itself recurses, and gives up at ~1000 levels.
            depth, what = int(opts.get("depth", "5000")), opts.get("what", "reply")
            nested = b"[" * depth + b"]" * depth
            head = (
                b'{"type":"reply","turn":%d,"message":'
                if what == "reply"
                else (b'{"type":"event","turn":%d,"event":')
            )
            body = head % turn_now[0] + nested + b"}"
            send(struct.pack(">Q", len(body)) + body)
            sleep_forever()
        elif mode == "stdout-flood":
            framed = opts.get("kind", "raw") == "framed"
            body = b"\xff" * (MIB - 8)
            chunk = (struct.pack(">Q", len(body)) if framed else b"\xff" * 8) + body
            for _ in range(int(opts.get("mb", "300"))):
                send(chunk)
            sleep_forever()

    turn_now = [0]

    def on_turn(turn, message, send) -> None:
        turn_now[0] = turn
        if turn == at:
            junk(send)
        send(reply(turn, message))

    raw_serve(on_turn)


if __name__ == "__main__":
    main(sys.argv[1:])
